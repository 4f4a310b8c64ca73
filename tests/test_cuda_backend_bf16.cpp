// The bf16 ops of CudaOps, run end to end on the CPU (emulated runtime, cuBLAS and
// cuBLASLt; kernels under the SIMT emulator in both fiber orders), each compared with the
// cpu backend's fp32 op run on the same inputs rounded to bf16. Both sides then compute
// from identical values, so what differs is only the bf16 rounding of outputs and
// intermediates (plus fp32 summation order), and each tolerance below counts those
// roundings: bf16 keeps 8 significant bits, so one round-to-nearest-even moves a value x
// by at most u·|x| with u = 2^-8, i.e. at most u·max|y| for a tensor y. What fp32 work
// precedes that rounding runs in each backend's own order, bounded from the inputs' ranges
// (sum_order, expression below; support/tolerances.h for γ_n).
// PPTRAIN_REAL_DEVICE (mk/gpu_tests.mk) builds this file against the real CUDA backend, so
// the same comparisons run on a GPU; by default it links the emulated cuda backend.
#ifndef PPTRAIN_REAL_DEVICE
#define PPTRAIN_EMULATED 1
#endif

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/ops.h"
#include "core/error.h"
#include "support/cpu_ops_util.h"
#include "support/backend_run.h"
#include "support/cuda_run_order.h"
#include "support/tolerances.h"

using namespace pptrain;
using pptrain::testing::gamma_n;
using pptrain::testing::kFp32Unit;
using pptrain::testing::normalized_error;
using pptrain::testing::random_floats;
using pptrain::testing::random_ints;

namespace {

constexpr double kU = pptrain::testing::kBf16Unit;  // 2^-8
constexpr double kExp = 8 * kFp32Unit;               // exp, tanh, rsqrt: 4 ulp

// fp32 from identical inputs, each backend in its own order. A sum of n terms of magnitude
// at most t is within γ_n·Σ|terms| ≤ γ_n·n·t of the exact sum in any order, so two orders
// differ by at most 2·γ_n·n·t (absolute; random_floats draws from [-1, 1] unless a range
// is given, and bf16 rounding keeps |x| ≤ 1 there).
double sum_order(int n, double t) { return 2 * gamma_n(n, kFp32Unit) * n * t; }
// An elementwise fp32 expression of k operations (exp and tanh count kExp / u): the two
// evaluations differ by at most 2·γ_k of the largest intermediate, which in these tests is
// at most 4 times the largest output.
double expression(int k) { return 2 * gamma_n(k, kFp32Unit) * 4; }

std::vector<float> round_bf16(std::vector<float> v) {
  for (float& x : v) x = bfloat16::from_float(x).to_float();
  return v;
}
double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

// One backend's named tensors (support/backend_run.h). Act is the activation storage:
// float on the cpu reference, bfloat16 on CudaOps; act() stores the bf16-rounded values
// either way, so both sides compute from identical values.
template <typename Act>
class Run : public pptrain::testing::BackendRun {
 public:
  using BackendRun::BackendRun;
  Act* act(const std::string& name, const std::vector<float>& values) {
    std::vector<Act> stored(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      if constexpr (std::is_same_v<Act, float>)
        stored[i] = bfloat16::from_float(values[i]).to_float();
      else
        stored[i] = bfloat16::from_float(values[i]);
    }
    return put(name, stored);
  }
  Act* act_zeros(const std::string& name, size_t n) { return act(name, std::vector<float>(n, 0.0f)); }
  float* f32(const std::string& name, const std::vector<float>& values) { return put(name, values); }
  float* f32_zeros(const std::string& name, size_t n) { return zeros(name, n); }
  const int32_t* ints(const std::string& name, const std::vector<int32_t>& v) { return put(name, v); }
  Act* a(const std::string& name) { return at<Act>(name); }
};

struct Output {
  std::string name;
  double tolerance;      // on normalized_error: max |bf16 - fp32| / max |fp32|
  double absolute = 0;   // plus this / max |fp32|: an absolute bound on the fp32 part
};

// Runs `body` (a generic lambda over Run<Act>&) on the cpu backend in fp32 and on CudaOps
// in bf16 in both fiber orders, and compares the outputs.
template <typename Body>
void compare(const std::vector<Output>& outputs, Body body) {
  auto cpu_ops = make_cpu_ops();
  Run<float> cpu(*cpu_ops);
  body(cpu);
  pptrain::testing::for_each_cuda_order([&](Ops& cuda_ops, pptrain::testing::RunOrder) {
    Run<bfloat16> gpu(cuda_ops);
    body(gpu);
    for (const Output& out : outputs) {
      std::vector<float> want = cpu.get(out.name), got = gpu.get(out.name);
      double scale = 0;
      for (float w : want) scale = std::max(scale, double(std::fabs(w)));
      EXPECT_LE(normalized_error(got, want), out.tolerance + (scale > 0 ? out.absolute / scale : 0.0)) << out.name;
    }
  });
}

}  // namespace

