// model.attention=flash in the trainer on the cpu backend (build/pptrain):
//  - flash against naive, single process, step by step for three optimizer steps: the loss
//    and every parameter gradient of step k, and every parameter after its AdamW update;
//  - pp=2 ZB-V and tp=2 with flash against the single-process flash run, two steps.
// As in test_parallel_equivalence.cpp, each step is compared from identical state (step 1
// from the common initialisation, step k from the reference's checkpoint after step k−1):
// the two runs then differ by rounding only, the loss and gradients normwise by the fp32
// chain bound of the flash config, the values by what AdamW makes of that gradient noise
// (support/tolerances.h). Free-running trajectories would not be comparable by any
// rounding count (an element at noise level moves by ±lr and the curvature does the rest).
#include <gtest/gtest.h>

#include <cstdio>
#include <iostream>
#include <map>

#include "core/config.h"
#include "support/dump_compare.h"
#include "support/test_util.h"

using namespace pptrain;
using namespace pptrain::testing;

namespace {

constexpr int kSteps = 3;

class FlashTrain : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto r = prepare_markov_corpus(dir_->file("data"), 19, 8000, 5);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // 4 blocks (one per stage of a pp=2 V), 2 heads (one per tp=2 rank), T = 16 (more than
    // a handful of keys per query); grad_clip 0 compares raw gradients.
    write_file(dir_->file("model.yaml"),
               "model: {n_layer: 4, n_head: 2, d_model: 16, seq_len: 16, vocab_size: 19}\n"
               "parallel: {microbatches: 4}\n"
               "training: {steps: 3, micro_batch_size: 2, lr: 1.0e-2, warmup_steps: 0, grad_clip: 0.0,"
               " eval_every: 0, weight_decay: 0.1}\n"
               "data: {train: '" + dir_->file("data") + "/train_*.bin'}\n"
               "logging: {every: 1, sample_tokens: 0}\n");
  }
  static void TearDownTestSuite() { delete dir_; }

  // `pptrain train` on `ranks` ranks with `overrides`, dumping every step into a fresh
  // directory, which it returns.
  static std::string train(int ranks, const std::string& overrides) {
    const std::string out = dir_->file("run" + std::to_string(runs_++));
    const std::string cmd = (ranks > 1 ? mpirun(ranks) : std::string("OMP_NUM_THREADS=1 ")) + pptrain_bin() +
                            " train " + dir_->file("model.yaml") + " " + overrides + " --dump " + out;
    auto r = run_command(cmd, 180);
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
    for (const char* attention : {"flash", "naive"})  // the startup line names the attention core run
      if (overrides.find(std::string("model.attention=") + attention) != std::string::npos) {
        EXPECT_NE(r.output.find(std::string("| attention ") + attention), std::string::npos) << r.output;
      }
    return out;
  }
  // Step `step` of a run, from its first `ranks` ranks (dp replica 0).
  static GlobalDump dump(const std::string& out, int ranks, int step) {
    std::vector<std::string> files;
    for (int rank = 0; rank < ranks; ++rank)
      files.push_back(out + "/step" + std::to_string(step) + ".rank" + std::to_string(rank) + ".bin");
    return read_param_dumps(files);
  }
  // A single-process run with a checkpoint after every step: its dumps and where they are.
  struct Reference {
    std::string checkpoints;
    std::map<int, GlobalDump> steps;
  };
  static Reference reference(const std::string& attention) {
    Reference ref;
    ref.checkpoints = dir_->file("reference_" + attention);
    const std::string out = train(1, "model.attention=" + attention + " checkpoint.dir=" + ref.checkpoints +
                                         " checkpoint.every=1 checkpoint.keep_last=" + std::to_string(kSteps));
    for (int k = 1; k <= kSteps; ++k) ref.steps[k] = dump(out, 1, k);
    return ref;
  }
  // Step k of a run with `overrides` on `ranks` ranks, from the reference's state after k − 1.
  static GlobalDump step_from(const Reference& ref, int ranks, const std::string& overrides, int k) {
    char ck[32];
    std::snprintf(ck, sizeof ck, "/step_%08d.h5", k - 1);
    const std::string resume = k == 1 ? "" : " checkpoint.resume=" + ref.checkpoints + ck;
    return dump(train(ranks, overrides + resume), ranks, k);
  }
  // Gradients and loss of step k, then the values after AdamW, within the bounds of the
  // flash config.
  static Verdict compare_step(const GlobalDump& got, const GlobalDump& want, int k) {
    const Config cfg = load_config(dir_->file("model.yaml"), {"model.attention=flash"});
    const StepBounds bounds = fp32_step_bounds(cfg);
    Verdict v = compare_gradients(got, want, bounds);
    v.add(compare_adamw_values(got, want, adamw_step(cfg, k), bounds.gradient));
    return v;
  }
  static void expect_equal_steps(const Reference& ref, int ranks, const std::string& overrides, int steps,
                                 const std::string& name) {
    for (int k = 1; k <= steps; ++k) {
      const Verdict v = compare_step(step_from(ref, ranks, overrides, k), ref.steps.at(k), k);
      const std::string what = name + " step " + std::to_string(k);
      EXPECT_TRUE(v.passed()) << v.failures(what);
      std::cout << what << ": " << v.summary() << "\n";
    }
  }

  static TempDir* dir_;
  static int runs_;
};
TempDir* FlashTrain::dir_ = nullptr;
int FlashTrain::runs_ = 0;

}  // namespace

TEST_F(FlashTrain, FlashEqualsNaiveStepByStep) {
  const Reference naive = reference("naive");
  expect_equal_steps(naive, 1, "model.attention=flash", kSteps, "flash against naive");
}

TEST_F(FlashTrain, PipelineAndTensorParallelFlashEqualTheSingleProcessFlashRun) {
  const Reference flash = reference("flash");
  expect_equal_steps(flash, 2,
                     "model.attention=flash parallel.pp=2 parallel.schedule=zbv parallel.stages_per_rank=2", 2,
                     "flash zbv pp2 against single");
  expect_equal_steps(flash, 2, "model.attention=flash parallel.tp=2", 2, "flash tp2 against single");
}
