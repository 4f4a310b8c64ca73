// The cuda backend's host code (CudaOps: caching allocator, cuBLASLt and cuBLAS GEMM
// mapping, kernel launches, workspaces) run end to end on the CPU: the CUDA runtime, cuBLAS
// and cuBLASLt are the shims of emu/ (-> OpenBLAS column-major), the kernels
// run under the SIMT emulator in both fiber orders. Every Ops method is compared in fp32 with
// the cpu backend on odd shapes (1e-5 relative to the tensor's largest element), and so are
// the loss and every parameter gradient of one forward/dgrad/wgrad step of a whole model.
// The ops in bf16 are in test_cuda_backend_bf16.cpp, the cuBLASLt plan cache and GEMM errors
// in test_cuda_backend_gemm.cpp.
// PPTRAIN_REAL_DEVICE (mk/gpu_tests.mk) builds this file against the real CUDA backend, so
// the same comparisons run on a GPU; by default it links the emulated cuda backend.
#ifndef PPTRAIN_REAL_DEVICE
#define PPTRAIN_EMULATED 1
#endif

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "backend/buffer.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/ops.h"
#include "core/communicator.h"
#include "core/error.h"
#include "model/stage.h"
#include "support/cpu_ops_util.h"
#include "support/backend_run.h"
#include "support/cuda_run_order.h"

using namespace pptrain;
using pptrain::testing::BackendRun;
using pptrain::testing::normalized_error;
using pptrain::testing::random_floats;
using pptrain::testing::random_ints;

namespace {

constexpr double kTolerance = 1e-5;

// Runs `body` on the cpu backend and on CudaOps in both fiber orders, and compares every
// named output. `body` builds its inputs with BackendRun::put (identical host data on each
// backend) and may return a scalar that is compared too. `kernels`: whether the body
// launches kernels (not only copies and GEMMs), which is then checked.
void compare(const std::vector<std::string>& outputs, const std::function<double(BackendRun&)>& body,
             bool kernels = true) {
  auto cpu_ops = make_cpu_ops();
  BackendRun cpu(*cpu_ops);
  const double cpu_scalar = body(cpu);
  pptrain::testing::for_each_cuda_order([&](Ops& cuda_ops, pptrain::testing::RunOrder) {
    BackendRun gpu(cuda_ops);
    const double gpu_scalar = body(gpu);
    EXPECT_NEAR(gpu_scalar, cpu_scalar, kTolerance * std::fabs(cpu_scalar) + 1e-12);
    for (const std::string& name : outputs) {
      std::vector<float> want = cpu.get(name), got = gpu.get(name);
      double err = normalized_error(got, want);
      EXPECT_LE(err, kTolerance) << name;
      if (::testing::Test::HasFailure()) return;
    }
#ifdef PPTRAIN_EMULATED  // only the emulated stream counts launches
    if (kernels) {
      EXPECT_GT(pptrain::testing::launches(cuda_ops), 0);
    }
#endif
  });
}

}  // namespace

// ---- memory ----------------------------------------------------------------------------------

TEST(CudaBackendMemory, AllocateIsZeroFilledAndReusesReleasedBlocks) {
  auto ops = make_cuda_ops(0);
  auto& cuda_ops = static_cast<cuda::CudaOps&>(*ops);
  std::vector<float> ones(1000, 1.0f);
  void* a = ops->allocate(ones.size() * sizeof(float));
  ops->copy_to_device(a, ones.data(), ones.size() * sizeof(float));
  ops->release(a);
  const size_t mallocs = cuda_ops.allocator().device_allocations();
  // Same size class (1000 and 900 floats round to the same bucket): the dirty block comes
  // back, zero-filled.
  void* b = ops->allocate(900 * sizeof(float));
  EXPECT_EQ(b, a);
  EXPECT_EQ(cuda_ops.allocator().device_allocations(), mallocs);
  std::vector<float> back(900, -1.0f);
  ops->copy_to_host(back.data(), b, back.size() * sizeof(float));
  for (float x : back) ASSERT_EQ(x, 0.0f);
  // A live block is never handed out twice.
  void* c = ops->allocate(900 * sizeof(float));
  EXPECT_NE(c, b);
  ops->release(b);
  ops->release(c);
  EXPECT_EQ(cuda_ops.allocator().bytes_in_use(), 0u);
  EXPECT_EQ(ops->allocate(0), nullptr);
}

