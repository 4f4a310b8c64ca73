// The cuda backend inside the distributed trainer, on the CPU: pptrain-emu (the trainer with
// the emulated cuda backend, MPI in place of NCCL) runs one step of a pp=2 ZB-V pipeline
// with `device: cuda`, and its loss and every parameter gradient equal build/pptrain's
// `device: cpu` run (relative 1e-5, normwise per tensor). Also: the host sources of the
// cuda backend, NcclComm included, compile against the real CUDA/cuBLAS/NCCL headers
// (skipped, with the reason printed, where those headers are absent).
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

std::string pptrain_emu_bin() { return (fs::path(pptrain_bin()).parent_path() / "pptrain-emu").string(); }

// Runs one step and returns the merged dump (both ranks hold one V-shaped half each).
GlobalDump run_step(const TempDir& dir, const std::string& bin, const std::string& device) {
  const std::string out = dir.file("dump_" + device);
  const std::string cmd = mpirun(2) + bin + " train " + dir.file("model.yaml") + " device=" + device +
                          " parallel.pp=2 parallel.schedule=zbv parallel.stages_per_rank=2"
                          " parallel.microbatches=4 --dump " + out;
  auto r = run_command(cmd, 120);
  EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  if (device == "cuda") {
    EXPECT_NE(r.output.find("backend cuda"), std::string::npos) << r.output;
  }
  return read_param_dumps({out + "/step1.rank0.bin", out + "/step1.rank1.bin"});
}

}  // namespace

TEST(CudaBackendTrain, ZeroBubbleVPipelineStepEqualsTheCpuBackend) {
  ASSERT_TRUE(fs::exists(pptrain_emu_bin())) << pptrain_emu_bin() << " not built";
  TempDir dir;
  auto r = prepare_markov_corpus(dir.file("data"), 19, 4000, 5);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // 4 blocks: one per stage (2 ranks x 2 stages of the V); grad_clip 0 compares raw gradients.
  write_file(dir.file("model.yaml"),
             "model: {n_layer: 4, n_head: 2, d_model: 16, seq_len: 8, vocab_size: 19}\n"
             "training: {steps: 1, micro_batch_size: 2, lr: 1.0e-2, warmup_steps: 0, grad_clip: 0.0, eval_every: 0}\n"
             "data: {train: '" + dir.file("data") + "/train_*.bin'}\n"
             "logging: {every: 1, sample_tokens: 0}\n");
  GlobalDump cpu = run_step(dir, pptrain_bin(), "cpu");
  GlobalDump gpu = run_step(dir, pptrain_emu_bin(), "cuda");
  ASSERT_FALSE(cpu.tensors.empty());
  EXPECT_NEAR(gpu.loss, cpu.loss, 1e-5 * std::fabs(cpu.loss));
  EXPECT_EQ(gpu.max_replica_diff, 0.0) << "the two copies of the tied embedding disagree";
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
