// A finite loss spike (training.on_spike, train/spike_guard.h), through the pptrain
// executable. The planted fault spike_update:12:300 multiplies step 12's learning rate by
// 300 once per process: the loss of step 13 jumps about 6x above its running mean (2.9 ->
// 19 on this corpus), a real divergence that stays finite. With the defaults (factor 3,
// here a window of 5 steps):
//   - stop: exit 1 with one line naming step 13, and nothing saved from the spike on;
//     the same run without the fault completes (the guard does not fire on a healthy run),
//     and with on_spike: off the spiked run trains on (what the guard is for);
//   - rollback (pp 2): the newest checkpoint (step 10) is loaded, global batches 10 to 12
//     are skipped, the run completes, and its final checkpoint says data_next_batch =
//     steps + 3; a run resumed from its step-20 checkpoint ends bitwise where it ends
//     (the skipped batches are restored from the checkpoint, not re-read);
//   - a resumed run judges its first steps against the moving average its checkpoint
//     stored: a spike 3 steps after a resume (fewer than the window) is caught.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "checkpoint/checkpoint_reader.h"
#include "support/dump_compare.h"
#include "support/run_control.h"

using namespace pptrain;
using namespace pptrain::testing;
namespace fs = std::filesystem;

namespace {

const std::string kSpike = "PPTRAIN_FAULTS=spike_update:12:300 ";
const std::string kGuard = " training.steps=25 training.spike_window=5 checkpoint.every=5";

CheckpointMeta meta_of(const std::string& path) {
  IoGroup io = IoGroup::single();
  return read_checkpoint_meta(path, io);
}

}  // namespace

TEST_F(RunControl, ALossSpikeStopsTheRunWithoutSavingIt) {
  TempDir out;
  const std::string ck = out.file("ck");
  auto r = run_command(kSpike + train(1, kGuard + " checkpoint.dir=" + ck), 120);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("error: loss spike at step 13: loss "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("; stopped without saving (training.on_spike: stop)"), std::string::npos) << r.output;
  EXPECT_EQ(latest_of(ck), "step_00000010.h5") << r.output;
  EXPECT_FALSE(fs::exists(ck + "/step_00000015.h5"));

  // Not a guard that always fires: the healthy run completes.
  r = run_command(train(1, kGuard + " checkpoint.dir=" + out.file("healthy")), 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("loss spike"), std::string::npos) << r.output;
  // And the spike is real: without the guard the run trains on from it.
  r = run_command(kSpike + train(1, kGuard + " training.on_spike=off checkpoint.dir=" + out.file("off")), 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(latest_of(out.file("off")), "step_00000025.h5");

  // rollback needs the checkpoints it rolls back to.
  r = run_command(train(1, "training.on_spike=rollback"), 60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("key 'training.on_spike': rollback needs checkpoint.dir"), std::string::npos) << r.output;
}

TEST_F(RunControl, ALossSpikeRollsBackSkipsItsBatchesAndResumesBitExact) {
  TempDir out;
  const std::string ck = out.file("ck");
  auto r = run_command(kSpike + train(2, kGuard + " training.on_spike=rollback checkpoint.dir=" + ck + " --dump " +
                                             out.file("rolled")),
                       180);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("warning: loss spike at step 13: loss "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("; rolled back to " + ck + "/step_00000010.h5 (step 10), skipping global batches 10 to 12 "
                          "(rollback 1 of at most 3)"),
            std::string::npos)
      << r.output;
  const CheckpointMeta final_meta = meta_of(ck + "/step_00000025.h5");
  EXPECT_EQ(final_meta.step, 25);
  EXPECT_EQ(final_meta.data_next_batch, 28);

  // Resumed from step 20 in another folder: the same batches, the same bits at step 25.
  r = run_command(train(2, kGuard + " checkpoint.dir=" + out.file("ck2") + " checkpoint.resume=" + ck +
                               "/step_00000020.h5 --dump " + out.file("resumed")),
                  180);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Verdict v = compare_exact(read_param_dumps(dump_files(out.file("resumed"), 25, 2)),
                                  read_param_dumps(dump_files(out.file("rolled"), 25, 2)));
  EXPECT_TRUE(v.passed()) << v.failures("resumed after a rollback against the run that rolled back");
}

TEST_F(RunControl, ASpikeRightAfterAResumeIsCaughtByTheStoredAverage) {
  TempDir out;
  const std::string ck = out.file("ck");
  auto r = run_command(train(1, kGuard + " training.steps=10 checkpoint.dir=" + ck), 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const CheckpointMeta meta = meta_of(ck + "/step_00000010.h5");
  EXPECT_NE(meta.spike_guard.find(" 10"), std::string::npos) << meta.spike_guard;  // 10 losses averaged
  // Resumed at step 10 with the spike at 13: 3 steps into the run, fewer than spike_window 5.
  r = run_command(kSpike + train(1, kGuard + " checkpoint.dir=" + ck), 120);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("resumed from step 10"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("error: loss spike at step 13: loss "), std::string::npos) << r.output;
}