TEST(CudaBackendMemory, BucketSizesWasteAtMostAQuarter) {
  for (size_t bytes : {size_t(1), size_t(512), size_t(513), size_t(4000), size_t(1) << 20, (size_t(1) << 20) + 1,
                       size_t(123456789)}) {
    size_t b = cuda::CachingAllocator::bucket_size(bytes);
    EXPECT_GE(b, bytes);
    EXPECT_LE(b, std::max<size_t>(512, bytes + bytes / 4)) << bytes;
    EXPECT_EQ(cuda::CachingAllocator::bucket_size(b), b) << "bucket sizes are fixed points";
  }
}

TEST(CudaBackendMemory, OutOfMemoryNamesCallRankAndDevice) {
  auto ops = make_cuda_ops(0);
  try {
    ops->allocate(size_t(1) << 62);
    FAIL() << "an impossible allocation succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cudaMalloc failed on rank 0, device 0: out of memory"),
              std::string::npos)
        << e.what();
  }
}

TEST(CudaBackendMemory, CopyAndZero) {
  compare({"dst", "z"}, [](BackendRun& r) {
    auto src = random_floats(37, 1);
    r.put("src", src);
    r.zeros("dst", 37);
    r.ops().copy(r.f("dst"), r.f("src"), 37 * sizeof(float));
    r.put("z", src);
    r.ops().zero(r.f("z") + 5, 20 * sizeof(float));
    r.ops().synchronize();
    return 0.0;
  }, false);
}

// ---- linear ----------------------------------------------------------------------------------

TEST(CudaBackendOps, LinearForwardDgradWgrad) {
  const int n = 7, in = 13, out = 9;
  for (bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "with bias" : "without bias");
    compare({"y", "dx", "dx_acc", "dw", "db"}, [&](BackendRun& r) {
      r.put("x", random_floats(size_t(n) * in, 1));
      r.put("w", random_floats(size_t(out) * in, 2));
      r.put("b", random_floats(out, 3));
      r.put("dy", random_floats(size_t(n) * out, 4));
      r.zeros("y", size_t(n) * out);
      r.zeros("dx", size_t(n) * in);
      r.put("dx_acc", random_floats(size_t(n) * in, 5));
      r.put("dw", random_floats(size_t(out) * in, 6));  // gradients accumulate (+=)
      r.put("db", random_floats(out, 7));
      r.ops().linear_forward(r.f("y"), r.f("x"), r.f("w"), bias ? r.f("b") : nullptr, n, in, out);
      r.ops().linear_backward_input(r.f("dx"), r.f("dy"), r.f("w"), n, in, out, false);
      r.ops().linear_backward_input(r.f("dx_acc"), r.f("dy"), r.f("w"), n, in, out, true);
      r.ops().linear_backward_weight(r.f("dw"), bias ? r.f("db") : nullptr, r.f("dy"), r.f("x"), n, in, out);
      return 0.0;
    }, bias);  // without a bias every op is a GEMM
  }
}

// y = x·wᵀ (+ b) + residual: one GEMM reading the residual as its C on cuda, the unfused
// ops on cpu; and with the residual being y itself (an in-place residual stream).
TEST(CudaBackendOps, LinearForwardResidual) {
  const int n = 7, in = 13, out = 9;
  for (bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "with bias" : "without bias");
    compare({"y", "inplace"}, [&](BackendRun& r) {
      r.put("x", random_floats(size_t(n) * in, 21));
      r.put("w", random_floats(size_t(out) * in, 22));
      r.put("b", random_floats(out, 23));
      r.put("res", random_floats(size_t(n) * out, 24));
      r.put("inplace", random_floats(size_t(n) * out, 24));
      r.zeros("y", size_t(n) * out);
      r.ops().linear_forward_residual(r.f("y"), r.f("x"), r.f("w"), bias ? r.f("b") : nullptr, r.f("res"), n, in, out);
      r.ops().linear_forward_residual(r.f("inplace"), r.f("x"), r.f("w"), bias ? r.f("b") : nullptr, r.f("inplace"),
                                      n, in, out);
      return 0.0;
    }, false);  // GEMMs only on cuda
  }
}

TEST(CudaBackendOps, LinearWgradOverManyRows) {
  // More rows than one column-sum chunk (64): the bias gradient's two-stage reduction.
  const int n = 150, in = 5, out = 33;
  compare({"dw", "db"}, [&](BackendRun& r) {
    r.put("x", random_floats(size_t(n) * in, 11));
    r.put("dy", random_floats(size_t(n) * out, 12));
    r.zeros("dw", size_t(out) * in);
    r.zeros("db", out);
    r.ops().linear_backward_weight(r.f("dw"), r.f("db"), r.f("dy"), r.f("x"), n, in, out);
    return 0.0;
  });
}

