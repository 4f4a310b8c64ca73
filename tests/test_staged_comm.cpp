// The cuda backend's groups over MPI through pinned host buffers (parallel.comm: mpi,
// parallel/staged_comm.h), the transport for ranks that share one GPU: pptrain-emu (the
// emulated cuda backend) runs one step of each layout with it, and its loss and every
// parameter gradient equal build/pptrain's cpu run of the same layout within the fp32
// chain bound (support/tolerances.h), as the NCCL path's tests do: pp 2 under 1F1B, ZB-H1,
// ZB-V and DualPipeV, pp 2 x tp 2 under ZB-V, dp 2 with ZeRO-1, pp 2 with
// post-validation; and three of them again with the device behind its host (late events),
// where sends and ZeRO-1's buckets are held back before they are posted. Planted bugs (one
// rank's gradient scaled, a skipped tensor-parallel all-reduce) are rejected by at least
// 3x the bound. In bf16, where two-rank sums round
// alike in any order, the staged transport gives NCCL's bits. auto picks it where the ranks
// share a device (PPTRAIN_EMU_DEVICES=1: a one-GPU node) and NCCL where each has its own;
// the preflight refuses ranks whose estimates together exceed their shared device. Also
// built with PPTRAIN_REAL_DEVICE into build/gpu-tests (mk/gpu_tests.mk), where
// scripts/gpu_check.sh runs the same layouts with every rank on the node's one GPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <string>
#include <tuple>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "support/dump_compare.h"
#include "support/host_waits.h"
#include "support/step_model.h"
#include "support/test_util.h"

using namespace pptrain;
using namespace pptrain::testing;
namespace fs = std::filesystem;

namespace {

// The trainer that runs device: cuda: pptrain-emu here; on a GPU (this file compiled with
// PPTRAIN_REAL_DEVICE into build/gpu-tests, run by scripts/gpu_check.sh), the real build,
// whose ranks then share the node's one GPU.
std::string cuda_bin() { return cuda_trainer_bin(); }

class StagedComm : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(cuda_bin())) << cuda_bin() << " not built";
    auto r = write_step_model(dir_, 6000);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }

  // One step of `layout` on `ranks` ranks; the merged dump of the dp-rank-0 ranks, and the
  // output in `out` when given.
  GlobalDump step(const std::string& name, const std::string& bin, const std::string& layout, int ranks,
                  const std::string& env = "", std::string* out = nullptr) {
    const std::string dump = dir_.file("dump_" + name);
    const std::string cmd = env + " " + mpirun(ranks) + bin + " train " + dir_.file("model.yaml") + " " + layout +
                            " --dump " + dump + " 2>&1";
    auto r = run_command(cmd, 240);
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
    if (out) *out = r.output;
    std::vector<std::string> files;
    for (int rank = 0; rank < ranks; ++rank)
      if (fs::exists(dump + "/step1.rank" + std::to_string(rank) + ".bin"))
        files.push_back(dump + "/step1.rank" + std::to_string(rank) + ".bin");
    if (files.empty()) {
      ADD_FAILURE() << "no dumps in " << dump << "\n" << r.output;
      return {};
    }
    return read_param_dumps(files);
  }

  // The staged-MPI cuda run against the cpu run of the same layout.
  Verdict staged_against_cpu(const std::string& name, const std::string& layout, int ranks,
                             const std::string& env = "") {
    GlobalDump cpu = step(name + "_cpu", pptrain_bin(), "device=cpu " + layout, ranks);
    std::string out;
    GlobalDump gpu = step(name + "_staged", cuda_bin(), "device=cuda parallel.comm=mpi " + layout, ranks,
                          env, &out);
    EXPECT_NE(out.find("| comm mpi through pinned host buffers (parallel.comm: mpi) |"), std::string::npos) << out;
    std::vector<std::string> overrides = split_words(layout);
    overrides.push_back("device=cuda");
    const Config cfg = load_config(dir_.file("model.yaml"), overrides);
    return compare_gradients(gpu, cpu, fp32_step_bounds(cfg));
  }

  void expect_equal(const std::string& name, const std::string& layout, int ranks) {
    const Verdict v = staged_against_cpu(name, layout, ranks);
    EXPECT_TRUE(v.passed()) << v.failures(layout);
    std::cout << name << ": " << v.summary() << "\n";
  }

  TempDir dir_;
};

}  // namespace

TEST_F(StagedComm, Pipeline1F1B) {
  expect_equal("1f1b", "parallel.pp=2 parallel.schedule=1f1b parallel.microbatches=4", 2);
}

TEST_F(StagedComm, PipelineZbH1) {
  expect_equal("zbh1", "parallel.pp=2 parallel.schedule=zb-h1 parallel.microbatches=4", 2);
}

