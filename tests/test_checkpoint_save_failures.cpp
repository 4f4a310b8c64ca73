// Checkpoint saves that fail, through real training runs under pp=2 (tests/mpi/checkpoint_train,
// under mpirun with a timeout: a hang reads 124): a planted ENOSPC on one rank, a real full
// tmpfs where mounting is permitted, and a close of the abandoned file that HDF5 leaves
// out on one rank (a disk filled to its last block). Each: the same one line on every
// rank, a non-zero exit within the timeout, no .tmp left, `latest` and the previous
// checkpoint intact and loadable.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <iostream>
#include <string>

#include "support/checkpoint_train_run.h"
#include "support/checkpoint_util.h"
#include "support/test_util.h"

using namespace pptrain;
using namespace pptrain::testing;
namespace fs = std::filesystem;

namespace {

class CheckpointSaveFailures : public CheckpointTrainSuite {};

}  // namespace

TEST_F(CheckpointSaveFailures, FailedSaveUnderPp2FailsEveryRankAndKeepsThePreviousCheckpoint) {
  // Rank 1 holds h.3 under pp=2: its write of that dataset fails as on a full disk while
  // rank 0 writes on. Before, rank 1 unwound into H5Fclose's barrier while rank 0 waited
  // in H5Dwrite's allreduce: a hang. Bounded by a 60 s timeout (a hang reads 124).
  const std::string ck = dir_->file("wfail_ck");
  const std::string args = "parallel.pp=2 checkpoint.every=2 checkpoint.dir=" + ck;
  TrainRun first = train(2, args + " --stop-after 2");
  ASSERT_EQ(first.result.exit_code, 0) << first.result.output;
  TrainRun failed = train(2, args, "PPTRAIN_FAULTS=checkpoint_write_fail@1:model/h.3.mlp.fc.weight", 60);
  EXPECT_NE(failed.result.exit_code, 0) << failed.result.output;
  EXPECT_NE(failed.result.exit_code, 124) << "hung\n" << failed.result.output;
  const std::string message = "error: checkpoint " + ck + "/step_00000004.h5.tmp: dataset /model/h.3.mlp.fc.weight: "
                              "write failed: No space left on device (planted fault checkpoint_write_fail)";
  for (int rank = 0; rank < 2; ++rank)
    EXPECT_EQ(count_occurrences(failed.result.output, "[rank " + std::to_string(rank) + "] " + message), 1)
        << failed.result.output;
  EXPECT_EQ(failed.resumed_from, 2);
  EXPECT_FALSE(fs::exists(ck + "/step_00000004.h5.tmp"));
  EXPECT_FALSE(fs::exists(ck + "/step_00000004.h5"));
  EXPECT_EQ(read_file(ck + "/latest"), "step_00000002.h5\n");
  TrainRun again = train(2, args + " training.steps=4");
  EXPECT_EQ(again.result.exit_code, 0) << again.result.output;
  EXPECT_EQ(again.resumed_from, 2) << again.result.output;
  EXPECT_EQ(read_file(ck + "/latest"), "step_00000004.h5\n");
}