// ---- layernorm, GELU, elementwise ---------------------------------------------------------

TEST(CudaBackendOps, Layernorm) {
  const int n = 11, c = 19;
  compare({"y", "mean", "rstd", "dx", "dx_acc", "dg", "db"}, [&](BackendRun& r) {
    r.put("x", random_floats(size_t(n) * c, 21, -2.0f, 3.0f));
    r.put("g", random_floats(c, 22));
    r.put("b", random_floats(c, 23));
    r.put("dy", random_floats(size_t(n) * c, 24));
    r.zeros("y", size_t(n) * c);
    r.zeros("mean", n);
    r.zeros("rstd", n);
    r.zeros("dx", size_t(n) * c);
    r.put("dx_acc", random_floats(size_t(n) * c, 25));
    r.put("dg", random_floats(c, 26));
    r.put("db", random_floats(c, 27));
    r.ops().layernorm_forward(r.f("y"), r.f("mean"), r.f("rstd"), r.f("x"), r.f("g"), r.f("b"), n, c);
    r.ops().layernorm_backward_input(r.f("dx"), r.f("dy"), r.f("x"), r.f("mean"), r.f("rstd"), r.f("g"), n, c,
                                     nullptr);
    // dx_acc = dx_acc + LN'(dy): the residual in place (dx aliases it)
    r.ops().layernorm_backward_input(r.f("dx_acc"), r.f("dy"), r.f("x"), r.f("mean"), r.f("rstd"), r.f("g"), n,
                                     c, r.f("dx_acc"));
    r.ops().layernorm_backward_weight(r.f("dg"), r.f("db"), r.f("dy"), r.f("x"), r.f("mean"), r.f("rstd"), n, c);
    return 0.0;
  });
}

TEST(CudaBackendOps, GeluAndElementwise) {
  const size_t n = 1029;  // not a multiple of the 4-float pack
  const int rows = 7, cols = 147;
  compare({"gelu", "dgelu", "sum", "alias", "acc", "scaled", "biased"}, [&](BackendRun& r) {
    r.put("x", random_floats(n, 31, -4.0f, 4.0f));
    r.put("a", random_floats(n, 32));
    r.put("dy", random_floats(n, 33));
    r.zeros("gelu", n);
    r.zeros("dgelu", n);
    r.zeros("sum", n);
    r.put("alias", random_floats(n, 34));
    r.put("acc", random_floats(n, 35));
    r.put("scaled", random_floats(n, 36));
    r.put("biased", random_floats(size_t(rows) * cols, 37));
    r.put("bias", random_floats(cols, 38));
    r.ops().gelu_forward(r.f("gelu"), r.f("x"), n);
    r.ops().gelu_backward(r.f("dgelu"), r.f("dy"), r.f("x"), n);
    r.ops().add(r.f("sum"), r.f("x"), r.f("a"), n);
    r.ops().add(r.f("alias"), r.f("alias"), r.f("a"), n);
    r.ops().accumulate(r.f("acc"), r.f("x"), n);
    r.ops().scale(r.f("scaled"), -0.37f, n);
    r.ops().add_bias(r.f("biased"), r.f("bias"), rows, cols);
    return 0.0;
  });
}

// ---- embedding -------------------------------------------------------------------------------

TEST(CudaBackendOps, EmbeddingOfAVocabularyShard) {
  const int t = 5, n = 3 * t, c = 13, v0 = 3, vl = 6;  // shard: tokens 3..8 of 0..10
  for (bool positions : {true, false}) {
    SCOPED_TRACE(positions ? "token + position" : "token only");
    compare({"y", "dwte", "dwpe"}, [&](BackendRun& r) {
      r.put("tokens", random_ints(n, 41, 0, 10));
      r.put("wte", random_floats(size_t(vl) * c, 42));
      r.put("wpe", random_floats(size_t(t) * c, 43));
      r.put("dy", random_floats(size_t(n) * c, 44));
      r.zeros("y", size_t(n) * c);
      r.put("dwte", random_floats(size_t(vl) * c, 45));
      r.put("dwpe", random_floats(size_t(t) * c, 46));
      auto* tokens = static_cast<const int32_t*>(static_cast<void*>(r.f("tokens")));
      r.ops().embedding_forward(r.f("y"), tokens, r.f("wte"), positions ? r.f("wpe") : nullptr, n, t, c, v0, vl);
      r.ops().embedding_backward_weight(r.f("dwte"), positions ? r.f("dwpe") : nullptr, r.f("dy"), tokens, n, t,
                                        c, v0, vl);
      return 0.0;
    });
  }
}