TEST_F(StagedComm, PipelineZbV) {
  expect_equal("zbv", "parallel.pp=2 parallel.schedule=zbv parallel.stages_per_rank=2 parallel.microbatches=4", 2);
}

TEST_F(StagedComm, PipelineDualPipeV) {
  expect_equal("dualpipev",
               "parallel.pp=2 parallel.schedule=dualpipev parallel.stages_per_rank=2 parallel.microbatches=4", 2);
}

TEST_F(StagedComm, PipelineTimesTensorParallelZbV) {
  expect_equal("pp2tp2",
               "parallel.pp=2 parallel.tp=2 parallel.schedule=zbv parallel.stages_per_rank=2 parallel.microbatches=4",
               4);
}

TEST_F(StagedComm, DataParallelZero1) {
  expect_equal("dp2zero", "parallel.dp=2 parallel.zero=1 parallel.microbatches=2", 2);
}

TEST_F(StagedComm, PipelinePostValidation) {
  expect_equal("postval", "parallel.pp=2 parallel.microbatches=4 training.post_validation=true", 2);
}

// A device behind its host: every event answers its first queries "not ready"
// (PPTRAIN_EMU_LATE_EVENTS, emu/cuda_runtime_emu.h), so the sends and ZeRO-1's collectives
// are held back and posted later (by a later call, a request's wait() or the pipeline's
// end), out of step with where the host issued them: the same sums as the cpu run, and no
// hang (each run is under run_command's limit). Planted: a wait() that does not first post
// what is held leaves ZB-H1's last stage waiting for a gradient while its peer waits for an
// activation still held back: that run hangs here, and passes with the events on time.
// That the operations are held shows in the emulated runtime's count of host waits: the
// waits for copies not seen done add to a run's.
TEST_F(StagedComm, HeldBackOperationsUnderALateDevice) {
#ifdef PPTRAIN_REAL_DEVICE
  GTEST_SKIP() << "the late events are the emulator's; on a GPU the layouts above already run as late as it is";
#endif
  for (const auto& [name, layout, ranks] : std::vector<std::tuple<std::string, std::string, int>>{
           {"late_zbh1", "parallel.pp=2 parallel.schedule=zb-h1 parallel.microbatches=4", 2},
           {"late_pp2tp2",
            "parallel.pp=2 parallel.tp=2 parallel.schedule=zbv parallel.stages_per_rank=2 parallel.microbatches=4", 4},
           {"late_dp2zero", "parallel.dp=2 parallel.zero=1 parallel.microbatches=2", 2}}) {
    // 3 "not ready" answers an event: a held operation is seen not ready by its own hold and
    // the next polls, so it is posted by a later poll or by a wait() (the not-yet paths),
    // while the run still ends in a step, not in events that never answer.
    const Verdict v = staged_against_cpu(name, layout, ranks, "PPTRAIN_EMU_LATE_EVENTS=3");
    EXPECT_TRUE(v.passed()) << v.failures(layout);
    std::cout << name << ": " << v.summary() << "\n";
  }
  // Host waits of a ZB-H1 step of 8 microbatches (16 sends) without the cudaFree (how many
  // blocks each caching allocator frees at exit is timing), with events on time and with
  // events that never answer "done" (1000 queries each): then each held send is posted
  // only after a wait for its copy, 16 more (measured). Asked: at least half of them, so
  // that the step-end allowance (a wait a rank for a send not complete) cannot make it.
  const auto waits = [&](const std::string& late) {
    std::string out;
    step("waits" + late, cuda_bin(),
         "device=cuda parallel.comm=mpi parallel.pp=2 parallel.schedule=zb-h1 parallel.microbatches=8", 2,
         "PPTRAIN_EMU_HOST_WAITS=1 PPTRAIN_EMU_LATE_EVENTS=" + late, &out);
    const HostWaits w = host_waits_of(out);
    EXPECT_EQ(w.ranks, 2) << out;
    return w.waits - w.frees;
  };
  const long long on_time = waits("0"), late = waits("1000");
  EXPECT_GT(on_time, 0);
  EXPECT_GE(late - on_time, 16 / 2) << "the sends were not held back under the late device";
  std::cout << "zb-h1 host waits a step: " << on_time << " on time, " << late << " late\n";
}

TEST_F(StagedComm, PlantedBugsAreRejected) {
  struct Plant {
    std::string name, layout, fault;
    int ranks;
  };
  for (const Plant& p :
       {Plant{"planted_grad", "parallel.pp=2 parallel.schedule=zbv parallel.stages_per_rank=2 parallel.microbatches=4",
              "grad_scale@1:h.2.attn.proj.weight:1.001", 2},
        Plant{"planted_tp", "parallel.tp=2 parallel.microbatches=2", "skip_tp_allreduce@1:row", 2}}) {
    const Verdict v = staged_against_cpu(p.name, p.layout, p.ranks, "PPTRAIN_FAULTS=" + p.fault);
    EXPECT_FALSE(v.passed()) << p.fault;
    // 3x the bound: the margin the cpu equivalence tests ask of a planted bug (test_parallel_equivalence),
    // so a rejection is not a rounding accident.
    EXPECT_GE(v.worst().ratio(), 3.0) << p.fault << ": " << v.summary();
    std::cout << "planted " << p.fault << ": " << v.summary() << "\n";
  }
}