TEST_F(CheckpointSaveFailures, AFailedSavesCloseThatDesyncsIsBoundedAndNamesTheFailure) {
  // On a disk filled to its last block, HDF5's metadata flush in the abandoned file's close
  // fails on one rank, which then skips that flush's collective while the others wait in it
  // (seen: a 2-rank job hung there until the watchdog, whose line names no cause). Planted
  // here: rank 1's write fails, and rank 0 leaves the close out. The close is bounded by
  // half of runtime.watchdog_s (3 s of 6), and past it every rank prints the failure it
  // agreed on, once, and exits 1; no .tmp stays, `latest` still names the step-2 save.
  // The run's 60 s limit is the other tests' here: far above the 3 s bound, so a hang
  // reads 124.
  const std::string ck = dir_->file("desync_ck");
  const std::string args = "parallel.pp=2 checkpoint.every=2 runtime.watchdog_s=6 checkpoint.dir=" + ck;
  TrainRun first = train(2, args + " --stop-after 2");
  ASSERT_EQ(first.result.exit_code, 0) << first.result.output;
  TrainRun failed = train(
      2, args, "PPTRAIN_FAULTS=checkpoint_write_fail@1:model/h.3.mlp.fc.weight,checkpoint_abandon_desync@0", 60);
  EXPECT_NE(failed.result.exit_code, 0) << failed.result.output;
  EXPECT_NE(failed.result.exit_code, 124) << "hung\n" << failed.result.output;
  const std::string message = "error: checkpoint " + ck + "/step_00000004.h5.tmp: dataset /model/h.3.mlp.fc.weight: "
                              "write failed: No space left on device (planted fault checkpoint_write_fail) (and "
                              "closing the abandoned file did not finish within 3 s";
  for (int rank = 0; rank < 2; ++rank)
    EXPECT_EQ(count_occurrences(failed.result.output, "[rank " + std::to_string(rank) + "] " + message), 1)
        << failed.result.output;
  EXPECT_EQ(failed.result.output.find("watchdog"), std::string::npos) << failed.result.output;
  EXPECT_FALSE(fs::exists(ck + "/step_00000004.h5.tmp"));
  EXPECT_FALSE(fs::exists(ck + "/step_00000004.h5"));
  EXPECT_EQ(read_file(ck + "/latest"), "step_00000002.h5\n");
}

TEST_F(CheckpointSaveFailures, FullTmpfsUnderPp2FailsEveryRankAndKeepsThePreviousCheckpoint) {
  // A real full disk: a tmpfs with room for one checkpoint and half another. The model is
  // widened (values of about 3 MB) so that the space a save reserves first (the values
  // and a bound on HDF5's metadata, about 0.2 MB here) is close to the file's size.
  const std::string model = "parallel.pp=2 model.d_model=64 model.vocab_size=2048 ";
  const std::string probe = dir_->file("tmpfs_probe");
  TrainRun sizing = train(2, model + "training.steps=2 checkpoint.dir=" + probe);
  ASSERT_EQ(sizing.result.exit_code, 0) << sizing.result.output;
  const uint64_t one = fs::file_size(probe + "/step_00000002.h5");
  SmallTmpfs tmpfs(dir_->file("tmpfs"), (one * 3 / 2 + 4095) / 4096 * 4096);
  if (!tmpfs.mounted()) GTEST_SKIP() << tmpfs.error;
  const std::string ck = dir_->file("tmpfs/ck");
  TrainRun failed = train(2, model + "checkpoint.every=2 checkpoint.dir=" + ck, "", 60);
  EXPECT_NE(failed.result.exit_code, 0) << failed.result.output;
  EXPECT_NE(failed.result.exit_code, 124) << "hung\n" << failed.result.output;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string prefix = "[rank " + std::to_string(rank) + "] error: checkpoint " + ck + "/step_00000004.h5.tmp: ";
    const size_t at = failed.result.output.find(prefix);
    ASSERT_NE(at, std::string::npos) << failed.result.output;
    const std::string line = failed.result.output.substr(at, failed.result.output.find('\n', at) - at);
    EXPECT_NE(line.find("No space left on device"), std::string::npos) << line;
    EXPECT_EQ(count_occurrences(failed.result.output, prefix), 1) << failed.result.output;
    if (rank == 0) std::cout << "full tmpfs under pp=2: " << line << "\n";
  }
  EXPECT_FALSE(fs::exists(ck + "/step_00000004.h5.tmp"));
  EXPECT_EQ(read_file(ck + "/latest"), "step_00000002.h5\n");
  // The older checkpoint loads (into a run that saves elsewhere).
  TrainRun resumed = train(2, model + "training.steps=3 checkpoint.resume=" + ck + "/step_00000002.h5");
  EXPECT_EQ(resumed.result.exit_code, 0) << resumed.result.output;
  EXPECT_EQ(resumed.resumed_from, 2) << resumed.result.output;
}
