// The cuda backend's cuBLASLt layer (cuda/cuda_lt_gemm.h) run end to end on the CPU (the
// emulated runtime and cuBLASLt, -> OpenBLAS): each distinct problem (shape, type, epilogue,
// operand alignment) is planned once and reused, the results still equal the cpu backend's
// (1e-5 relative to the tensor's largest element, as every fp32 op comparison of
// test_cuda_backend.cpp), a bad GEMM is one line naming the op, rank and device, and the
// emulated cuBLASLt checks what the real one does (attributes, workspace).
// PPTRAIN_REAL_DEVICE (mk/gpu_tests.mk) builds this file against the real CUDA backend, so
// the plan and error checks run against the real library on a GPU.
#ifndef PPTRAIN_REAL_DEVICE
#define PPTRAIN_EMULATED 1
#endif

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/ops.h"
#include "core/error.h"
#include "support/backend_run.h"
#include "support/cpu_ops_util.h"

using namespace pptrain;
using pptrain::testing::BackendRun;
using pptrain::testing::normalized_error;
using pptrain::testing::random_floats;

namespace {
// fp32 GEMMs on both backends: 1e-5 relative, the bound of every fp32 op comparison
// (test_cuda_backend.cpp: a few ulps of sums of up to a few dozen terms).
constexpr double kTolerance = 1e-5;
}  // namespace

TEST(CudaBackendGemm, PlansAreBuiltOncePerShapeTypeEpilogueAndAlignment) {
  const int n = 5, in = 11, out = 6;
  auto cpu_ops = make_cpu_ops(), cuda_ops = make_cuda_ops(0);
  const auto& lt = static_cast<cuda::CudaOps&>(*cuda_ops).lt_gemm();
#ifdef PPTRAIN_EMULATED  // the emulated cuBLASLt counts its heuristic calls
  const long long library_calls = emu::cublaslt_heuristic_calls();
#endif
  BackendRun cpu(*cpu_ops), gpu(*cuda_ops);
  for (BackendRun* r : {&cpu, &gpu}) {
    const bool is_gpu = r == &gpu;
    auto plans_built = [&](long long want) {
      if (is_gpu) {
        EXPECT_EQ(lt.heuristic_calls(), want);
      }
    };
    r->put("x", random_floats(size_t(n) * in + 1, 101));  // one spare element: a misaligned view
    r->put("x2", random_floats(size_t(n) * in, 102));
    r->put("w", random_floats(size_t(out) * in, 103));
    r->put("b1", random_floats(out, 104));
    r->put("b2", random_floats(out, 105));
    r->put("dy", random_floats(size_t(n) * out, 106));
    for (const char* y : {"y1", "y2", "y3", "y4"}) r->zeros(y, size_t(n) * out);
    r->zeros("dx", size_t(n) * in);
    r->put("dx_acc", random_floats(size_t(n) * in, 107));
    Ops& ops = r->ops();
    ops.linear_forward(r->f("y1"), r->f("x"), r->f("w"), r->f("b1"), n, in, out);
    plans_built(1);
    // Same problem, other operands and bias: the plan is reused and the bias pointer is
    // the one of this call.
    ops.linear_forward(r->f("y2"), r->f("x2"), r->f("w"), r->f("b2"), n, in, out);
    plans_built(1);
    ops.linear_forward(r->f("y3"), r->f("x"), r->f("w"), nullptr, n, in, out);  // no epilogue
    plans_built(2);
    ops.linear_backward_input(r->f("dx"), r->f("dy"), r->f("w"), n, in, out, false);
    ops.linear_backward_input(r->f("dx_acc"), r->f("dy"), r->f("w"), n, in, out, true);  // beta is per call
    plans_built(3);
    // X one float into its buffer is only 4-byte aligned: a plan of its own (the emulated
    // cublasLtMatmul rejects an operand less aligned than its algorithm was chosen for).
    ops.linear_forward(r->f("y4"), r->f("x") + 1, r->f("w"), r->f("b1"), n, in, out);
    plans_built(4);
    if (is_gpu) {  // the same shape in bf16 is another problem
      auto* h = static_cast<bfloat16*>(ops.allocate(size_t(n + out) * in * sizeof(bfloat16)));
      auto* y = static_cast<bfloat16*>(ops.allocate(size_t(n) * out * sizeof(bfloat16)));
      ops.linear_forward(y, h, h + size_t(n) * in, nullptr, n, in, out);
      plans_built(5);
      ops.release(h);
      ops.release(y);
    }
  }
  EXPECT_EQ(lt.plans(), 5u);
#ifdef PPTRAIN_EMULATED
  EXPECT_EQ(emu::cublaslt_heuristic_calls() - library_calls, 5) << "the library's heuristic ran once per plan";
#endif
  for (const char* name : {"y1", "y2", "y3", "y4", "dx", "dx_acc"})
    EXPECT_LE(normalized_error(gpu.get(name), cpu.get(name)), kTolerance) << name;
}