// bf16 (no cpu twin): the staged transport against NCCL's. Every sum here is over two
// ranks, and a + b = b + a exactly, so the bits must agree.
TEST_F(StagedComm, Bf16GivesNcclsBits) {
#ifdef PPTRAIN_REAL_DEVICE
  GTEST_SKIP() << "NCCL needs a GPU per rank; on one GPU only the staged transport runs";
#endif
  int n = 0;
  for (const std::string layout :
       {"parallel.pp=2 parallel.schedule=zbv parallel.stages_per_rank=2 parallel.microbatches=4",
        "parallel.dp=2 parallel.zero=1 parallel.microbatches=2"}) {
    const std::string common = "device=cuda training.precision=bf16 " + layout, run = std::to_string(n++);
    GlobalDump nccl = step("bf16_nccl" + run, cuda_bin(), common + " parallel.comm=nccl", 2);
    GlobalDump staged = step("bf16_staged" + run, cuda_bin(), common + " parallel.comm=mpi", 2);
    const Verdict v = compare_exact(staged, nccl);
    EXPECT_TRUE(v.passed()) << v.failures(layout);
  }
}

// auto: staged MPI where the ranks of a group share a device, NCCL where each has its own.
TEST_F(StagedComm, AutoChoosesByWhetherRanksShareADevice) {
  const std::string layout = "device=cuda parallel.pp=2 parallel.microbatches=2";
  std::string shared, own;
  step("auto_shared", cuda_bin(), layout, 2, "PPTRAIN_EMU_DEVICES=1", &shared);
  EXPECT_NE(shared.find("| comm mpi through pinned host buffers (auto: ranks of the group share a GPU, which NCCL "
                        "refuses) |"),
            std::string::npos)
      << shared;
#ifdef PPTRAIN_REAL_DEVICE
  GTEST_SKIP() << "a GPU per rank needs a node with two GPUs";
#endif
  step("auto_own", pptrain_emu_bin(), layout, 2, "PPTRAIN_EMU_DEVICES=2", &own);
  EXPECT_NE(own.find("| comm nccl |"), std::string::npos) << own;
}

#ifndef PPTRAIN_REAL_DEVICE
// Ranks on one device divide its memory: the preflight adds their estimates and refuses a
// layout whose sum does not fit, in one line naming the device and the sum; with a device
// each, the same layout fits. (Emulated devices of PPTRAIN_EMU_DEVICE_GIB each.)
TEST_F(StagedComm, RanksOnOneDeviceMustFitItTogether) {
  const std::string cmd = mpirun(2) + pptrain_emu_bin() + " train " + dir_.file("model.yaml") +
                          " device=cuda parallel.dp=2 parallel.microbatches=2 2>&1";
  // Each rank of this model needs an estimated 0.03 GiB (its GEMM workspace the largest part),
  // so a device of 0.045 GiB holds one, not two.
  auto shared = run_command("PPTRAIN_EMU_DEVICES=1 PPTRAIN_EMU_DEVICE_GIB=0.045 " + cmd, 120);
  EXPECT_NE(shared.exit_code, 0) << shared.output;
  EXPECT_NE(shared.output.find("memory: GPU 0 of this node has "), std::string::npos) << shared.output;
  EXPECT_NE(shared.output.find(", but the 2 ranks on it need an estimated "), std::string::npos) << shared.output;
  EXPECT_EQ(shared.output.find("| loss "), std::string::npos) << "a step ran:\n" << shared.output;
  auto own = run_command("PPTRAIN_EMU_DEVICES=2 PPTRAIN_EMU_DEVICE_GIB=0.045 " + cmd, 120);
  EXPECT_EQ(own.exit_code, 0) << own.output;
}
#endif

TEST(StagedCommConfig, CommKeyIsChecked) {
  try {
    parse_config("parallel: {comm: gloo}\n", "t.yaml");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "t.yaml: key 'parallel.comm': expected auto, nccl or mpi, got 'gloo'");
  }
  try {
    parse_config("parallel: {comm: nccl}\n", "t.yaml");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "t.yaml: key 'parallel.comm': nccl needs device: cuda (the cpu backend's groups use MPI)");
  }
  EXPECT_EQ(parse_config("parallel: {comm: mpi}\n", "t.yaml").parallel.comm, "mpi");
}
