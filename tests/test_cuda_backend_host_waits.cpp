// No host waits inside a pipeline step on the cuda backend: the executor issues every
// compute action without waiting for the device (their times come from events read once at
// the pipeline's end, with the microbatches' losses), and the step's ids go up in one copy.
// Counted on the emulated runtime (pptrain-emu with PPTRAIN_EMU_HOST_WAITS: every
// cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize and cudaFree of the
// program), a step's waits must not grow with its microbatches or its stages: runs of 1 and
// 3 steps give the waits of 2 steps, compared at 1 and 4 microbatches, on one stage and on
// two stages of one rank (interleaved 1F1B, handed over in memory), and on two ranks of
// a pipeline (pp 2 over the emulated NCCL: a received activation or gradient is waited
// for by the compute stream, not by the host; its trace still shows every receive on the
// transfer track and no host wait for one), and over the staged MPI transport (a send is
// posted once its copy to the host is seen done, not after a host wait for it: the
// transport before that is the planted bug, 12 waits more). The planted fault
// sync_each_action (a wait after each compute action, as the executor once did) must add
// at least one wait per action. And the actions' device times still make a timeline: on
// the trace each compute action is one slice, one after another on track 0.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <string>

#include "support/host_waits.h"
#include "support/markov_model.h"
#include "support/test_util.h"

using namespace pptrain::testing;

namespace {

class CudaBackendHostWaits : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(pptrain_emu_bin())) << pptrain_emu_bin() << " not built";
    MarkovModel m;
    m.n_layer = 2;
    m.n_head = 2;
    m.training = "steps: 1, warmup_steps: 0";
    m.corpus_tokens = 4000;
    auto r = write_markov_model(dir_, m);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }

  // The waits of one run, over its ranks (each prints its count at exit). Of several ranks
  // the cudaFree are left out: each rank's caching allocator frees its blocks at exit, and
  // how many it grew to depends on when the pipeline's sends completed, which is timing.
  long long waits(const std::string& overrides, const std::string& env = "", int ranks = 1) {
    const std::string cmd = "PPTRAIN_EMU_HOST_WAITS=1 " + env + " " + mpirun(ranks) + pptrain_emu_bin() + " train " +
                            dir_.file("model.yaml") + " device=cuda " + overrides;
    const CommandResult r = run_command(cmd, 180);
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
    const HostWaits w = host_waits_of(r.output);
    if (w.ranks != ranks) {
      ADD_FAILURE() << w.ranks << " counts of host waits for " << ranks << " ranks in:\n" << r.output;
      return -1;
    }
    return w.waits - (ranks > 1 ? w.frees : 0);
  }

  // The waits of 2 steps: a run of 3 steps less a run of 1 (start-up and exit cancel out).
  long long waits_of_two_steps(const std::string& layout, const std::string& env = "", int ranks = 1) {
    return waits(layout + " training.steps=3", env, ranks) - waits(layout + " training.steps=1", env, ranks);
  }

  // A pp 2 layout's waits in 2 steps at 4 microbatches against 1: the same within the
  // step-end allowance (below: at most one wait a rank and step for a send not complete).
  void expect_pp2_waits_do_not_grow(const std::string& pp2, const std::string& what) {
    const long long base = waits_of_two_steps(pp2 + " parallel.microbatches=1", "", 2);
    EXPECT_GT(base, 0);
    const long long more = waits_of_two_steps(pp2 + " parallel.microbatches=4", "", 2) - base;
    EXPECT_GE(more, -2 * 2) << "the step-end send waits are at most one a rank and step either way";
    EXPECT_LE(more, 2 * 2) << what;
  }

  TempDir dir_;
};

TEST_F(CudaBackendHostWaits, AStepWaitsAsOftenWhateverItsMicrobatchesAndStages) {
  const std::string one_stage = "parallel.pp=1 parallel.schedule=1f1b";
  const std::string two_stages = "parallel.pp=1 parallel.stages_per_rank=2 parallel.schedule=interleaved-1f1b";
  const long long base = waits_of_two_steps(one_stage + " parallel.microbatches=1");
  // A step waits a few times (the ids' upload, the pipeline's end, the gradient norm, the
  // step's end): a handful, never zero (the count would then be broken).
  EXPECT_GT(base, 0);
  EXPECT_EQ(waits_of_two_steps(one_stage + " parallel.microbatches=4"), base) << "waits grew with the microbatches";
  EXPECT_EQ(waits_of_two_steps(two_stages + " parallel.microbatches=1"), base) << "waits grew with the stages";
  EXPECT_EQ(waits_of_two_steps(two_stages + " parallel.microbatches=4"), base)
      << "waits grew with the microbatches of two stages";
  // Planted: a wait after every compute action. One stage, 4 microbatches: F and B (1f1b)
  // each, 8 actions a step, so 2 steps wait at least 16 times more.
  const long long planted = waits_of_two_steps(one_stage + " parallel.microbatches=4", "PPTRAIN_FAULTS=sync_each_action");
  EXPECT_GE(planted - base, 16) << "the planted wait after each action was not counted";
}

