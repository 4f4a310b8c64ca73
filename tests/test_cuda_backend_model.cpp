// The whole model on the emulated cuda backend (host code of CudaOps, kernels under the SIMT
// emulator, cuBLAS/cuBLASLt on OpenBLAS): in fp32 the loss and every parameter gradient of
// one forward/dgrad/wgrad step equal the cpu backend (normwise 1e-5 per tensor); in bf16
// (training.precision: bf16) they track the fp32 model within the bound bf16 rounding
// allows, and do differ from it, so the bf16 path really ran.
#define PPTRAIN_EMULATED 1  // this binary links the emulated cuda backend

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "backend/cuda/cuda_backend.h"
#include "core/error.h"
#include "cuda_backend_model.h"

using namespace pptrain;
using namespace pptrain::testing;

namespace {
constexpr double kTolerance = 1e-5;
}  // namespace

TEST(CudaBackendModel, OneStepLossAndEveryGradientEqualTheCpuBackend) {
  ModelConfig m = bf16_test_model();
  m.d_model = 16;
  m.seq_len = 5;
  m.vocab_size = 11;
  const int batch = 2;
  TinyModel cpu(make_cpu_ops(), m, batch, Precision::fp32), gpu(make_cuda_ops(0), m, batch, Precision::fp32);
  const int n = cpu.dims.rows();
  auto tok = random_ints(n, 81, 0, 10), tgt = random_ints(n, 82, 0, 10);
  const double loss_cpu = cpu.step(tok, tgt), loss_gpu = gpu.step(tok, tgt);
  EXPECT_NEAR(loss_gpu, loss_cpu, kTolerance * std::fabs(loss_cpu));
  ASSERT_EQ(gpu.params->all().size(), cpu.params->all().size());
  int compared = 0;
  for (auto& [name, p] : cpu.params->all()) {
    Param* q = gpu.params->find(name);
    ASSERT_NE(q, nullptr) << name;
    auto want = p->grad.to_host(), got = q->grad.to_host();
    double scale = 0;
    for (float g : want) scale = std::max(scale, double(std::fabs(g)));
    EXPECT_GT(scale, 0.0) << name << " has an all-zero gradient";
    EXPECT_LE(normalized_error(got, want), kTolerance) << name;
    ++compared;
  }
  EXPECT_GE(compared, 2 * 12 + 4);  // 12 tensors per block, embeddings, final layernorm
}

TEST(Bf16Model, OneStepTracksTheFp32ModelWithinTheBf16Bound) {
  const ModelConfig m = bf16_test_model();
  const int batch = 3;
  TinyModel ref(make_cpu_ops(), m, batch, Precision::fp32);
  TinyModel low(make_cuda_ops(0), m, batch, Precision::bf16);
  const int n = ref.dims.rows();
  auto tok = random_ints(n, 81, 0, m.vocab_size - 1), tgt = random_ints(n, 82, 0, m.vocab_size - 1);
  const double loss_ref = ref.step(tok, tgt), loss_low = low.step(tok, tgt);
  EXPECT_NEAR(loss_low, loss_ref, kBf16LossBound * std::fabs(loss_ref));
  EXPECT_NE(loss_low, loss_ref) << "bf16 and fp32 agree exactly: did the bf16 path run?";

  double largest = 0;
  int compared = 0;
  for (auto& [name, p] : ref.params->all()) {
    Param* q = low.params->find(name);
    ASSERT_NE(q, nullptr) << name;
    EXPECT_EQ(q->value_bf16.size(), q->numel()) << name << " has no bf16 copy";
    const double err = normalized_error(q->grad.to_host(), p->grad.to_host());
    EXPECT_LE(err, kBf16GradientBound) << name;
    largest = std::max(largest, err);
    ++compared;
  }
  EXPECT_GE(compared, 2 * 12 + 4);
  // Rounding to bf16 moves gradients by far more than fp32 reordering (~1e-6) would.
  EXPECT_GT(largest, 1e-4) << "no gradient shows bf16 rounding";
  std::cout << "largest normwise gradient error bf16 vs fp32: " << largest << ", loss " << loss_low << " vs "
            << loss_ref << "\n";
}

TEST(Bf16Model, ActivationsTakeHalfTheMemory) {
  const ModelConfig m = bf16_test_model();
  TinyModel full(make_cuda_ops(0), m, 2, Precision::fp32), half(make_cuda_ops(0), m, 2, Precision::bf16);
  EXPECT_EQ(half.stage->transfer_bytes() * 2, full.stage->transfer_bytes());
  const double ratio = double(half.stage->activation_bytes_per_microbatch()) /
                       double(full.stage->activation_bytes_per_microbatch());
  // Everything but the fp32 per-row statistics (layernorm mean/rstd, cross-entropy) halves.
  EXPECT_GT(ratio, 0.5);
  EXPECT_LT(ratio, 0.55);
}

TEST(Bf16Model, TheCpuBackendRejectsBf16WithOneLine) {
  const ModelConfig m = bf16_test_model();
  TinyModel model(make_cpu_ops(), m, 1, Precision::bf16);
  try {
    model.params->refresh_bf16();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "backend 'cpu' has no bf16 cast (training.precision: bf16 needs device: cuda)");
  }
}
