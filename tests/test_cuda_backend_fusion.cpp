// The fused epilogues of the cuda backend (FC1 + GELU, FC2 dgrad + DGELU, the wgrad's bias
// gradient) against the unfused path, on CudaOps over the emulated cuBLASLt (kernels under
// the SIMT emulator), fp32 and bf16; plus the emulated library's rules for the GELU aux
// matrix. Bounds are derived below from unit roundoffs (support/tolerances.h: u = 2^-24 for
// fp32, 2^-8 for bf16) and operation counts; the worst ratio error/bound is printed.
//
// Fused and unfused share the GEMM: the emulated cuBLASLt computes the same fp32 product
// v (+ bias) for either epilogue, so `pre` is bit-identical, and what differs is
//  - where the GELU is evaluated: cuBLASLt's tanh form 0.5 p (1 + tanh u) in the epilogue,
//    kernels/gelu.cu's p·sigmoid(2u) unfused: the same function, two fp32 evaluations;
//  - with bf16 storage, how often a value is rounded: the epilogue applies the GELU (or its
//    derivative) to the fp32 accumulator, the unfused path to the product rounded to bf16.
#define PPTRAIN_EMULATED 1  // this binary links the emulated cuda backend

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/ops.h"
#include "core/error.h"
#include "emu/emu.h"
#include "support/cpu_ops_util.h"
#include "support/tolerances.h"

using namespace pptrain;
using pptrain::testing::kBf16Unit;
using pptrain::testing::kFp32Unit;
using pptrain::testing::normalized_error;
using pptrain::testing::random_floats;

namespace {

constexpr emu::Order kOrders[] = {emu::Order::forward, emu::Order::reverse};

// One fp32 evaluation of the tanh-form GELU at p, against the exact function: the argument
// u = √(2/π)(p + 0.044715 p³) takes 5 roundings (no cancellation: both terms have p's sign),
// so |δu| ≤ 5u_f|u|, which moves G = 0.5(1 + tanh u) by 0.5 sech²(u)·|δu| ≤ 5u_f·0.5·max(u
// sech² u) < 1.2u_f; tanh/exp cost 4 ulp = 8u_f relative (as in tolerances.h), the adds,
// the division and the halving 3u_f more, all on a factor in [0, 1]: G is within 12.2u_f
// absolute; the final product with p and its rounding add u_f|p|. Per evaluation ≤ 13.2u_f|p|,
// two evaluations (fused and unfused) differ by at most 26.4u_f|p|: we take 27u_f|p|.
constexpr double kGeluEvaluations = 27 * kFp32Unit;
// The derivative gelu'(p) = G + p·0.5 sech²(u)·u' (u' = √(2/π)(1 + 0.134145 p²)): G as above
// (12.2u_f); the second term is at most 0.6 in magnitude for every p (its maximum over p) and
// is a product of 6 factors, with sech² = 1 − tanh² (or 2s(1−s)) carrying the 8u_f of
// tanh/exp plus 2 roundings, and the 1.2-like amplification of δu through sech²' bounded by
// 2|u|·sech²(u)·|δu| ≤ 2·5u_f·0.45: ≤ 0.6·(6 + 10 + 5)u_f ≈ 12.6u_f. Per evaluation ≤ 25u_f,
// two differ by ≤ 50u_f; the product with v and its rounding add u_f|v g'| ≤ 1.13u_f|v|.
constexpr double kDgeluEvaluations = 52 * kFp32Unit;  // times |v|
// max |gelu'| over the reals (at p ≈ 1.5, the tanh form): the Lipschitz constant of gelu,
// which bounds how far gelu moves when its bf16 input is rounded.
constexpr double kGeluLipschitz = 1.13;

// Device tensors of one CudaOps, filled from host floats (stored as T) and read back as floats.
template <typename T>
class Tensors {
 public:
  explicit Tensors(Ops& ops) : ops_(ops) {}
  ~Tensors() {
    for (auto& [name, p] : ptr_) ops_.release(p);
  }
  T* put(const std::string& name, const std::vector<float>& host) {
    std::vector<T> stored(host.size());
    for (size_t i = 0; i < host.size(); ++i) stored[i] = from(host[i]);
    void* p = ops_.allocate(host.size() * sizeof(T));
    ops_.copy_to_device(p, stored.data(), host.size() * sizeof(T));
    ptr_[name] = p;
    size_[name] = host.size();
    return static_cast<T*>(p);
  }
  T* zeros(const std::string& name, size_t n) { return put(name, std::vector<float>(n, 0.0f)); }
  T* operator[](const std::string& name) { return static_cast<T*>(ptr_.at(name)); }
  std::vector<float> get(const std::string& name) {
    std::vector<T> stored(size_.at(name));
    ops_.copy_to_host(stored.data(), ptr_.at(name), stored.size() * sizeof(T));
    std::vector<float> out(stored.size());
    for (size_t i = 0; i < stored.size(); ++i) out[i] = to(stored[i]);
    return out;
  }

