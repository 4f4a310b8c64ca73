// The cuda backend inside the distributed trainer, on the CPU: pptrain-emu (the trainer with
// the emulated cuda backend, its groups on NcclComm over the emulated NCCL) runs one step
// with `device: cuda` of a pp=2 ZB-V pipeline (p2p on the send/recv streams, the embedding
// all-reduce), of tp=2 (activation all-reduces) and of dp=2 (gradient all-reduce), and its
// loss and every parameter gradient equal build/pptrain's `device: cpu` run of the same
// layout (relative 1e-5, normwise per tensor). Also: the host sources of the cuda backend,
// NcclComm included, compile against the real CUDA/cuBLAS/NCCL headers (skipped, with the
// reason printed, where those headers are absent).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "support/test_util.h"
#include "train/param_dump.h"

using namespace pptrain;
using namespace pptrain::testing;
namespace fs = std::filesystem;

namespace {

// Runs one step on 2 ranks with `layout` (overrides) and returns the merged dump of the
// ranks that wrote one (dp rank 0).
GlobalDump run_step(const TempDir& dir, const std::string& bin, const std::string& device,
                    const std::string& name, const std::string& layout) {
  const std::string out = dir.file("dump_" + name + "_" + device);
  const std::string cmd = mpirun(2) + bin + " train " + dir.file("model.yaml") + " device=" + device + " " +
                          layout + " --dump " + out;
  auto r = run_command(cmd, 120);
  EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  // The startup line names the backend and the transport of the groups.
  const std::string want = device == "cuda" ? "backend cuda fp32 | comm nccl" : "backend cpu fp32 | comm mpi";
  EXPECT_NE(r.output.find(want), std::string::npos) << "no '" << want << "' in:\n" << r.output;
  std::vector<std::string> dumps;
  for (const char* rank : {"0", "1"})
    if (fs::exists(out + "/step1.rank" + rank + ".bin")) dumps.push_back(out + "/step1.rank" + rank + ".bin");
  if (dumps.empty()) {
    ADD_FAILURE() << "no dumps in " << out;
    return {};
  }
  return read_param_dumps(dumps);
}

// Both runs of one layout: every gradient equal up to fp32 reordering.
void expect_equal_runs(const GlobalDump& cpu, const GlobalDump& gpu, const std::string& layout) {
  SCOPED_TRACE(layout);
  ASSERT_FALSE(cpu.tensors.empty());
  EXPECT_NEAR(gpu.loss, cpu.loss, 1e-5 * std::fabs(cpu.loss));
  EXPECT_EQ(gpu.max_replica_diff, 0.0) << "copies of one parameter disagree";
  ASSERT_EQ(gpu.tensors.size(), cpu.tensors.size());
  for (auto& [name, want] : cpu.tensors) {
    auto it = gpu.tensors.find(name);
    ASSERT_NE(it, gpu.tensors.end()) << name << " missing from the cuda run";
    const auto& got = it->second;
    for (char c : got.covered) ASSERT_TRUE(c) << name << " not fully covered by the ranks";
    double scale = 0, diff = 0;
    for (size_t i = 0; i < want.grad.size(); ++i) {
      scale = std::max(scale, double(std::fabs(want.grad[i])));
      diff = std::max(diff, double(std::fabs(got.grad[i] - want.grad[i])));
    }
    EXPECT_GT(scale, 0.0) << name << " has an all-zero gradient";
    EXPECT_LE(diff, 1e-5 * scale) << name << " gradient differs by " << diff << " (scale " << scale << ")";
  }
}

class CudaBackendTrain : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(pptrain_emu_bin())) << pptrain_emu_bin() << " not built";
    auto r = prepare_markov_corpus(dir_.file("data"), 19, 4000, 5);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // 4 blocks (one per stage of the V for pp=2); grad_clip 0 compares raw gradients.
    write_file(dir_.file("model.yaml"),
               "model: {n_layer: 4, n_head: 2, d_model: 16, seq_len: 8, vocab_size: 19}\n"
               "training: {steps: 1, micro_batch_size: 2, lr: 1.0e-2, warmup_steps: 0, grad_clip: 0.0, eval_every: 0}\n"
               "data: {train: '" + dir_.file("data") + "/train_*.bin'}\n"
               "logging: {every: 1, sample_tokens: 0}\n");
  }
  void expect_cuda_equals_cpu(const std::string& name, const std::string& layout) {
    GlobalDump cpu = run_step(dir_, pptrain_bin(), "cpu", name, layout);
    GlobalDump gpu = run_step(dir_, pptrain_emu_bin(), "cuda", name, layout);
    expect_equal_runs(cpu, gpu, layout);
  }
  TempDir dir_;
};

}  // namespace

TEST_F(CudaBackendTrain, ZeroBubbleVPipelineStepEqualsTheCpuBackend) {
  expect_cuda_equals_cpu("zbv", "parallel.pp=2 parallel.schedule=zbv parallel.stages_per_rank=2 parallel.microbatches=4");
}

TEST_F(CudaBackendTrain, TensorParallelStepEqualsTheCpuBackend) {
  expect_cuda_equals_cpu("tp", "parallel.tp=2 parallel.microbatches=2");
}

TEST_F(CudaBackendTrain, DataParallelStepEqualsTheCpuBackend) {
  expect_cuda_equals_cpu("dp", "parallel.dp=2 parallel.microbatches=2");
}

TEST(CudaBackendBuild, HostSourcesCompileAgainstTheCudaToolkitHeaders) {
  const std::string cuda_home = std::getenv("CUDA_HOME") ? std::getenv("CUDA_HOME") : "/usr/local/cuda";
  const std::string include = cuda_home + "/include";
  for (const char* header : {"cuda_runtime.h", "cublas_v2.h", "nccl.h"})
    if (!fs::exists(include + "/" + header))
      GTEST_SKIP() << include << "/" << header << " not found: no CUDA toolkit with NCCL to compile against";
  std::vector<fs::path> sources;
  for (const auto& e : fs::directory_iterator("src/backend/cuda"))
    if (e.path().extension() == ".cpp") sources.push_back(e.path());
  ASSERT_GE(sources.size(), 5u) << "run from the repository root";
  for (const fs::path& src : sources) {
    // The flags of the real build (mk/cuda.mk), syntax only: no GPU or nvcc needed.
    const std::string cmd = "mpicxx -std=c++20 -fsyntax-only -Wall -Wextra -Werror -Wno-unused-parameter "
                            "-DOMPI_SKIP_MPICXX -DPPTRAIN_WITH_CUDA -Isrc -Ikernels -I" + include + " " +
                            src.string() + " 2>&1";
    auto r = run_command(cmd, 120);
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  }
}