// ---- attention -------------------------------------------------------------------------------

TEST(CudaBackendOps, AttentionForwardAndDgrad) {
  struct Shape { int b, t, nh, hd; };
  for (Shape s : {Shape{2, 5, 3, 4}, Shape{1, 7, 2, 5}, Shape{3, 1, 1, 3}}) {
    SCOPED_TRACE(::testing::Message() << "b=" << s.b << " t=" << s.t << " nh=" << s.nh << " hd=" << s.hd);
    const size_t e = size_t(s.b) * s.t * s.nh * s.hd;
    compare({"out", "probs", "dqkv"}, [&](BackendRun& r) {
      r.put("qkv", random_floats(3 * e, 51, -1.5f, 1.5f));
      r.put("dout", random_floats(e, 52));
      r.zeros("out", e);
      r.zeros("probs", size_t(s.b) * s.nh * s.t * s.t);
      r.put("dqkv", random_floats(3 * e, 53));  // overwritten, not accumulated
      r.ops().attention_forward(r.f("out"), r.f("probs"), r.f("qkv"), s.b, s.t, s.nh, s.hd);
      r.ops().attention_backward_input(r.f("dqkv"), r.f("dout"), r.f("qkv"), r.f("probs"), s.b, s.t, s.nh, s.hd);
      return 0.0;
    });
  }
}

// ---- the Llama family: RMSNorm, rotary embedding, SwiGLU, grouped-query attention -------------

TEST(CudaBackendOps, RmsnormRotaryAndSwiglu) {
  const int n = 11, c = 19;
  const int b = 2, t = 7, nh = 4, nkv = 2, hd = 6, qkv = (nh + 2 * nkv) * hd;
  const size_t f = 1029;
  compare({"y", "rstd", "dx", "dx_acc", "dg", "qkv", "dqkv", "act", "dgate", "dup"}, [&](BackendRun& r) {
    r.put("x", random_floats(size_t(n) * c, 21, -2.0f, 3.0f));
    r.put("g", random_floats(c, 22));
    r.put("dy", random_floats(size_t(n) * c, 24));
    r.zeros("y", size_t(n) * c);
    r.zeros("rstd", n);
    r.zeros("dx", size_t(n) * c);
    r.put("dx_acc", random_floats(size_t(n) * c, 25));
    r.put("dg", random_floats(c, 26));
    r.ops().rmsnorm_forward(r.f("y"), r.f("rstd"), r.f("x"), r.f("g"), n, c, 1e-6f);
    r.ops().rmsnorm_backward_input(r.f("dx"), r.f("dy"), r.f("x"), r.f("rstd"), r.f("g"), n, c, nullptr);
    // dx_acc = dx_acc + RMSNorm'(dy): the residual in place (dx aliases it)
    r.ops().rmsnorm_backward_input(r.f("dx_acc"), r.f("dy"), r.f("x"), r.f("rstd"), r.f("g"), n, c, r.f("dx_acc"));
    r.ops().rmsnorm_backward_weight(r.f("dg"), r.f("dy"), r.f("x"), r.f("rstd"), n, c);
    r.put("qkv", random_floats(size_t(b) * t * qkv, 27));
    r.put("dqkv", random_floats(size_t(b) * t * qkv, 28));
    r.ops().rotary_forward(r.f("qkv"), b, t, nh, nkv, hd, rotary_frequencies(hd, 10000.0));
    r.ops().rotary_backward_input(r.f("dqkv"), b, t, nh, nkv, hd, rotary_frequencies(hd, 10000.0));
    r.put("gate", random_floats(f, 29, -5.0f, 5.0f));
    r.put("up", random_floats(f, 30));
    r.put("dact", random_floats(f, 31));
    r.zeros("act", f);
    r.zeros("dgate", f);
    r.zeros("dup", f);
    r.ops().swiglu_forward(r.f("act"), r.f("gate"), r.f("up"), f);
    r.ops().swiglu_backward_input(r.f("dgate"), r.f("dup"), r.f("dact"), r.f("gate"), r.f("up"), f);
    return 0.0;
  });
}