  static T from(float x) {
    if constexpr (std::is_same_v<T, float>) return x;
    else return bfloat16::from_float(x);
  }
  static float to(T x) {
    if constexpr (std::is_same_v<T, float>) return x;
    else return x.to_float();
  }

 private:
  Ops& ops_;
  std::map<std::string, void*> ptr_;
  std::map<std::string, size_t> size_;
};

// Stored values (bf16: rounded), as floats: the exact inputs both paths see.
template <typename T>
std::vector<float> representable(std::vector<float> v) {
  for (float& x : v) x = Tensors<T>::to(Tensors<T>::from(x));
  return v;
}

// max_i |got_i − want_i| / bound_i; reports the worst element's values.
double worst_ratio(const std::vector<float>& got, const std::vector<float>& want, const std::vector<double>& bound,
                   std::string* where = nullptr) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double ratio = std::fabs(double(got[i]) - double(want[i])) / bound[i];
    if (!(ratio <= worst)) {
      worst = std::isnan(ratio) ? INFINITY : ratio;
      if (where) *where = "element " + std::to_string(i) + ": " + std::to_string(got[i]) + " vs " +
                          std::to_string(want[i]);
    }
  }
  return worst;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::unique_ptr<Ops> cuda_ops(emu::Order order) {
  auto ops = make_cuda_ops(0);
  static_cast<cuda::CudaOps&>(*ops).compute_stream()->order = order;
  return ops;
}

// ---- FC1 + GELU forward ---------------------------------------------------------------------
// x[N,I], w[O,I], b[O] -> pre[N,O], y[N,O]: fused (one op) against linear_forward then
// gelu_forward on the same CudaOps. Returns the worst ratio of y's error to its bound.
template <typename T>
double check_linear_gelu_forward(int n, int in, int out, bool expect_fused) {
  SCOPED_TRACE(::testing::Message() << "n=" << n << " in=" << in << " out=" << out);
  const auto x = representable<T>(random_floats(size_t(n) * in, 1, -2, 2));
  const auto w = representable<T>(random_floats(size_t(out) * in, 2));
  const auto b = representable<T>(random_floats(out, 3));
  double worst = 0;
  for (emu::Order order : kOrders) {
    auto ops = cuda_ops(order);
    Tensors<T> t(*ops);
    t.put("x", x), t.put("w", w), t.put("b", b);
    t.zeros("y", size_t(n) * out), t.zeros("pre", size_t(n) * out);
    t.zeros("y_ref", size_t(n) * out), t.zeros("pre_ref", size_t(n) * out);
    ops->linear_gelu_forward(t["y"], t["pre"], t["x"], t["w"], t["b"], n, in, out);
    ops->linear_forward(t["pre_ref"], t["x"], t["w"], t["b"], n, in, out);
    ops->gelu_forward(t["y_ref"], t["pre_ref"], size_t(n) * out);
    const auto pre = t.get("pre"), y = t.get("y"), y_ref = t.get("y_ref");
    // The GEMM and its bias are the same fp32 arithmetic with one rounding either way.
    EXPECT_TRUE(bitwise_equal(pre, t.get("pre_ref"))) << "pre (the aux output) differs from linear_forward";
    if (!expect_fused) {  // the fallback is the unfused ops themselves
      EXPECT_TRUE(bitwise_equal(y, y_ref)) << "fallback";
      continue;
    }
    std::vector<double> bound(y.size());
    for (size_t i = 0; i < y.size(); ++i) {
      const double p = std::fabs(pre[i]);
      // fp32: two evaluations of the same function. bf16: the unfused GELU reads the rounded
      // pre (moved by ≤ u_b|p_exact| ≤ u_b|p|(1 + u_b), hence gelu by ≤ 1.13 of that), and each
      // path rounds its output once (≤ u_b|y| each; |y| ≤ |p|).
      bound[i] = kGeluEvaluations * p + 1e-30;
      if (std::is_same_v<T, bfloat16>) bound[i] += kBf16Unit * (kGeluLipschitz * p * (1 + kBf16Unit) + 2 * p);
    }
    std::string where;
    const double ratio = worst_ratio(y, y_ref, bound, &where);
    EXPECT_LE(ratio, 1.0) << "y, worst " << where;
    worst = std::max(worst, ratio);
  }
  return worst;
}

