// `pptrain profile` (cli/profile.cpp) through the executable: one rank writes a cost file
// that reads back with the defaults for what one rank cannot measure and prints the table;
// two ranks under mpirun measure the transfer, the all-reduce and tp 2 beside tp 1, or the
// job's own tp only; bad arguments are one line; bf16 on the emulated cuda backend counts
// the bf16 copies and halves the activations.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "partition/cost_profile.h"
#include "partition/profile.h"
#include "support/test_util.h"

using namespace pptrain;
using namespace pptrain::testing;

namespace {

const char* kCommandConfig =
    "model: {n_layer: 2, n_head: 2, d_model: 16, seq_len: 8, vocab_size: 32}\n"
    "parallel: {pp: 2}\n"
    "training: {micro_batch_size: 2}\n";

}  // namespace

TEST(ProfileCommand, OneRankWritesTheDefaultsAndTheTable) {
  TempDir dir;
  write_file(dir.file("c.yaml"), kCommandConfig);
  const std::string out = dir.file("prof.json");
  auto r = run_command("cd " + dir.path() + " && OMP_NUM_THREADS=1 " + std::filesystem::absolute(pptrain_bin()).string() +
                           " profile c.yaml --repeats 3 training.micro_batch_size=3 --out " + out,
                       60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const CostProfile p = read_cost_profile(out);
  EXPECT_EQ(p.micro_batch_size, 3);  // the override
  EXPECT_FALSE(p.allreduce_measured);
  EXPECT_GT(p.block.forward_ms, 0);
  EXPECT_NE(r.output.find("block"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("wrote " + out), std::string::npos) << r.output;
  // No data.train: the layers are timed on uniform ids, and the table says so; with shards
  // there, on the first microbatch of them.
  EXPECT_NE(r.output.find("token ids: uniform over the vocabulary (data.train unset)"), std::string::npos) << r.output;
  ASSERT_EQ(prepare_markov_corpus(dir.file("data"), 32, 2000).exit_code, 0);
  r = run_command(pptrain_bin() + " profile " + dir.file("c.yaml") + " --repeats 2 --out " + out + " data.train=" +
                      dir.file("data") + "/train_*.bin",
                  60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("token ids: the first microbatch of data.train"), std::string::npos) << r.output;
  // Bad arguments: one line each, non-zero exit, nothing written.
  for (const std::string& bad : {std::string("--repeats 0"), std::string("--bogus"), std::string("parallel.tp=2"),
                                 std::string("--out ") + dir.file("no/such/dir.json")}) {
    r = run_command(pptrain_bin() + " profile " + dir.file("c.yaml") + " " + bad, 60);
    EXPECT_NE(r.exit_code, 0) << bad << "\n" << r.output;
    EXPECT_NE(r.output.find("error: "), std::string::npos) << bad << "\n" << r.output;
  }
}

TEST(ProfileCommand, TwoRanksMeasureTransferAndAllreduce) {
  TempDir dir;
  write_file(dir.file("c.yaml"), kCommandConfig);
  const std::string out = dir.file("prof.json");
  auto r = run_command(mpirun(2) + pptrain_bin() + " profile " + dir.file("c.yaml") + " --repeats 3 --out " + out, 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const CostProfile p = read_cost_profile(out);
  EXPECT_TRUE(p.allreduce_measured);
  EXPECT_GT(p.transfer_ms, 0);
  EXPECT_EQ(p.transfer_bytes, 2 * 8 * 16 * 4);
  EXPECT_GT(p.allreduce_bytes_per_ms, 0);
  EXPECT_GE(p.allreduce_latency_ms, 0);
  EXPECT_GT(p.head.forward_ms, 0);
  // tp = 2 measured beside tp = 1 (the two ranks as one tp group): half the block's weights each.
  ASSERT_EQ(p.other_tp.size(), 1u);
  EXPECT_EQ(p.other_tp[0].tp, 2);
  EXPECT_GT(p.other_tp[0].block.forward_ms, 0);
  EXPECT_LT(p.other_tp[0].block.param_bytes, p.block.param_bytes);
  EXPECT_NE(r.output.find("block tp2"), std::string::npos) << r.output;
  // The table is printed once (rank 0).
  size_t tables = 0;
  for (size_t at = r.output.find("wrote "); at != std::string::npos; at = r.output.find("wrote ", at + 1)) ++tables;
  EXPECT_EQ(tables, 1u) << r.output;
  // A job's tp (as its start-up profile measures it): that degree only, its shards' bytes;
  // the repeats from parallel.profile_repeats.
  const std::string job = dir.file("tp2.json");
  r = run_command(mpirun(2) + pptrain_bin() + " profile " + dir.file("c.yaml") +
                      " parallel.tp=2 parallel.profile_repeats=2 --out " + job,
                  60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("median of 2;"), std::string::npos) << r.output;
  const CostProfile q = read_cost_profile(job);
  EXPECT_EQ(q.tp, 2);
  EXPECT_TRUE(q.other_tp.empty());
  EXPECT_EQ(q.block.param_bytes, p.other_tp[0].block.param_bytes);
  EXPECT_EQ(q.head.optim_bytes, p.other_tp[0].head.optim_bytes);
  EXPECT_GT(q.transfer_ms, 0);
  // The planner scales from tp = 1 and refuses it with one line.
  r = run_command(pptrain_bin() + " plan " + dir.file("c.yaml") + " --ranks 2 --profile " + job, 60);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(job + ": tp: the planner needs layers timed at tp 1, this profile is of tp 2"),
            std::string::npos)
      << r.output;
}

TEST(ProfileCommand, Bf16OnTheEmulatedCudaBackendCountsTheCopiesAndHalvesActivations) {
  const std::string emu = pptrain_emu_bin();
  if (!std::filesystem::exists(emu)) GTEST_SKIP() << emu << " not built";
  TempDir dir;
  write_file(dir.file("c.yaml"), kCommandConfig);
  const std::string fp32 = dir.file("fp32.json"), bf16 = dir.file("bf16.json");
  auto r = run_command("OMP_NUM_THREADS=1 " + emu + " profile " + dir.file("c.yaml") + " device=cuda --repeats 1 --out " +
                           fp32 + " && OMP_NUM_THREADS=1 " + emu + " profile " + dir.file("c.yaml") +
                           " device=cuda training.precision=bf16 --repeats 1 --out " + bf16,
                       120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const CostProfile a = read_cost_profile(fp32), b = read_cost_profile(bf16);
  EXPECT_EQ(b.precision, "bf16");
  EXPECT_EQ(b.transfer_bytes * 2, a.transfer_bytes);
  EXPECT_EQ(b.block.param_bytes, a.block.param_bytes / 8 * 10);  // + the bf16 copy
  EXPECT_EQ(b.block.optim_bytes, a.block.optim_bytes);
  EXPECT_EQ(b.allreduce_bytes_per_ms, kDefaultCudaAllreduceBytesPerMs);
  // Everything but the fp32 row statistics halves.
  EXPECT_LT(b.block.act_iw_bytes, 0.55 * a.block.act_iw_bytes);
  EXPECT_GT(b.block.act_iw_bytes, 0.5 * a.block.act_iw_bytes);
}
