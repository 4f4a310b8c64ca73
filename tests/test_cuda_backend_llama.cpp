// A tiny Llama (RMSNorm, rotary embedding, grouped-query attention with n_kv_head < n_head,
// SwiGLU, an untied head) trained on the cuda backend inside the trainer, on the CPU
// (pptrain-emu: the kernels under the SIMT emulator, cuBLAS on OpenBLAS, NCCL on MPI) or, in
// build/gpu-tests (PPTRAIN_REAL_DEVICE, mk/gpu_tests.mk), on the GPU with the real build,
// against build/pptrain's `device: cpu` run of the same config. The runs take 3 steps; the
// dumps of step 1, taken by both from the same initialisation, are compared:
//  - fp32, naive and flash attention: the loss and every gradient within the fp32 chain
//    bound of the config (support/tolerances.h: the two backends sum in different orders),
//    the values after AdamW within what AdamW makes of that noise;
//  - bf16, naive and flash: the loss and every gradient within the bf16-against-fp32 bound,
//    and some gradient further from fp32 than summation order explains (bf16 really ran);
//  - tp=2 (one key/value head per rank) in fp32 against the cpu backend's tp=2 run;
//  - bf16 with cuDNN's fused attention on grouped-query heads (real device only: the
//    emulated build has no cuDNN);
//  - a gradient planted 1e-3 off is rejected by the same comparison.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "core/config.h"
#include "support/cpu_ops_util.h"
#include "support/dump_compare.h"
#include "support/test_util.h"
#include "train/param_dump.h"

using namespace pptrain;
using namespace pptrain::testing;
namespace fs = std::filesystem;

namespace {

// Head size 8 (naive takes any); flash on cuda needs 32: d_model 64 over 2 heads, 1 key/value head.
const char* kNaive = "model.attention=naive";
const char* kFlash = "model.attention=flash model.d_model=64 model.n_head=2 model.n_kv_head=1";

class CudaLlamaTrain : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(cuda_trainer_bin())) << cuda_trainer_bin() << " not built";
    auto r = prepare_markov_corpus(dir_.file("data"), 19, 4000, 5);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // 4 heads sharing 2 key/value heads; ffn_hidden 44 (not a multiple of the 128-bit
    // packs' 8 bf16); T = 8; grad_clip 0 compares raw gradients.
    write_file(dir_.file("model.yaml"),
               "model: {arch: llama, n_layer: 2, n_head: 4, n_kv_head: 2, d_model: 32, seq_len: 8,"
               " vocab_size: 19, ffn_hidden: 44}\n"
               "parallel: {microbatches: 2}\n"
               "training: {steps: 3, micro_batch_size: 2, lr: 1.0e-2, warmup_steps: 0, grad_clip: 0.0,"
               " eval_every: 0}\n"
               "data: {train: '" + dir_.file("data") + "/train_*.bin'}\n"
               "logging: {every: 1, sample_tokens: 0}\n");
  }

  // One run on `ranks` ranks (`env` before the command) and the dumps of its step 1 (dp
  // replica 0 is every rank here).
  GlobalDump run(const std::string& device, int ranks, const std::string& name, const std::string& overrides,
                 const std::string& env = "") {
    const std::string out = dir_.file("dump_" + name + "_" + device);
    const std::string bin = device == "cuda" ? cuda_trainer_bin() : pptrain_bin();
    const std::string cmd = env + " " + mpirun(ranks) + bin + " train " + dir_.file("model.yaml") + " device=" +
                            device + " " + overrides + " --dump " + out;
    auto r = run_command(cmd, 300);
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
    const Config cfg = config(device, overrides);
    const std::string backend = "backend " + device + " " + cfg.training.precision;
    EXPECT_NE(r.output.find(backend), std::string::npos) << "no '" << backend << "' in:\n" << r.output;
    EXPECT_NE(r.output.find("| attention " + cfg.model.attention), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("step 3"), std::string::npos) << "fewer than 3 steps:\n" << r.output;
    std::vector<std::string> files;
    for (int i = 0; i < ranks; ++i) files.push_back(out + "/step1.rank" + std::to_string(i) + ".bin");
    return read_param_dumps(files);
  }
  Config config(const std::string& device, const std::string& overrides) {
    std::vector<std::string> words = split_words(overrides);
    words.push_back("device=" + device);
    return load_config(dir_.file("model.yaml"), words);
  }
  // The cuda run of `overrides` against the cpu run of `cpu_overrides` (fp32), step 1.
  Verdict cuda_against_cpu(const std::string& name, const std::string& overrides, const std::string& cpu_overrides,
                           int ranks = 1, const std::string& env = "") {
    GlobalDump cpu = run("cpu", ranks, name, cpu_overrides);
    GlobalDump gpu = run("cuda", ranks, name, overrides, env);
    for (auto& [tensor, t] : cpu.tensors) {
      double scale = 0;
      for (float g : t.grad) scale = std::max(scale, double(std::fabs(g)));
      EXPECT_GT(scale, 0.0) << tensor << " has an all-zero gradient";
    }
    const Config cfg = config("cuda", overrides);
    const bool bf16 = cfg.training.precision == "bf16";
    const StepBounds bounds = bf16 ? bf16_against_fp32_bounds(cfg) : fp32_step_bounds(cfg);
    Verdict v = compare_gradients(gpu, cpu, bounds);
    if (!bf16) v.add(compare_adamw_values(gpu, cpu, adamw_step(cfg, 1), bounds.gradient));
    if (bf16) {
      // bf16 rounding is visible: some gradient differs by more than summation order could
      // explain (encoded as a check: fp32 bound ≤ the largest normwise gradient difference).
      double largest = 0;
      for (auto& [tensor, t] : cpu.tensors)
        if (auto it = gpu.tensors.find(tensor); it != gpu.tensors.end())
          largest = std::max(largest, normalized_error(it->second.grad, t.grad));
      v.checks.push_back({"fp32 bound against the largest normwise gradient difference (bf16 rounding visible)",
                          fp32_step_bounds(cfg).gradient, largest});
    }
    return v;
  }
  void expect_cuda_equals_cpu(const std::string& name, const std::string& overrides,
                              const std::string& cpu_overrides, int ranks = 1) {
    const Verdict v = cuda_against_cpu(name, overrides, cpu_overrides, ranks);
    EXPECT_TRUE(v.passed()) << v.failures(name);
    std::cout << "llama " << name << ": " << v.summary() << "\n";
  }
  TempDir dir_;
};

}  // namespace

