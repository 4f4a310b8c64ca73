// Bad input and failures under mpirun: every rank ends with a clear one-line message and
// a non-zero exit, never a hang (each launch runs under a timeout).
#include <gtest/gtest.h>

#include <chrono>

#include "support/test_util.h"

using namespace pptrain::testing;

namespace {

class ParallelErrors : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto r = prepare_markov_corpus(dir_->file("data"), 16, 5000);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    write_file(dir_->file("c.yaml"),
               "model: {n_layer: 4, n_head: 2, d_model: 16, seq_len: 8, vocab_size: 16}\n"
               "parallel: {microbatches: 4}\n"
               "training: {steps: 4, micro_batch_size: 2, eval_every: 0}\n"
               "data: {train: '" + dir_->file("data") + "/train_*.bin'}\n"
               "logging: {every: 1, sample_tokens: 0}\n");
  }
  static void TearDownTestSuite() { delete dir_; }

  // Launches `ranks` ranks and expects failure with `message` printed, within `limit_s`.
  static CommandResult expect_failure(int ranks, const std::string& args, const std::string& message,
                                      int limit_s = 60) {
    auto t0 = std::chrono::steady_clock::now();
    auto r = run_command(mpirun(ranks) + pptrain_bin() + " train " + dir_->file("c.yaml") + " " + args, limit_s);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.exit_code, 124) << "timed out (hang) after " << s << " s:\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << "expected '" << message << "' in:\n" << r.output;
    EXPECT_EQ(r.output.find("Segmentation"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
    return r;
  }
  static TempDir* dir_;
};
TempDir* ParallelErrors::dir_ = nullptr;

}  // namespace

TEST_F(ParallelErrors, WorldSizeMismatch) {
  auto r = expect_failure(3, "parallel.pp=2", "= 2 ranks, but the job has 3");
  // every rank detects it and says so (the first to abort may cut the others short,
  // but at least one line names its rank)
  EXPECT_NE(r.output.find("(rank "), std::string::npos) << r.output;
}

TEST_F(ParallelErrors, HeadsNotDivisibleByTensorParallel) {
  expect_failure(4, "parallel.tp=4", "tp 4 must divide model.n_head 2");
}

TEST_F(ParallelErrors, FewerLayersThanStages) {
  expect_failure(4, "parallel.pp=4 parallel.stages_per_rank=2 parallel.schedule=interleaved-1f1b",
                 "model.n_layer 4 is fewer than the 8 pipeline stages");
}

TEST_F(ParallelErrors, ScheduleConstraintViolated) {
  expect_failure(2, "parallel.pp=2 parallel.schedule=zbv parallel.stages_per_rank=1",
                 "parallel.schedule");
}

TEST_F(ParallelErrors, UnknownSchedule) {
  expect_failure(2, "parallel.pp=2 parallel.schedule=2f2b", "2f2b");
}

TEST_F(ParallelErrors, MalformedScheduleCsv) {
  write_file(dir_->file("bad.csv"), "0F0,0F1,0Q2\n1F0,1F1\n");
  expect_failure(2, "parallel.pp=2 parallel.microbatches=2 parallel.schedule=file:" + dir_->file("bad.csv"),
                 "bad.csv");
}

TEST_F(ParallelErrors, ScheduleCsvWithMissingBackward) {
  write_file(dir_->file("nob.csv"), "0F0,0F1\n1F0,1F1,1B0,1B1\n");
  expect_failure(2, "parallel.pp=2 parallel.microbatches=2 parallel.schedule=file:" + dir_->file("nob.csv"),
                 "missing");
}

TEST_F(ParallelErrors, OneRankFailingEndsTheJobQuickly) {
  auto t0 = std::chrono::steady_clock::now();
  auto r = run_command("PPTRAIN_FAULTS=fail_at@1:2 " + mpirun(2) + pptrain_bin() + " train " + dir_->file("c.yaml") +
                       " parallel.pp=2", 60);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << r.output;
  EXPECT_NE(r.output.find("[rank 1] error: injected failure on rank 1 at step 2"), std::string::npos) << r.output;
  EXPECT_LT(s, 30.0) << "the job took " << s << " s to end";
}