TEST(CudaBackendOps, GroupedQueryAttentionNaiveAndFlash) {
  struct Shape { int b, t, nh, nkv, hd; bool flash; };
  for (Shape s : {Shape{2, 5, 4, 2, 4, false}, Shape{1, 7, 3, 1, 5, false}, Shape{2, 9, 4, 2, 32, true},
                  Shape{1, 5, 2, 1, 32, true}}) {
    SCOPED_TRACE(::testing::Message() << "b=" << s.b << " t=" << s.t << " nh=" << s.nh << " nkv=" << s.nkv
                                      << " hd=" << s.hd << (s.flash ? " flash" : " naive"));
    const size_t rows = size_t(s.b) * s.t, e = rows * s.nh * s.hd, qkv = rows * (s.nh + 2 * s.nkv) * s.hd;
    const size_t stats = size_t(s.b) * s.nh * s.t;
    compare({"out", "dqkv"}, [&](BackendRun& r) {
      r.put("qkv", random_floats(qkv, 51, -1.5f, 1.5f));
      r.put("dout", random_floats(e, 52));
      r.zeros("out", e);
      r.put("dqkv", random_floats(qkv, 53));  // overwritten, not accumulated
      if (s.flash) {
        r.zeros("lse", stats);
        r.zeros("delta", stats);
        r.ops().gqa_flash_attention_forward(r.f("out"), r.f("lse"), r.f("qkv"), s.b, s.t, s.nh, s.nkv, s.hd);
        r.ops().gqa_flash_attention_backward_input(r.f("dqkv"), r.f("delta"), r.f("dout"), r.f("qkv"), r.f("out"),
                                                   r.f("lse"), s.b, s.t, s.nh, s.nkv, s.hd);
      } else {
        r.zeros("probs", stats * s.t);
        r.ops().gqa_attention_forward(r.f("out"), r.f("probs"), r.f("qkv"), s.b, s.t, s.nh, s.nkv, s.hd);
        r.ops().gqa_attention_backward_input(r.f("dqkv"), r.f("dout"), r.f("qkv"), r.f("probs"), s.b, s.t, s.nh,
                                             s.nkv, s.hd);
      }
      return 0.0;
    });
  }
}

// ---- cross-entropy ---------------------------------------------------------------------------

TEST(CudaBackendOps, VocabParallelCrossEntropyWithPadding) {
  const int n = 9, vl = 7, valid = 5, v0 = 14;  // last shard of vocab 19 padded to 21
  compare({"rmax", "sumexp", "target_logit", "dlogits"}, [&](BackendRun& r) {
    r.put("logits", random_floats(size_t(n) * vl, 61, -3.0f, 3.0f));
    r.put("targets", random_ints(n, 62, 10, 18));  // some in this shard, some not
    r.zeros("rmax", n);
    r.zeros("sumexp", n);
    r.zeros("target_logit", n);
    r.zeros("dlogits", size_t(n) * vl);
    auto* targets = static_cast<const int32_t*>(static_cast<void*>(r.f("targets")));
    r.ops().ce_row_max(r.f("rmax"), r.f("logits"), n, vl, valid);
    r.ops().ce_sumexp_target(r.f("sumexp"), r.f("target_logit"), r.f("logits"), r.f("rmax"), targets, n, vl,
                             valid, v0);
    Buffer<double> loss_sum(r.ops(), 1);  // where the backend writes the loss
    r.ops().ce_loss_sum(loss_sum.data(), r.f("rmax"), r.f("sumexp"), r.f("target_logit"), n);
    const double loss = loss_sum.to_host()[0];
    r.ops().ce_backward(r.f("dlogits"), r.f("logits"), r.f("rmax"), r.f("sumexp"), targets, n, vl, valid, v0,
                        1.0f / n);
    return loss;
  });
}

// ---- optimizer -------------------------------------------------------------------------------

TEST(CudaBackendOps, AdamWAndSumSquares) {
  const size_t n = 2053;
  compare({"p", "m", "v"}, [&](BackendRun& r) {
    r.put("p", random_floats(n, 71));
    r.put("g", random_floats(n, 72));
    r.put("m", random_floats(n, 73, -0.1f, 0.1f));
    r.put("v", random_floats(n, 74, 0.0f, 0.01f));
    r.ops().adamw(r.f("p"), r.f("m"), r.f("v"), nullptr, r.f("p"), r.f("g"), r.f("m"), r.f("v"), n, 0.7f, 3e-3f,
                  0.9f, 0.95f, 1e-8f, 0.1f, 3);
    return r.ops().sum_squares(r.f("g"), n) + 1e3 * r.ops().sum_squares(r.f("p"), 17);
  });
}