// ---- FC2 dgrad + DGELU ------------------------------------------------------------------------
// dy[N,O], w[O,I], pre[N,I] -> dpre[N,I] = (dy·w) ∘ gelu'(pre): fused against
// linear_backward_input then gelu_backward. v = dy·w is taken from the unfused GEMM.
template <typename T>
double check_linear_backward_input_dgelu(int n, int in, int out, bool expect_fused) {
  SCOPED_TRACE(::testing::Message() << "n=" << n << " in=" << in << " out=" << out);
  const auto dy = representable<T>(random_floats(size_t(n) * out, 4));
  const auto w = representable<T>(random_floats(size_t(out) * in, 5));
  const auto pre = representable<T>(random_floats(size_t(n) * in, 6, -4, 4));
  double worst = 0;
  for (emu::Order order : kOrders) {
    auto ops = cuda_ops(order);
    Tensors<T> t(*ops);
    t.put("dy", dy), t.put("w", w), t.put("pre", pre);
    t.zeros("dpre", size_t(n) * in), t.zeros("v", size_t(n) * in), t.zeros("dpre_ref", size_t(n) * in);
    ops->linear_backward_input_dgelu(t["dpre"], t["dy"], t["w"], t["pre"], n, in, out);
    ops->linear_backward_input(t["v"], t["dy"], t["w"], n, in, out, false);
    ops->gelu_backward(t["dpre_ref"], t["v"], t["pre"], size_t(n) * in);
    const auto got = t.get("dpre"), want = t.get("dpre_ref"), v = t.get("v");
    if (!expect_fused) {
      EXPECT_TRUE(bitwise_equal(got, want)) << "fallback";
      continue;
    }
    std::vector<double> bound(got.size());
    for (size_t i = 0; i < got.size(); ++i) {
      // |v_exact| ≤ |v|(1 + u) for the stored v (fp32 or bf16).
      const double av = std::fabs(v[i]) * (1 + (std::is_same_v<T, bfloat16> ? kBf16Unit : kFp32Unit));
      // fp32: the two evaluations of gelu' (times |v|). bf16: the unfused path multiplies the
      // product rounded to bf16 (≤ u_b|v|·|g'| ≤ 1.13u_b|v|) and each path rounds its result
      // once (≤ u_b·1.13|v| each).
      bound[i] = kDgeluEvaluations * av + 1e-30;
      if (std::is_same_v<T, bfloat16>) bound[i] += 3 * kBf16Unit * kGeluLipschitz * av;
    }
    std::string where;
    const double ratio = worst_ratio(got, want, bound, &where);
    EXPECT_LE(ratio, 1.0) << "dpre, worst " << where;
    worst = std::max(worst, ratio);
  }
  return worst;
}

}  // namespace

// Widths that are multiples of 8 take the fused epilogue; 9 and 13 (the aux leading
// dimension rule) fall back to the unfused ops, bit for bit.
TEST(CudaBackendFusion, LinearGeluForwardFp32) {
  const double fused = check_linear_gelu_forward<float>(7, 13, 24, true);
  check_linear_gelu_forward<float>(7, 13, 9, false);
  std::printf("linear_gelu_forward fp32: worst error / bound %.3g\n", fused);
}

TEST(CudaBackendFusion, LinearGeluForwardBf16) {
  const double fused = check_linear_gelu_forward<bfloat16>(7, 13, 24, true);
  check_linear_gelu_forward<bfloat16>(7, 13, 9, false);
  std::printf("linear_gelu_forward bf16: worst error / bound %.3g\n", fused);
}

TEST(CudaBackendFusion, LinearBackwardInputDgeluFp32) {
  const double fused = check_linear_backward_input_dgelu<float>(7, 16, 11, true);
  check_linear_backward_input_dgelu<float>(7, 13, 11, false);
  std::printf("linear_backward_input_dgelu fp32: worst error / bound %.3g\n", fused);
}

