// cpu backend, fused (flash) attention: out and lse against a double-precision reference
// and against the naive attention_forward; dqkv against the double reference, the naive
// attention_backward_input and central finite differences. T = 1 (one key), 5 (one row
// block), 33 and 70 (70 spans two 64-row blocks, so dK/dV add up over blocks).
//
// Bounds are running error bounds computed from the data (Higham §3): every fp32 result is
// within the stated multiple of γ_n = n·u/(1 − n·u), u = 2^-24, of the exact value, with n
// the roundings on its path (a length-n dot product counts n, exp and log 8u = 4 ulp, as in
// support/tolerances.h). Flash and naive each stay within the bound of the exact value, so
// they differ by at most twice it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "backend/ops.h"
#include "core/error.h"
#include "support/cpu_ops_util.h"
#include "support/tolerances.h"

namespace pptrain {
namespace {

using testing::finite_difference;
using testing::gamma_n;
using testing::kFp32Unit;
using testing::normalized_error;
using testing::random_floats;
using testing::weighted_sum;

constexpr double u = kFp32Unit;

struct Shape {
  int b, t, nh, hd;
  int c() const { return nh * hd; }
  size_t qkv_size() const { return size_t(b) * t * 3 * c(); }
  size_t out_size() const { return size_t(b) * t * c(); }
  size_t rows() const { return size_t(b) * nh * t; }  // lse[B,NH,T]
};
void PrintTo(const Shape& s, std::ostream* os) {
  *os << "B=" << s.b << " T=" << s.t << " NH=" << s.nh << " HD=" << s.hd;
}

// The exact (double) forward and backward of one case, and the magnitudes the bounds need.
struct Reference {
  std::vector<double> out, lse, dqkv;                  // [B,T,C], [B,NH,T], [B,T,3C]
  double score_terms = 0;   // max_ij Σ_d |q_id k_jd| / √HD
  double dp_terms = 0;      // max_ij Σ_d |dO_id v_jd|
  double delta_terms = 0;   // max_i Σ_d |dO_id O_id|
  double dout_row = 0;      // max_i Σ_d |dO_id|
  double ds_factor = 0;     // max_ij |dP_ij − delta_i| over j ≤ i
  double dp_max = 0;        // max_ij |dP_ij|
  double column_p = 0;      // max_j Σ_i P_ij (the weight of key j over all queries)
  double lse_max = 0, q_max = 0, k_max = 0, v_max = 0, dout_max = 0;
};

Reference reference(const Shape& s, const std::vector<float>& qkv, const std::vector<float>& dout) {
  const int c = s.c(), t = s.t, hd = s.hd;
  const double scale = 1.0 / std::sqrt(double(hd));
  Reference r;
  r.out.assign(s.out_size(), 0.0);
  r.lse.assign(s.rows(), 0.0);
  r.dqkv.assign(s.qkv_size(), 0.0);
  for (float x : dout) r.dout_max = std::max(r.dout_max, double(std::fabs(x)));
  for (int bb = 0; bb < s.b; ++bb)
    for (int h = 0; h < s.nh; ++h) {
      auto at = [&](int row, int part, int d) { return (size_t(bb) * t + row) * 3 * c + part * c + h * hd + d; };
      auto o_at = [&](int row, int d) { return (size_t(bb) * t + row) * c + h * hd + d; };
      std::vector<double> p(size_t(t) * t, 0.0), ds(size_t(t) * t, 0.0);  // [T,T]
      for (int d = 0; d < hd; ++d)
        for (int i = 0; i < t; ++i) {
          r.q_max = std::max(r.q_max, double(std::fabs(qkv[at(i, 0, d)])));
          r.k_max = std::max(r.k_max, double(std::fabs(qkv[at(i, 1, d)])));
          r.v_max = std::max(r.v_max, double(std::fabs(qkv[at(i, 2, d)])));
        }
      for (int i = 0; i < t; ++i) {
        double mx = -INFINITY;
        std::vector<double> sc(i + 1);
        for (int j = 0; j <= i; ++j) {
          double dot = 0, abs_dot = 0;
          for (int d = 0; d < hd; ++d) {
            dot += double(qkv[at(i, 0, d)]) * qkv[at(j, 1, d)];
            abs_dot += std::fabs(double(qkv[at(i, 0, d)]) * qkv[at(j, 1, d)]);
          }
          sc[j] = dot * scale;
          r.score_terms = std::max(r.score_terms, abs_dot * scale);
          mx = std::max(mx, sc[j]);
        }
        double z = 0;
        for (int j = 0; j <= i; ++j) z += std::exp(sc[j] - mx);
        const double lse = mx + std::log(z);
        r.lse[(size_t(bb) * s.nh + h) * t + i] = lse;
        r.lse_max = std::max(r.lse_max, std::fabs(lse));
        for (int j = 0; j <= i; ++j) p[size_t(i) * t + j] = std::exp(sc[j] - lse);
        for (int d = 0; d < hd; ++d) {
          double acc = 0;
          for (int j = 0; j <= i; ++j) acc += p[size_t(i) * t + j] * qkv[at(j, 2, d)];
          r.out[o_at(i, d)] = acc;
        }
      }
      // backward: delta_i = dO_i·O_i, dP = dO vᵀ, dS = P ∘ (dP − delta)
      for (int i = 0; i < t; ++i) {
        double delta = 0, abs_delta = 0, row = 0;
        for (int d = 0; d < hd; ++d) {
          delta += double(dout[o_at(i, d)]) * r.out[o_at(i, d)];
          abs_delta += std::fabs(dout[o_at(i, d)] * r.out[o_at(i, d)]);
          row += std::fabs(dout[o_at(i, d)]);
        }
        r.delta_terms = std::max(r.delta_terms, abs_delta);
        r.dout_row = std::max(r.dout_row, row);
        for (int j = 0; j <= i; ++j) {
          double dp = 0, abs_dp = 0;
          for (int d = 0; d < hd; ++d) {
            dp += double(dout[o_at(i, d)]) * qkv[at(j, 2, d)];
            abs_dp += std::fabs(double(dout[o_at(i, d)]) * qkv[at(j, 2, d)]);
          }
          r.dp_terms = std::max(r.dp_terms, abs_dp);
          r.dp_max = std::max(r.dp_max, std::fabs(dp));
          r.ds_factor = std::max(r.ds_factor, std::fabs(dp - delta));
          ds[size_t(i) * t + j] = p[size_t(i) * t + j] * (dp - delta);
        }
      }
      for (int j = 0; j < t; ++j) {
        double col = 0;
        for (int i = j; i < t; ++i) col += p[size_t(i) * t + j];
        r.column_p = std::max(r.column_p, col);
      }
      // dQ = dS k / √HD, dK = dSᵀ q / √HD, dV = Pᵀ dO
      for (int i = 0; i < t; ++i)
        for (int d = 0; d < hd; ++d) {
          double dq = 0, dk = 0, dv = 0;
          for (int j = 0; j < t; ++j) {
            dq += ds[size_t(i) * t + j] * qkv[at(j, 1, d)];
            dk += ds[size_t(j) * t + i] * qkv[at(j, 0, d)];
            dv += p[size_t(j) * t + i] * dout[o_at(j, d)];
          }
          r.dqkv[at(i, 0, d)] = dq * scale;
          r.dqkv[at(i, 1, d)] = dk * scale;
          r.dqkv[at(i, 2, d)] = dv;
        }
    }
  return r;
}

// Absolute bounds on |computed − exact| for each output, from the data of `r`.
struct Bounds {
  double out, lse, dq, dk, dv;
};

Bounds bounds(const Shape& s, const Reference& r) {
  const double t = s.t, hd = s.hd, scale = 1.0 / std::sqrt(hd);
  // Scores: a length-HD dot product and the scale (sgemm's alpha), absolute.
  const double ds_score = gamma_n(hd + 2, u) * r.score_terms;
  // Forward probabilities, relative: s_ij and the row max each off by ds_score, the
  // subtraction, exp (8u), the length-T sum, the reciprocal and the product.
  const double ep_forward = 2 * ds_score + gamma_n(t + 11, u);
  // out_i = Σ_j P_ij v_j: P's relative error plus the length-T sum, times Σ_j P_ij |v_j| ≤ max|v|.
  const double out = (ep_forward + gamma_n(t, u)) * (1 + ep_forward) * r.v_max;
  // lse = max + log Σ exp(s − max): the max's error cancels, the scores' does not (ds_score);
  // the subtraction and exp (9u) and the sum (γ_T) relative to Σ, hence absolute in log;
  // log (8u) and the final addition (u) relative to |lse| + log T.
  const double lse = ds_score + gamma_n(t + 9, u) + 9 * u * (r.lse_max + std::log(t));
  // Backward probabilities, relative: exp(s − lse) from a score off by ds_score and an lse off
  // by `lse`, the subtraction and exp (9u); or the forward's (the naive path reads those).
  const double ep = std::max(ep_forward, ds_score + lse + gamma_n(9, u));
  const double e_dp = gamma_n(hd, u) * r.dp_terms;  // dP_ij = dO_i·v_j
  // delta_i: flash's Σ_d dO·O over a computed O (off by `out` per element), naive's Σ_j dP·P
  // over computed dP and P; the larger of the two.
  const double e_delta = std::max(gamma_n(hd, u) * r.delta_terms + r.dout_row * out,
                                  (ep + gamma_n(t, u)) * r.dp_max + e_dp);
  // dS_ij = P_ij (dP_ij − delta_i): per element and per row (Σ_j P_ij = 1) at most
  const double e_ds = ((ep + u) * r.ds_factor + e_dp + e_delta) * (1 + ep);
  // Each gradient is a length-T sum (flash's dK and dV add T/64 + 1 block partials more) with
  // the scale: Σ_j |dS_ij| ≤ ds_factor, over a column Σ_i P_ij ≤ column_p.
  const double g_sum = gamma_n(2 * t + 2, u);
  return {out,
          lse,
          scale * r.k_max * (e_ds + g_sum * r.ds_factor * (1 + ep)),
          scale * r.q_max * r.column_p * (e_ds + g_sum * r.ds_factor * (1 + ep)),
          (ep + g_sum) * (1 + ep) * r.column_p * r.dout_max};
}

// max |a − b| over the part (0 = q, 1 = k, 2 = v) of a [B,T,3C] tensor.
template <typename A, typename B>
double part_error(const Shape& s, const std::vector<A>& a, const std::vector<B>& b, int part) {
  double e = 0;
  for (size_t row = 0; row < size_t(s.b) * s.t; ++row)
    for (int k = 0; k < s.c(); ++k) {
      const size_t i = row * 3 * s.c() + part * s.c() + k;
      e = std::max(e, std::fabs(double(a[i]) - double(b[i])));
    }
  return e;
}

template <typename A, typename B>
double max_error(const std::vector<A>& a, const std::vector<B>& b) {
  double e = 0;
  for (size_t i = 0; i < a.size(); ++i) e = std::max(e, std::fabs(double(a[i]) - double(b[i])));
  return e;
}

struct FlashRun {
  std::vector<float> out, lse, dqkv;
};

FlashRun run_flash(Ops& ops, const Shape& s, const std::vector<float>& qkv, const std::vector<float>& dout) {
  FlashRun f{std::vector<float>(s.out_size(), NAN), std::vector<float>(s.rows(), NAN),
             std::vector<float>(s.qkv_size(), NAN)};  // NaN: every element must be written
  std::vector<float> delta(s.rows(), NAN);
  ops.flash_attention_forward(f.out.data(), f.lse.data(), qkv.data(), s.b, s.t, s.nh, s.hd);
  ops.flash_attention_backward_input(f.dqkv.data(), delta.data(), dout.data(), qkv.data(), f.out.data(),
                                     f.lse.data(), s.b, s.t, s.nh, s.hd);
  return f;
}

FlashRun run_naive(Ops& ops, const Shape& s, const std::vector<float>& qkv, const std::vector<float>& dout) {
  FlashRun f{std::vector<float>(s.out_size(), NAN), {}, std::vector<float>(s.qkv_size(), NAN)};
  std::vector<float> probs(size_t(s.b) * s.nh * s.t * s.t);
  ops.attention_forward(f.out.data(), probs.data(), qkv.data(), s.b, s.t, s.nh, s.hd);
  ops.attention_backward_input(f.dqkv.data(), dout.data(), qkv.data(), probs.data(), s.b, s.t, s.nh, s.hd);
  return f;
}

class CpuFlashAttention : public ::testing::TestWithParam<Shape> {
 protected:
  std::unique_ptr<Ops> ops = make_cpu_ops();
};

TEST_P(CpuFlashAttention, MatchesTheDoubleReferenceAndTheNaivePath) {
  const Shape s = GetParam();
  // q, k in [-1.5, 1.5]: scores up to 2.25·√HD, softmaxes far from uniform.
  auto qkv = random_floats(s.qkv_size(), 40 + s.t, -1.5f, 1.5f);
  auto dout = random_floats(s.out_size(), 41 + s.t);
  const Reference ref = reference(s, qkv, dout);
  const Bounds bound = bounds(s, ref);
  const FlashRun flash = run_flash(*ops, s, qkv, dout), naive = run_naive(*ops, s, qkv, dout);

  const double err_out = max_error(flash.out, ref.out), err_lse = max_error(flash.lse, ref.lse);
  const double err[3] = {part_error(s, flash.dqkv, ref.dqkv, 0), part_error(s, flash.dqkv, ref.dqkv, 1),
                         part_error(s, flash.dqkv, ref.dqkv, 2)};
  const double bound_part[3] = {bound.dq, bound.dk, bound.dv};
  std::printf("T=%d error/bound: out %.3g lse %.3g dq %.3g dk %.3g dv %.3g\n", s.t, err_out / bound.out,
              err_lse / bound.lse, err[0] / bound.dq, err[1] / bound.dk, err[2] / bound.dv);
  EXPECT_LE(err_out, bound.out);
  EXPECT_LE(err_lse, bound.lse);
  EXPECT_LE(max_error(flash.out, naive.out), 2 * bound.out);
  const char* part_name[3] = {"dq", "dk", "dv"};
  for (int part = 0; part < 3; ++part) {
    EXPECT_LE(err[part], bound_part[part]) << part_name[part];
    EXPECT_LE(part_error(s, flash.dqkv, naive.dqkv, part), 2 * bound_part[part]) << part_name[part];
  }
}

// T = 1: one key per query, lse = the score itself; T = 5 one row block; T = 33 odd; T = 70
// two row blocks (dK, dV accumulate over them); HD = 3 and 5 are not multiples of a vector.
INSTANTIATE_TEST_SUITE_P(Shapes, CpuFlashAttention,
                         ::testing::Values(Shape{2, 1, 3, 4}, Shape{2, 5, 3, 4}, Shape{1, 33, 2, 5},
                                           Shape{2, 33, 3, 8}, Shape{1, 70, 2, 3}),
                         [](const auto& info) { return "T" + std::to_string(info.param.t) + "_HD" +
                                                       std::to_string(info.param.hd); });

// Float ops differenced in double with step 1e-2 (as test_cpu_ops_grad.cpp): rounding noise
// ~1e-6·|L|/h plus truncation ~h²·f''' keep the error near 1e-4 of the gradient's scale; a
// wrong term is off by O(1).
constexpr double kStep = 1e-2;
constexpr double kGradTolerance = 1e-3;

// T = 1: one key per query, so the softmax is 1 whatever q and k and, in real arithmetic,
// dS = dP − delta = 0 (dP = dO·v, delta = dO·o, o = v): only v gets a gradient. In fp32 dP
// (a GEMM) and delta (a dot) sum their HD products in orders the kernels choose (OpenBLAS
// picks its kernel by CPU), each within γ_HD·Σ_d|products| of its exact sum, so
// |dS| ≤ Σ_d|dO_d||v_d − o_d| + γ_HD·(Σ_d|dO_d v_d| + Σ_d|dO_d o_d|) (the subtraction of
// two sums that close is exact); dq_d = dS·k_d/√HD and dk_d = dS·q_d/√HD round at most three
// times more. Returns the largest |dq_d| or |dk_d| over its bound (≤ 1 holds). A q or k
// gradient of the real size (delta dropped: dS = dP) is about 1/γ_HD ≈ 4e6 times the bound.
double t1_qk_gradient_over_bound(const Shape& s, const std::vector<float>& qkv, const std::vector<float>& dout,
                                 const FlashRun& run) {
  const double scale = 1.0 / std::sqrt(double(s.hd)), gamma = gamma_n(s.hd, kFp32Unit);
  double worst = 0;
  for (int b = 0; b < s.b; ++b)  // T = 1: row b
    for (int h = 0; h < s.nh; ++h) {
      const size_t qkv_row = size_t(b) * 3 * s.c() + size_t(h) * s.hd, out_row = (size_t(b) * s.nh + h) * s.hd;
      double ds_bound = 0;
      for (int d = 0; d < s.hd; ++d) {
        const double g = std::fabs(dout[out_row + d]), v = qkv[qkv_row + 2 * s.c() + d], o = run.out[out_row + d];
        ds_bound += g * std::fabs(v - o) + gamma * (g * std::fabs(v) + g * std::fabs(o));
      }
      for (int part = 0; part < 2; ++part)  // dq (from k), dk (from q)
        for (int d = 0; d < s.hd; ++d) {
          const double got = std::fabs(run.dqkv[qkv_row + part * s.c() + d]);
          const double bound = ds_bound * std::fabs(qkv[qkv_row + (1 - part) * s.c() + d]) * scale *
                               (1 + gamma_n(3, kFp32Unit));
          worst = std::max(worst, got == 0 ? 0.0 : bound == 0 ? INFINITY : got / bound);
        }
    }
  return worst;
}

TEST(CpuFlashAttentionGrad, MatchesFiniteDifferences) {
  auto ops = make_cpu_ops();
  for (const Shape s : {Shape{2, 1, 2, 4}, Shape{2, 5, 3, 4}, Shape{1, 33, 2, 4}}) {
    auto qkv = random_floats(s.qkv_size(), 50 + s.t, -1.5f, 1.5f);
    auto r = random_floats(s.out_size(), 51 + s.t);
    auto loss = [&] {  // L = Σ r ∘ out, so dL/dout = r
      std::vector<float> out(s.out_size()), lse(s.rows());
      ops->flash_attention_forward(out.data(), lse.data(), qkv.data(), s.b, s.t, s.nh, s.hd);
      return weighted_sum(out, r);
    };
    const FlashRun run = run_flash(*ops, s, qkv, r);
    const std::vector<float>& dqkv = run.dqkv;
    const auto fd = finite_difference(qkv, loss, kStep);
    if (s.t == 1) {  // only v gets a gradient
      const double over = t1_qk_gradient_over_bound(s, qkv, r, run);
      std::printf("T=1: dq, dk at most %.3g of their rounding bound\n", over);
      EXPECT_LE(over, 1.0);
    }
    EXPECT_LT(normalized_error(dqkv, fd), kGradTolerance) << "T=" << s.t;
  }
}

TEST(CpuFlashAttentionGrad, BitIdenticalRunToRunAndOverwritesDqkv) {
  // 4 pairs over 130 rows takes the parallel-over-pairs path with three row blocks.
  auto ops = make_cpu_ops();
  const Shape s{4, 130, 4, 16};
  auto qkv = random_floats(s.qkv_size(), 60);
  auto dout = random_floats(s.out_size(), 61);
  const FlashRun first = run_flash(*ops, s, qkv, dout), second = run_flash(*ops, s, qkv, dout);
  EXPECT_TRUE(first.out == second.out && first.lse == second.lse && first.dqkv == second.dqkv);
  for (float g : first.dqkv) ASSERT_FALSE(std::isnan(g)) << "dqkv not fully written";
}

TEST(CpuFlashAttentionInput, Bf16ViewsAndBadShapesAreOneLine) {
  auto ops = make_cpu_ops();
  std::vector<bfloat16> h(3 * 8);
  std::vector<float> f(3 * 8), lse(2), delta(2);
  auto error_of = [](auto call) -> std::string {
    try {
      call();
    } catch (const std::exception& e) {  // Error (bad input) or logic_error (a shape: a caller's bug)
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(error_of([&] { ops->flash_attention_forward(h.data(), lse.data(), h.data(), 1, 2, 1, 4); }),
            "backend 'cpu' has no bf16 flash_attention_forward (training.precision: bf16 needs device: cuda)");
  EXPECT_EQ(error_of([&] {
              ops->flash_attention_backward_input(f.data(), delta.data(), h.data(), f.data(), f.data(), lse.data(), 1,
                                                  2, 1, 4);
            }),
            "backend 'cpu' has no bf16 flash_attention_backward_input (training.precision: bf16 needs device: cuda)");
  const std::string shape = error_of([&] { ops->flash_attention_forward(f.data(), lse.data(), f.data(), 1, 0, 1, 4); });
  EXPECT_NE(shape.find("flash attention shape b=1 t=0 nh=1 hd=4"), std::string::npos) << shape;
  EXPECT_EQ(shape.find('\n'), std::string::npos) << shape;
}

}  // namespace
}  // namespace pptrain