// pp 2 over the emulated NCCL (MPI underneath). A host wait per received microbatch, as the
// receives once had, would add (4 - 1) x 2 steps on each rank between 1 and 4 microbatches.
// What may differ: at a step's end a rank waits for a send not yet complete (the last stage
// sends its last input gradient between that microbatch's I and W, and the MPI transfer
// under the emulated NCCL may need another progress call then, more often on a loaded
// machine): at most one a rank and step, 2 x 2 here, fewer than the per-receive waits' 12.
TEST_F(CudaBackendHostWaits, APipelineRankDoesNotWaitForItsReceives) {
  const std::string pp2 = "parallel.pp=2 parallel.schedule=1f1b";
  expect_pp2_waits_do_not_grow(pp2, "the ranks' waits grew with the microbatches they receive");
  // The trace still shows every receive, on the transfer track, ended when its completion
  // was seen, and no host wait for one: 2 steps x 3 microbatches a rank.
  const std::string trace = dir_.file("pp2_trace.json");
  const std::string cmd = mpirun(2) + pptrain_emu_bin() + " train " + dir_.file("model.yaml") + " device=cuda " + pp2 +
                          " parallel.microbatches=3 training.steps=2 logging.trace=" + trace;
  const CommandResult r = run_command(cmd, 180);
  ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  const std::string text = read_file(trace);
  for (const char* rank : {"0", "1"}) {
    const std::regex received(std::string("\"name\": \"[0-9]+RECV_[FB][0-9]+\", \"cat\": \"comm\", \"ph\": \"X\", "
                                          "\"pid\": ") + rank + ", \"tid\": 2,");
    const auto n = std::distance(std::sregex_iterator(text.begin(), text.end(), received), std::sregex_iterator());
    EXPECT_EQ(n, 2 * 3) << "receives of pp rank " << rank << " on its transfer track";
  }
  EXPECT_EQ(text.find("\"name\": \"wait "), std::string::npos) << "a host wait for a receive on the trace";
}

// pp 2 over the staged MPI transport (parallel.comm: mpi, the ranks of a one-GPU node): a
// send's device-to-host copy is not waited for by the host either; the send is posted once
// the copy is seen done (held back until then, parallel/staged_comm.h). A host wait per
// send, as the transport once had, would add (4 - 1) x 2 steps on each rank between 1 and 4
// microbatches, 12 in all; the same step-end allowance as over NCCL.
TEST_F(CudaBackendHostWaits, APipelineRankDoesNotWaitForItsStagedSends) {
  expect_pp2_waits_do_not_grow("parallel.pp=2 parallel.schedule=1f1b parallel.comm=mpi",
                               "the ranks' waits grew with the microbatches they send");
}

TEST_F(CudaBackendHostWaits, TheActionsDeviceTimesAreATimeline) {
  const std::string trace = dir_.file("trace.json");
  const std::string cmd = mpirun(1) + pptrain_emu_bin() + " train " + dir_.file("model.yaml") +
                          " device=cuda training.steps=2 parallel.pp=1 parallel.stages_per_rank=2"
                          " parallel.schedule=interleaved-1f1b parallel.microbatches=3 logging.trace=" + trace;
  const CommandResult r = run_command(cmd, 180);
  ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  const std::string text = read_file(trace);
  // Compute slices of track 0, in the order written (per step: issue order).
  std::regex slice("\"name\": \"([0-9]+[FBIW][0-9]+)\", \"cat\": \"compute\", \"ph\": \"X\", \"pid\": 0, \"tid\": 0, "
                   "\"ts\": ([-0-9.e+]+), \"dur\": ([-0-9.e+]+)");
  int slices = 0;
  double previous_end = -1e300;
  for (std::sregex_iterator it(text.begin(), text.end(), slice), end; it != end; ++it) {
    const double ts = std::stod((*it)[2]), dur = std::stod((*it)[3]);
    EXPECT_GE(dur, 0.0) << (*it)[1];
    // The device runs them in issue order: each starts where or after the last one ended
    // (the trace's times are printed to 0.001 us).
    EXPECT_GE(ts, previous_end - 0.002) << (*it)[1] << " starts before the action before it ended";
    previous_end = ts + dur;
    ++slices;
  }
  // 2 steps x 2 stages x 3 microbatches x (F, I, W): a B runs as its I and W (runtime_form,
  // pipeline/transform.h)
  EXPECT_EQ(slices, 2 * 2 * 3 * 3) << text.substr(0, 2000);
  EXPECT_NE(text.find("\"name\": \"the host's waits for receives\""), std::string::npos);
}

}  // namespace