TEST_F(CudaLlamaTrain, Fp32NaiveEqualsTheCpuBackend) {
  expect_cuda_equals_cpu("fp32_naive", kNaive, kNaive);
}

TEST_F(CudaLlamaTrain, Fp32FlashEqualsTheCpuBackend) {
  expect_cuda_equals_cpu("fp32_flash", kFlash, kFlash);
}

TEST_F(CudaLlamaTrain, Bf16NaiveTracksTheCpuFp32RunWithinTheBf16Bound) {
  expect_cuda_equals_cpu("bf16_naive", std::string(kNaive) + " training.precision=bf16", kNaive);
}

TEST_F(CudaLlamaTrain, Bf16FlashTracksTheCpuFp32RunWithinTheBf16Bound) {
  expect_cuda_equals_cpu("bf16_flash", std::string(kFlash) + " training.precision=bf16", kFlash);
}

// cuDNN's SDPA on 2 query heads sharing 1 key/value head (head size 32), against the cpu
// backend's fp32 flash run.
TEST_F(CudaLlamaTrain, Bf16CudnnGroupedQueryTracksTheCpuFp32RunWithinTheBf16Bound) {
#ifndef PPTRAIN_REAL_DEVICE
  GTEST_SKIP() << "cuDNN runs on a real device only (build/gpu-tests)";
#endif
  const std::string cudnn = "model.attention=cudnn model.d_model=64 model.n_head=2 model.n_kv_head=1";
  expect_cuda_equals_cpu("bf16_cudnn_gqa", cudnn + " training.precision=bf16", kFlash);
}

TEST_F(CudaLlamaTrain, TensorParallelStepEqualsTheCpuBackend) {
  const std::string tp = std::string(kNaive) + " parallel.tp=2";  // one key/value head per rank
  expect_cuda_equals_cpu("fp32_naive_tp2", tp, tp, 2);
}

// The family's other parts on the (emulated) cuda backend: Qwen2's q/k/v biases, Qwen3's
// per-head q/k norms (the copy_columns kernel and the rmsnorm kernels on [N·heads, HD]),
// heads wider than d_model / n_head, Llama 3.1's scaled rotary frequencies, under tp 2.
TEST_F(CudaLlamaTrain, Qwen2Qwen3HeadWidthAndScaledRotaryEqualTheCpuBackend) {
  const std::string qwen3 = std::string(kNaive) + " model.arch=qwen3 model.head_dim=16 model.rope_scaling=llama3 "
                            "model.rope_factor=8 model.rope_original_max_positions=4 parallel.tp=2";
  expect_cuda_equals_cpu("qwen3_tp2", qwen3, qwen3, 2);
  const std::string qwen2 = std::string(kNaive) + " model.arch=qwen2";
  expect_cuda_equals_cpu("qwen2", qwen2, qwen2);
}

TEST_F(CudaLlamaTrain, PlantedGradientErrorIsRejected) {
  const std::string fault = "grad_scale@0:h.1.attn.qkv.weight:1.001";
  const Verdict v = cuda_against_cpu("planted", kNaive, kNaive, 1, "PPTRAIN_FAULTS=" + fault);
  EXPECT_FALSE(v.passed());
  EXPECT_GE(v.worst().ratio(), 3.0) << v.summary();
  std::cout << "planted " << fault << ": " << v.summary() << "\n";
}
