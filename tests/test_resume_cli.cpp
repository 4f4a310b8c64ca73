// Resume through the pptrain executable itself: a run that dies mid-training (an
// injected failure after its step-3 checkpoint) and is started again with the same
// command ends bit-for-bit where an uninterrupted run ends, for one process and for
// pp=2 x tp=2 under zbv.
#include <gtest/gtest.h>

#include <cstring>

#include "support/test_util.h"
#include "train/param_dump.h"

using namespace pptrain;
using namespace pptrain::testing;

namespace {

void check_resume(const std::string& layout, int ranks) {
  TempDir dir;
  auto r = prepare_markov_corpus(dir.file("d"), 19, 8000);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  write_file(dir.file("c.yaml"),
             "model: {n_layer: 4, n_head: 4, d_model: 16, seq_len: 8, vocab_size: 19}\n"
             "parallel: {microbatches: 4}\n"
             "training: {steps: 6, micro_batch_size: 2, lr: 1.0e-2, warmup_steps: 2, eval_every: 0}\n"
             "data: {train: '" + dir.file("d") + "/train_*.bin', shuffle: true}\n"
             "logging: {every: 1, sample_tokens: 0}\n");
  const std::string launch = ranks > 1 ? mpirun(ranks) : std::string("OMP_NUM_THREADS=1 ");
  const std::string base = launch + pptrain_bin() + " train " + dir.file("c.yaml") + " " + layout;
  // uninterrupted
  r = run_command(base + " --dump " + dir.file("straight"), 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // dies at step 4, after the step-3 checkpoint; the same command then resumes
  const std::string resumable = base + " checkpoint.dir=" + dir.file("ck") + " checkpoint.every=3 --dump " + dir.file("resumed");
  r = run_command("PPTRAIN_FAIL_AT=0:4 " + resumable, 120);
  ASSERT_NE(r.exit_code, 0) << r.output;
  ASSERT_NE(r.output.find("injected failure"), std::string::npos) << r.output;
  r = run_command(resumable, 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from step 3"), std::string::npos) << r.output;

  std::vector<std::string> a, b;
  for (int rank = 0; rank < ranks; ++rank) {
    a.push_back(dir.file("straight") + "/step6.rank" + std::to_string(rank) + ".bin");
    b.push_back(dir.file("resumed") + "/step6.rank" + std::to_string(rank) + ".bin");
  }
  GlobalDump want = read_param_dumps(a), got = read_param_dumps(b);
  EXPECT_EQ(got.loss, want.loss);
  ASSERT_EQ(got.tensors.size(), want.tensors.size());
  for (auto& [name, t] : want.tensors) {
    const auto& g = got.tensors.at(name);
    ASSERT_EQ(g.value.size(), t.value.size()) << name;
    EXPECT_EQ(std::memcmp(g.value.data(), t.value.data(), t.value.size() * sizeof(float)), 0)
        << name << " differs after resume";
  }
}

}  // namespace

TEST(ResumeCli, SingleProcessCrashAndResumeIsBitExact) { check_resume("", 1); }

TEST(ResumeCli, PipelineAndTensorParallelCrashAndResumeIsBitExact) {
  check_resume("parallel.pp=2 parallel.tp=2 parallel.schedule=zbv parallel.stages_per_rank=2", 4);
}