TEST(CudaBackendFusion, LinearBackwardInputDgeluBf16) {
  const double fused = check_linear_backward_input_dgelu<bfloat16>(7, 16, 11, true);
  check_linear_backward_input_dgelu<bfloat16>(7, 13, 11, false);
  std::printf("linear_backward_input_dgelu bf16: worst error / bound %.3g\n", fused);
}

// The fused ops against the cpu backend's (the unfused sequence in fp32), with the 1e-5
// normwise tolerance of test_cuda_backend.cpp: GELU evaluation differences (≤ 27u_f|p|, above)
// and the GEMMs' summation orders (13 terms) are far below it.
TEST(CudaBackendFusion, FusedOpsMatchTheCpuBackend) {
  const int n = 5, in = 16, out = 24;
  const auto x = random_floats(size_t(n) * in, 7), w = random_floats(size_t(out) * in, 8);
  const auto b = random_floats(out, 9), dy = random_floats(size_t(n) * out, 10);
  auto run = [&](Ops& ops) {
    Tensors<float> t(ops);
    t.put("x", x), t.put("w", w), t.put("b", b), t.put("dy", dy);
    t.zeros("y", size_t(n) * out), t.zeros("pre", size_t(n) * out), t.zeros("dpre", size_t(n) * in);
    ops.linear_gelu_forward(t["y"], t["pre"], t["x"], t["w"], t["b"], n, in, out);
    // The dgrad maps dy[N,O] through w[O,I] to [N,I]; the first N·I values of pre (GELU
    // inputs of a realistic range) serve as that layer's GELU input.
    ops.linear_backward_input_dgelu(t["dpre"], t["dy"], t["w"], t["pre"], n, in, out);
    return std::vector<std::vector<float>>{t.get("y"), t.get("pre"), t.get("dpre")};
  };
  auto cpu = make_cpu_ops();
  const auto want = run(*cpu);
  for (emu::Order order : kOrders) {
    auto ops = cuda_ops(order);
    const auto got = run(*ops);
    for (size_t k = 0; k < got.size(); ++k) EXPECT_LE(normalized_error(got[k], want[k]), 1e-5) << k;
  }
}

// The wgrad's bias gradient comes from the BGRADB epilogue, which stores; db accumulates over
// microbatches. Two microbatches into a non-zero db against the cpu backend, fp32 and bf16
// storage. Per element and microbatch, each backend sums n + 1 terms (the db it starts from
// and the n rows; the cuda side adds the epilogue's Σ rows to db) in its own order, within
// γ_{n+1}·Σ|terms| of the exact sum (tolerances.h): the two differ by at most twice that.
template <typename T>
void check_bias_gradient_accumulates() {
  const int n = 37, in = 5, out = 24;
  const auto x = representable<T>(random_floats(size_t(n) * in, 11));
  const auto dy1 = representable<T>(random_floats(size_t(n) * out, 12));
  const auto dy2 = representable<T>(random_floats(size_t(n) * out, 13));
  const auto db0 = random_floats(out, 14, 5, 10);  // a gradient already holding earlier microbatches
  std::vector<float> db_ref = db0, dw_ref(size_t(out) * in, 0.0f);
  auto cpu = make_cpu_ops();
  for (const auto* dy : {&dy1, &dy2})
    cpu->linear_backward_weight(dw_ref.data(), db_ref.data(), dy->data(), x.data(), n, in, out);
  std::vector<double> bound(out);
  for (int j = 0; j < out; ++j) {
    // The second microbatch starts from db₀ + Σ dy1: its terms are bounded by |db₀| + Σ|dy1|.
    double terms = 2 * std::fabs(db0[j]);
    for (int r = 0; r < n; ++r) terms += 2 * std::fabs(dy1[size_t(r) * out + j]) + std::fabs(dy2[size_t(r) * out + j]);
    bound[j] = 2 * pptrain::testing::gamma_n(n + 1, kFp32Unit) * terms;
  }
  for (emu::Order order : kOrders) {
    auto ops = cuda_ops(order);
    Tensors<T> t(*ops);
    t.put("x", x), t.put("dy1", dy1), t.put("dy2", dy2);
    Tensors<float> g(*ops);
    g.put("db", db0), g.zeros("dw", size_t(out) * in);
    ops->linear_backward_weight(g["dw"], g["db"], t["dy1"], t["x"], n, in, out);
    ops->linear_backward_weight(g["dw"], g["db"], t["dy2"], t["x"], n, in, out);
    std::string where;
    const double ratio = worst_ratio(g.get("db"), db_ref, bound, &where);
    EXPECT_LE(ratio, 1.0) << "db, worst " << where;
    EXPECT_LE(normalized_error(g.get("dw"), dw_ref), 1e-5) << "dw";
    std::printf("bias gradient (%s): worst error / bound %.3g\n", std::is_same_v<T, float> ? "fp32" : "bf16", ratio);
  }
}