// ---- casts ---------------------------------------------------------------------------------

TEST(CudaBackendBf16, CastRoundsToNearestEvenAndRoundTrips) {
  auto bits = [](uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; };
  // Ties (dropped half exactly 0x8000) with even and odd kept mantissa, values either side of
  // a tie, signed zeros, subnormals, infinities, the largest float (rounds up to inf), random.
  std::vector<float> src = {bits(0x3f808000), bits(0x3f818000), bits(0x3f808001), bits(0x3f807fff),
                            bits(0xbf818000), 0.0f, -0.0f, bits(0x00008000), bits(0x00018000),
                            INFINITY, -INFINITY, bits(0x7f7fffff), 1e-40f, 3.0e38f};
  for (float x : random_floats(1001, 91, -1e4f, 1e4f)) src.push_back(x);
  for (pptrain::testing::RunOrder order : pptrain::testing::kRunOrders) {
    auto ops = make_cuda_ops(0);
    pptrain::testing::set_run_order(*ops, order);
    // One element in: the 128-bit vector path and the scalar tail and misaligned starts.
    for (size_t offset : {size_t(0), size_t(1)}) {
      const size_t n = src.size() - offset;
      auto* f = static_cast<float*>(ops->allocate(src.size() * sizeof(float)));
      auto* h = static_cast<bfloat16*>(ops->allocate(src.size() * sizeof(bfloat16)));
      ops->copy_to_device(f, src.data(), src.size() * sizeof(float));
      ops->cast(h + offset, f + offset, n);
      std::vector<bfloat16> got(src.size());
      ops->copy_to_host(got.data(), h, got.size() * sizeof(bfloat16));
      for (size_t i = offset; i < src.size(); ++i)
        ASSERT_EQ(got[i].bits, bfloat16::from_float(src[i]).bits) << "element " << i << " = " << src[i];
      ops->release(f);
      ops->release(h);
    }
    // bf16 -> fp32 is exact, and casting back returns the same bits: all 65536 patterns
    // (NaNs only as NaNs: their payload may be canonicalized).
    std::vector<bfloat16> all(65536);
    for (uint32_t i = 0; i < all.size(); ++i) all[i].bits = uint16_t(i);
    auto* h = static_cast<bfloat16*>(ops->allocate(all.size() * sizeof(bfloat16)));
    auto* f = static_cast<float*>(ops->allocate(all.size() * sizeof(float)));
    auto* back = static_cast<bfloat16*>(ops->allocate(all.size() * sizeof(bfloat16)));
    ops->copy_to_device(h, all.data(), all.size() * sizeof(bfloat16));
    ops->cast(f, h, all.size());
    ops->cast(back, f, all.size());
    std::vector<float> wide(all.size());
    std::vector<bfloat16> narrow(all.size());
    ops->copy_to_host(wide.data(), f, wide.size() * sizeof(float));
    ops->copy_to_host(narrow.data(), back, narrow.size() * sizeof(bfloat16));
    for (size_t i = 0; i < all.size(); ++i) {
      const float want = all[i].to_float();
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(wide[i]) && std::isnan(narrow[i].to_float())) << i;
      } else {
        ASSERT_EQ(std::memcmp(&wide[i], &want, 4), 0) << i;
        ASSERT_EQ(narrow[i].bits, all[i].bits) << i;
      }
    }
    for (void* p : {static_cast<void*>(h), static_cast<void*>(f), static_cast<void*>(back)}) ops->release(p);
  }
}

// ---- dtypes: the views of one call share one dtype --------------------------------------------