TEST(CudaBackendGemm, ABadGemmIsAOneLineErrorNamingTheOpRankAndDevice) {
  auto ops = make_cuda_ops(0);
  auto expect_error = [](const std::function<void()>& call, const std::string& want) {
    try {
      call();
      ADD_FAILURE() << "no error, expected: " << want;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      EXPECT_NE(msg.find(want), std::string::npos) << msg;
    }
  };
  void* buf = ops->allocate(4096);
  auto* f = static_cast<float*>(buf);
  // A negative input width reaches cuBLASLt as a layout of 2^64 - 2 rows.
  expect_error([&] { ops->linear_forward(f, f, f, nullptr, 3, -2, 4); },
               "cublasLtMatmulAlgoGetHeuristic (linear forward, M=4 N=3 K=-2) failed on rank 0, device 0: "
               "CUBLAS_STATUS_INVALID_VALUE (");
  cuda::LtGemm gemm(static_cast<cuda::CudaOps&>(*ops).compute_stream());
  cuda::LtShape shape{false, false, 8, 4, 5, 3, 5, 8, CUDA_R_16BF, CUDA_R_16BF};  // lda 3 < 8 rows
  expect_error([&] { gemm.run("test gemm", shape, buf, buf, nullptr, 0.0f, buf); },
               "cublasLtMatmulAlgoGetHeuristic (test gemm, M=8 N=4 K=5) failed on rank 0, device 0: "
               "CUBLAS_STATUS_INVALID_VALUE (");
  shape.lda = 8;
  shape.ab_type = CUDA_R_32F;  // fp32 inputs with a bf16 output: not a cuBLAS combination
  expect_error([&] { gemm.run("test gemm", shape, buf, buf, nullptr, 0.0f, buf); },
               "failed on rank 0, device 0: CUBLAS_STATUS_NOT_SUPPORTED (");
  ops->release(buf);
}

#ifdef PPTRAIN_EMULATED  // a test of the emulated cuBLASLt itself (host vectors as device memory)
TEST(CudaBackendGemm, EmulatedCublasLtChecksAttributesAndWorkspace) {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t layout = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ASSERT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, 4, 4, 4), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  const int32_t op = CUBLAS_OP_T;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op, sizeof op), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op, 2), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, cublasLtMatmulDescAttributes_t(99), &op, sizeof op),
            CUBLAS_STATUS_INVALID_VALUE);
  const uint64_t limit = 1 << 20;
  EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &limit, sizeof limit),
            CUBLAS_STATUS_SUCCESS);
  // Operands as aligned as the preference says (256 bytes by default; a std::vector gives
  // less, which the emulated matmul would reject).
  const uint32_t align = 4;
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof align), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(handle, desc, layout, layout, layout, layout, pref, 1, &result, &found),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(found, 1);
  ASSERT_GT(result.workspaceSize, 0u);
  std::vector<float> m(16, 1.0f), d(16, 0.0f), workspace(result.workspaceSize / sizeof(float) + 1);
  const float alpha = 1.0f, beta = 0.0f;
  // The algorithm needs the workspace it asked for.
  EXPECT_EQ(cublasLtMatmul(handle, desc, &alpha, m.data(), layout, m.data(), layout, &beta, d.data(), layout,
                           d.data(), layout, &result.algo, workspace.data(), result.workspaceSize - 1, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmul(handle, desc, &alpha, m.data(), layout, m.data(), layout, &beta, d.data(), layout,
                           d.data(), layout, &result.algo, workspace.data(), result.workspaceSize, nullptr),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);  // the product runs on the stream
  EXPECT_EQ(d[5], 4.0f);  // (1-filled 4x4)ᵀ · (1-filled 4x4)
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(layout);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(handle);
}
#endif