TEST(CudaBackendFusion, WgradBiasGradientAccumulatesOverMicrobatchesFp32) { check_bias_gradient_accumulates<float>(); }
TEST(CudaBackendFusion, WgradBiasGradientAccumulatesOverMicrobatchesBf16) {
  check_bias_gradient_accumulates<bfloat16>();
}

// The emulated cuBLASLt enforces the aux matrix's rules as cublasLt.h states them: an aux
// leading dimension divisible by 8 and at least the rows of D, and an aux pointer; a GEMM
// breaking one fails with the library's status in one line naming the op.
TEST(CudaBackendFusion, EmulatedCublasLtRejectsABadAuxMatrix) {
  auto ops = make_cuda_ops(0);
  void* buf = ops->allocate(1 << 16);
  cuda::LtGemm gemm(static_cast<cuda::CudaOps&>(*ops).compute_stream());
  auto expect_error = [&](const cuda::LtShape& shape, const void* aux, const std::string& want) {
    try {
      gemm.run("test gemm", shape, buf, buf, buf, 0.0f, buf, aux);
      ADD_FAILURE() << "no error, expected: " << want;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      EXPECT_NE(msg.find(want), std::string::npos) << msg;
    }
  };
  const std::string invalid = "cublasLtMatmulAlgoGetHeuristic (test gemm, M=12 N=4 K=5) failed on rank 0, device 0: "
                              "CUBLAS_STATUS_INVALID_VALUE (";
  for (auto epilogue : {cuda::LtEpilogue::gelu_aux_bias, cuda::LtEpilogue::dgelu}) {
    cuda::LtShape shape{false, false, 12, 4, 5, 12, 5, 12, CUDA_R_32F, CUDA_R_32F, epilogue, 12};
    expect_error(shape, buf, invalid);  // ld 12 ≥ 12 rows, but not a multiple of 8
    shape.aux_ld = 8;
    expect_error(shape, buf, invalid);  // a multiple of 8, but fewer than the 12 rows
    shape.aux_ld = 16;
    expect_error(shape, nullptr, invalid);  // no aux matrix
    gemm.run("test gemm", shape, buf, buf, buf, 0.0f, buf, buf);  // all rules kept: runs
  }
  ops->synchronize();
  ops->release(buf);
}

// The plan cache is keyed by the epilogue and the aux matrix's alignment as well: the
// heuristic sees the aux pointer, and the emulated cublasLtMatmul (like the library) rejects
// an aux matrix less aligned than the plan was built for, so a reused plan with a misaligned
// aux would fail here.
TEST(CudaBackendFusion, PlansAreKeyedByEpilogueAndAuxAlignment) {
  const int n = 3, in = 5, out = 8;
  auto ops = make_cuda_ops(0);
  const auto& lt = static_cast<cuda::CudaOps&>(*ops).lt_gemm();
  Tensors<float> t(*ops);
  t.put("x", random_floats(size_t(n) * in, 21)), t.put("w", random_floats(size_t(out) * in, 22));
  t.put("b", random_floats(out, 23));
  t.zeros("y", size_t(n) * out), t.zeros("pre", size_t(n) * out + 1);
  const long long before = lt.heuristic_calls();
  ops->linear_forward(t["y"], t["x"], t["w"], t["b"], n, in, out);  // bias epilogue
  ops->linear_gelu_forward(t["y"], t["pre"], t["x"], t["w"], t["b"], n, in, out);  // GELU_AUX_BIAS
  EXPECT_EQ(lt.heuristic_calls() - before, 2);
  ops->linear_gelu_forward(t["y"], t["pre"], t["x"], t["w"], t["b"], n, in, out);  // reused
  EXPECT_EQ(lt.heuristic_calls() - before, 2);
  ops->linear_gelu_forward(t["y"], t["pre"] + 1, t["x"], t["w"], t["b"], n, in, out);  // aux 4-byte aligned
  EXPECT_EQ(lt.heuristic_calls() - before, 3);
  ops->synchronize();
}