TEST(CudaBackendBf16, RejectsMixedDtypesInOneCallWithOneLine) {
  auto ops = make_cuda_ops(0);
  auto* h = static_cast<bfloat16*>(ops->allocate(64 * sizeof(bfloat16)));
  auto* f = static_cast<float*>(ops->allocate(64 * sizeof(float)));
  auto error_of = [](auto call) -> std::string {
    try {
      call();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  // A generated body (a kernel launch) and a hand-written one (a GEMM).
  EXPECT_EQ(error_of([&] { ops->add(h, f, h, 64); }),
            "backend 'cuda': add got bf16 and fp32 views in one call (the views of one call share one dtype)");
  EXPECT_EQ(error_of([&] { ops->linear_forward(f, f, h, nullptr, 4, 4, 4); }),
            "backend 'cuda': linear_forward got fp32 and bf16 views in one call (the views of one call share one "
            "dtype)");
  // An absent (null) view matches any dtype: a null fp32 bias beside bf16 views is no bias.
  std::vector<bfloat16> x(16), w(16), y(16), y_null(16);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = bfloat16::from_float(float(i % 5) - 2.0f);
    w[i] = bfloat16::from_float(float(i % 3) - 1.0f);
  }
  bfloat16 *x_dev = h, *w_dev = h + 16, *y_dev = h + 32;
  ops->copy_to_device(x_dev, x.data(), 16 * sizeof(bfloat16));
  ops->copy_to_device(w_dev, w.data(), 16 * sizeof(bfloat16));
  ops->linear_forward(y_dev, x_dev, w_dev, nullptr, 4, 4, 4);
  ops->copy_to_host(y.data(), y_dev, 16 * sizeof(bfloat16));
  ops->linear_forward(y_dev, x_dev, w_dev, static_cast<const float*>(nullptr), 4, 4, 4);
  ops->copy_to_host(y_null.data(), y_dev, 16 * sizeof(bfloat16));
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i].bits, y_null[i].bits) << i;
  // A cast to the same dtype is a copy.
  ops->cast(h + 48, x_dev, 16);
  ops->copy_to_host(y.data(), h + 48, 16 * sizeof(bfloat16));
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i].bits, x[i].bits) << i;
  ops->release(h);
  ops->release(f);
}

// ---- linear (cuBLASLt) -----------------------------------------------------------------------

TEST(CudaBackendBf16, LinearForwardDgradWgrad) {
  const int n = 7, in = 13, out = 9;
  for (bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "with bias" : "without bias");
    // y, dx: one GEMM output (in + 1 or out terms, each |x·w| ≤ 1) rounded once (the bias is
    // added in fp32 before that rounding; dx_acc adds its bf16 old value before it). dw, db:
    // fp32 sums of the n rows' exact bf16 products and the old value.
    compare({{"y", kU, sum_order(in + 1, 1)},
             {"dx", kU, sum_order(out, 1)},
             {"dx_acc", kU, sum_order(out + 1, 1)},
             {"dw", 0, sum_order(n + 1, 1)},
             {"db", 0, sum_order(n + 1, 1)}},
            [&](auto& r) {
              r.act("x", random_floats(size_t(n) * in, 1));
              r.act("w", random_floats(size_t(out) * in, 2));
              r.act("b", random_floats(out, 3));
              r.act("dy", random_floats(size_t(n) * out, 4));
              r.act_zeros("y", size_t(n) * out);
              r.act_zeros("dx", size_t(n) * in);
              r.act("dx_acc", random_floats(size_t(n) * in, 5));
              r.f32("dw", random_floats(size_t(out) * in, 6));  // fp32 gradients accumulate (+=)
              r.f32("db", random_floats(out, 7));
              r.ops().linear_forward(r.a("y"), r.a("x"), r.a("w"), bias ? r.a("b") : nullptr, n, in, out);
              r.ops().linear_backward_input(r.a("dx"), r.a("dy"), r.a("w"), n, in, out, false);
              r.ops().linear_backward_input(r.a("dx_acc"), r.a("dy"), r.a("w"), n, in, out, true);
              r.ops().linear_backward_weight(r.f("dw"), bias ? r.f("db") : nullptr, r.a("dy"), r.a("x"), n, in,
                                             out);
            });
  }
}

// y = x·wᵀ + b + residual: on cuda the GEMM adds the bf16 residual and the bias in fp32 and
// rounds once; the fp32 reference has no rounding at all. Terms: in products, the bias and
// the residual (in + 2, each |term| <= 1), one rounding.
TEST(CudaBackendBf16, LinearForwardResidual) {
  const int n = 7, in = 13, out = 9;
  compare({{"y", kU, sum_order(in + 2, 1)}}, [&](auto& r) {
    r.act("x", random_floats(size_t(n) * in, 21));
    r.act("w", random_floats(size_t(out) * in, 22));
    r.act("b", random_floats(out, 23));
    r.act("res", random_floats(size_t(n) * out, 24));
    r.act_zeros("y", size_t(n) * out);
    r.ops().linear_forward_residual(r.a("y"), r.a("x"), r.a("w"), r.a("b"), r.a("res"), n, in, out);
  });
}

// ---- layernorm, GELU, elementwise, embedding -------------------------------------------------

TEST(CudaBackendBf16, Layernorm) {
  const int n = 11, c = 19;
  // mean, rstd, dg, db: fp32 results of identical inputs; y, dx, dx_acc: fp32 from identical
  // inputs, rounded once. x ∈ [-2, 3]; the normalised x̂ has Σx̂² = c per row, so |x̂| ≤ √c.
  //   mean: c terms ≤ 3, / c. rstd: the variance sums c + 1 non-negative terms (relative
  //   γ, no cancellation; the mean's error drops out to first order, Σ(x − mean) = 0),
  //   then rsqrt. x̂ = (x − mean)·rstd moves by r·Δmean + √c·Δrstd/rstd, r = max rstd (from
  //   the reference). y = x̂·g + b with |g|, |b| ≤ 1.
  //   dx = rstd·(dy·g − S1 − x̂·S2), S1 = Σ dy·g / c (terms ≤ 1), S2 = Σ dy·g·x̂ / c
  //   (terms ≤ √c; |S2| ≤ 1 by Cauchy–Schwarz); dx_acc adds its old value (≤ 1).
  //   dg, db: sums over the n rows of dy·x̂ (≤ √c) and dy (≤ 1), plus the old value.
  const double rc = std::sqrt(double(c));
  double r_max = 0;  // the largest 1/σ of a row
  {
    auto cpu = make_cpu_ops();
    std::vector<float> x = round_bf16(random_floats(size_t(n) * c, 21, -2.0f, 3.0f)), g = round_bf16(random_floats(c, 22)),
                       b = round_bf16(random_floats(c, 23)), y(x.size()), mean(n), rstd(n);
    cpu->layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), n, c);
    r_max = max_abs(rstd);
  }
  const double d_mean = sum_order(c, 3) / c + 2 * kFp32Unit * 3;
  const double rel_rstd = 2 * (gamma_n(c + 3, kFp32Unit) + kExp);
  const double d_xhat = r_max * d_mean + rc * rel_rstd;
  const double d_y = d_xhat + expression(2);
  const double d_inner = sum_order(c, 1) / c + d_xhat + rc * (sum_order(c, rc) / c + d_xhat) + expression(3);
  const double d_dx = r_max * d_inner + r_max * (2 + rc) * rel_rstd;
  compare({{"y", kU, d_y},
           {"mean", 0, d_mean},
           {"rstd", rel_rstd},
           {"dx", kU, d_dx},
           {"dx_acc", kU, d_dx + expression(1) * (r_max * (2 + rc) + 1)},
           {"dg", 0, sum_order(n + 1, rc) + n * d_xhat},
           {"db", 0, sum_order(n + 1, 1)}},
          [&](auto& r) {
            r.act("x", random_floats(size_t(n) * c, 21, -2.0f, 3.0f));
            r.act("g", random_floats(c, 22));
            r.act("b", random_floats(c, 23));
            r.act("dy", random_floats(size_t(n) * c, 24));
            r.act_zeros("y", size_t(n) * c);
            r.f32_zeros("mean", n);
            r.f32_zeros("rstd", n);
            r.act_zeros("dx", size_t(n) * c);
            r.act("dx_acc", random_floats(size_t(n) * c, 25));
            r.f32("dg", random_floats(c, 26));
            r.f32("db", random_floats(c, 27));
            r.ops().layernorm_forward(r.a("y"), r.f("mean"), r.f("rstd"), r.a("x"), r.a("g"), r.a("b"), n, c);
            r.ops().layernorm_backward_input(r.a("dx"), r.a("dy"), r.a("x"), r.f("mean"), r.f("rstd"), r.a("g"), n,
                                             c, nullptr);
            // dx_acc = dx_acc + LN'(dy): the residual in place (dx aliases it)
            r.ops().layernorm_backward_input(r.a("dx_acc"), r.a("dy"), r.a("x"), r.f("mean"), r.f("rstd"),
                                             r.a("g"), n, c, r.a("dx_acc"));
            r.ops().layernorm_backward_weight(r.f("dg"), r.f("db"), r.a("dy"), r.a("x"), r.f("mean"), r.f("rstd"),
                                              n, c);
          });
}

TEST(CudaBackendBf16, GeluAndElementwise) {
  const size_t n = 1029;  // not a multiple of the 8-bf16 pack
  const int rows = 7, cols = 147;
  // Every output is one fp32 expression of identical inputs (GELU's tanh form: about 8
  // operations and a tanh; its derivative about 16 and a tanh; the adds one), rounded once.
  compare({{"gelu", kU + expression(8 + 8)},
           {"dgelu", kU + expression(16 + 8)},
           {"sum", kU + expression(1)},
           {"alias", kU + expression(1)},
           {"biased", kU + expression(1)}},
          [&](auto& r) {
            r.act("x", random_floats(n, 31, -4.0f, 4.0f));
            r.act("a", random_floats(n, 32));
            r.act("dy", random_floats(n, 33));
            r.act_zeros("gelu", n);
            r.act_zeros("dgelu", n);
            r.act_zeros("sum", n);
            r.act("alias", random_floats(n, 34));
            r.act("biased", random_floats(size_t(rows) * cols, 37));
            r.act("bias", random_floats(cols, 38));
            r.ops().gelu_forward(r.a("gelu"), r.a("x"), n);
            r.ops().gelu_backward(r.a("dgelu"), r.a("dy"), r.a("x"), n);
            r.ops().add(r.a("sum"), r.a("x"), r.a("a"), n);
            r.ops().add(r.a("alias"), r.a("alias"), r.a("a"), n);
            r.ops().add_bias(r.a("biased"), r.a("bias"), rows, cols);
          });
}

TEST(CudaBackendBf16, EmbeddingOfAVocabularyShard) {
  const int t = 5, n = 3 * t, c = 13, v0 = 3, vl = 6;  // shard: tokens 3..8 of 0..10
  for (bool positions : {true, false}) {
    SCOPED_TRACE(positions ? "token + position" : "token only");
    // y: the sum of two bf16 rows rounded once (a copy without positions); gradients: fp32
    // sums of at most n rows (≤ 1) and the old value.
    compare({{"y", kU + expression(1)}, {"dwte", 0, sum_order(n + 1, 1)}, {"dwpe", 0, sum_order(n + 1, 1)}},
            [&](auto& r) {
      const int32_t* tokens = r.ints("tokens", random_ints(n, 41, 0, 10));
      r.act("wte", random_floats(size_t(vl) * c, 42));
      r.act("wpe", random_floats(size_t(t) * c, 43));
      r.act("dy", random_floats(size_t(n) * c, 44));
      r.act_zeros("y", size_t(n) * c);
      r.f32("dwte", random_floats(size_t(vl) * c, 45));
      r.f32("dwpe", random_floats(size_t(t) * c, 46));
      r.ops().embedding_forward(r.a("y"), tokens, r.a("wte"), positions ? r.a("wpe") : nullptr, n, t, c, v0, vl);
      r.ops().embedding_backward_weight(r.f("dwte"), positions ? r.f("dwpe") : nullptr, r.a("dy"), tokens, n, t, c,
                                        v0, vl);
    });
  }
}

// ---- cross-entropy ---------------------------------------------------------------------------

TEST(CudaBackendBf16, VocabParallelCrossEntropyWithPadding) {
  const int n = 9, vl = 7, valid = 5, v0 = 14;  // last shard of vocab 19 padded to 21
  // rmax, target_logit: exact (a maximum and a copy). sumexp: fp32 sum of `valid` terms
  // exp(l − max) ∈ (0, 1] (each exp within kExp), at least 1 (the maximum's own term).
  // dlogits = (exp(l − max) / sumexp − [target]) / n: p moves by its exp, the division and
  // sumexp's relative error, then the scale; rounded once.
  const double d_sumexp = sum_order(valid, 1) + 2 * kExp * valid;
  compare({{"rmax", 0.0},
           {"sumexp", 0, d_sumexp},
           {"target_logit", 0.0},
           {"dlogits", kU, (2 * (kExp + 3 * kFp32Unit) + d_sumexp) / n}},
          [&](auto& r) {
    r.act("logits", random_floats(size_t(n) * vl, 61, -3.0f, 3.0f));
    const int32_t* targets = r.ints("targets", random_ints(n, 62, 10, 18));
    r.f32_zeros("rmax", n);
    r.f32_zeros("sumexp", n);
    r.f32_zeros("target_logit", n);
    r.act_zeros("dlogits", size_t(n) * vl);
    r.ops().ce_row_max(r.f("rmax"), r.a("logits"), n, vl, valid);
    r.ops().ce_sumexp_target(r.f("sumexp"), r.f("target_logit"), r.a("logits"), r.f("rmax"), targets, n, vl, valid,
                             v0);
    r.ops().ce_backward(r.a("dlogits"), r.a("logits"), r.f("rmax"), r.f("sumexp"), targets, n, vl, valid, v0,
                        1.0f / n);
  });
}

// ---- attention ---------------------------------------------------------------------------------

TEST(CudaBackendBf16, AttentionForwardAndDgrad) {
  struct Shape { int b, t, nh, hd; };
  for (Shape s : {Shape{2, 5, 3, 4}, Shape{1, 7, 2, 5}, Shape{3, 1, 1, 3}}) {
    SCOPED_TRACE(::testing::Message() << "b=" << s.b << " t=" << s.t << " nh=" << s.nh << " hd=" << s.hd);
    const size_t e = size_t(s.b) * s.t * s.nh * s.hd, square = size_t(s.b) * s.nh * s.t * s.t;
    const std::vector<float> qkv = round_bf16(random_floats(3 * e, 51, -1.0f, 1.0f));
    const std::vector<float> dout = round_bf16(random_floats(e, 52));
    // The fp32 reference, for the magnitudes the bounds below need, and the probs that both
    // backward runs get (rounded to bf16), so backward is compared on identical inputs.
    std::vector<float> out(e), probs(square), dqkv(3 * e);
    auto cpu = make_cpu_ops();
    cpu->attention_forward(out.data(), probs.data(), qkv.data(), s.b, s.t, s.nh, s.hd);
    const std::vector<float> probs_bf16 = round_bf16(probs);
    cpu->attention_backward_input(dqkv.data(), dout.data(), qkv.data(), probs_bf16.data(), s.b, s.t, s.nh, s.hd);
    const double scale = 1.0 / std::sqrt(double(s.hd)), m = max_abs(qkv), md = max_abs(dout);
    // Forward: the scores s = q·k (|s| ≤ S = HD·m²) are rounded (±u·S), which moves each
    // softmax exponent by ≤ u·S·scale and so each prob by a factor ≤ 1 ± 2u·S·scale; the probs
    // are rounded (u); y = Σ p·v then moves by ≤ (2S·scale + 1)·u·max|v| and is rounded (u·|y|).
    const double s_max = s.hd * m * m * scale;
    const double probs_tol = 1.1 * (2 * s_max + 1) * kU;
    const double out_tol = 1.1 * ((2 * s_max + 1) * m + max_abs(out)) * kU / max_abs(out);
    // Backward (same bf16 probs on both sides): dP = dy·vᵀ (|dP| ≤ HD·md·m) is rounded, which
    // moves dscores = scale·p∘(dP - Σ p dP) by ≤ 2u·scale·p·max|dP|, Σ_j |dscores_ij| ≤
    // 2·scale·max|dP|, and its own rounding adds u of that; dq = dscores·k and dk = dscoresᵀ·q
    // then move by ≤ 4u·scale·max|dP|·m and are rounded (u·|dqkv|); dv = pᵀ·dy is rounded once.
    const double dp_max = s.hd * md * m;
    const double dqkv_tol = 1.1 * (4 * scale * dp_max * m + max_abs(dqkv)) * kU / max_abs(dqkv);
    compare({{"out", out_tol}, {"probs", probs_tol}}, [&](auto& r) {
      r.act("qkv", qkv);
      r.act_zeros("out", e);
      r.act_zeros("probs", square);
      r.ops().attention_forward(r.a("out"), r.a("probs"), r.a("qkv"), s.b, s.t, s.nh, s.hd);
    });
    compare({{"dqkv", dqkv_tol}}, [&](auto& r) {
      r.act("qkv", qkv);
      r.act("dout", dout);
      r.act("probs", probs_bf16);
      r.act("dqkv", random_floats(3 * e, 53));  // overwritten, not accumulated
      r.ops().attention_backward_input(r.a("dqkv"), r.a("dout"), r.a("qkv"), r.a("probs"), s.b, s.t, s.nh, s.hd);
    });
  }
}
