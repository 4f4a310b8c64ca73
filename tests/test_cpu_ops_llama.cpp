// cpu backend, the ops of the Llama family: RMSNorm, rotary embedding (RoPE), SwiGLU and
// grouped-query attention (naive and flash). Each forward against a naive double-precision
// version written from Hugging Face transformers' LlamaForCausalLM formulas, each dgrad and
// wgrad against central finite differences of L = Σ r ∘ y (so dL/dy = r), as
// test_cpu_ops_grad.cpp does for the GPT-2 ops.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/ops.h"
#include "support/cpu_ops_util.h"

namespace pptrain {
namespace {

using testing::finite_difference;
using testing::normalized_error;
using testing::random_floats;
using testing::weighted_sum;

// As test_cpu_ops_grad.cpp: float ops differenced in double with step 1e-2 keep the error
// near 1e-4 of the gradient's scale; a wrong term is off by O(1).
constexpr double kStep = 1e-2;
constexpr double kGradTolerance = 1e-3;
// A float forward against its double reference: a few dozen roundings (a length-C sum, exp)
// of u = 2^-24 each, relative to the tensor's scale.
constexpr double kForwardTolerance = 1e-5;

class CpuOpsLlamaTest : public ::testing::Test {
 protected:
  std::unique_ptr<Ops> ops = make_cpu_ops();
};

// ---- RMSNorm ----------------------------------------------------------------------------

struct RmsnormCase {
  int n = 7, c = 13;
  float eps = 1e-5f;
  std::vector<float> x = random_floats(size_t(n) * c, 1, -2.0f, 3.0f), g = random_floats(c, 2),
                     r = random_floats(size_t(n) * c, 3), residual = random_floats(size_t(n) * c, 4);
  std::vector<float> rstd = std::vector<float>(n);
  std::vector<float> forward(Ops& ops) {
    std::vector<float> y(size_t(n) * c);
    ops.rmsnorm_forward(y.data(), rstd.data(), x.data(), g.data(), n, c, eps);
    return y;
  }
};

TEST_F(CpuOpsLlamaTest, RmsnormForwardMatchesDoubleReference) {
  RmsnormCase rc;
  rc.eps = 0.25f;  // large enough that an eps outside the square root shows
  const auto y = rc.forward(*ops);
  std::vector<double> want(y.size());
  for (int row = 0; row < rc.n; ++row) {
    double sum_sq = 0;
    for (int i = 0; i < rc.c; ++i) sum_sq += double(rc.x[row * rc.c + i]) * rc.x[row * rc.c + i];
    const double rstd = 1.0 / std::sqrt(sum_sq / rc.c + rc.eps);
    EXPECT_NEAR(rc.rstd[row], rstd, 1e-6 * rstd);
    for (int i = 0; i < rc.c; ++i) want[row * rc.c + i] = rc.x[row * rc.c + i] * rstd * rc.g[i];
  }
  EXPECT_LT(normalized_error(y, want), kForwardTolerance);
}

TEST_F(CpuOpsLlamaTest, RmsnormGradients) {
  RmsnormCase rc;
  auto loss = [&] { return weighted_sum(rc.forward(*ops), rc.r); };
  loss();  // rstd of the unperturbed x
  std::vector<float> dx(rc.x.size(), NAN), dg(rc.c, 0.0f);
  ops->rmsnorm_backward_input(dx.data(), rc.r.data(), rc.x.data(), rc.rstd.data(), rc.g.data(), rc.n, rc.c, nullptr);
  ops->rmsnorm_backward_weight(dg.data(), rc.r.data(), rc.x.data(), rc.rstd.data(), rc.n, rc.c);
  EXPECT_LT(normalized_error(dx, finite_difference(rc.x, loss, kStep)), kGradTolerance);
  EXPECT_LT(normalized_error(dg, finite_difference(rc.g, loss, kStep)), kGradTolerance);
  // The residual joins in the same pass (dx may alias it), and the wgrad accumulates.
  std::vector<float> with_residual = rc.residual;
  ops->rmsnorm_backward_input(with_residual.data(), rc.r.data(), rc.x.data(), rc.rstd.data(), rc.g.data(), rc.n,
                              rc.c, with_residual.data());
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(with_residual[i], rc.residual[i] + dx[i], 1e-5);
  std::vector<float> dg_twice = dg;
  ops->rmsnorm_backward_weight(dg_twice.data(), rc.r.data(), rc.x.data(), rc.rstd.data(), rc.n, rc.c);
  for (int i = 0; i < rc.c; ++i) EXPECT_NEAR(dg_twice[i], 2 * dg[i], 1e-5);
}

// ---- rotary embedding -------------------------------------------------------------------

// Hugging Face's rotate-half RoPE on qkv[B,T,(NH + 2·NKV)·HD] in double: q and k heads turned,
// v untouched.
std::vector<double> rotary_reference(const std::vector<float>& qkv, int b, int t, int nh, int nkv, int hd,
                                     double theta, const RotaryFrequencies* scaled = nullptr) {
  std::vector<double> out(qkv.begin(), qkv.end());
  const int width = (nh + 2 * nkv) * hd, half = hd / 2;
  for (int row = 0; row < b * t; ++row)
    for (int head = 0; head < nh + nkv; ++head)
      for (int i = 0; i < half; ++i) {
        const double angle = (row % t) * (scaled ? double(scaled->inv_freq[i]) : std::pow(theta, -2.0 * i / hd));
        const size_t at = size_t(row) * width + size_t(head) * hd + i;
        const double x1 = qkv[at], x2 = qkv[at + half];
        out[at] = x1 * std::cos(angle) - x2 * std::sin(angle);
        out[at + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
      }
  return out;
}

TEST_F(CpuOpsLlamaTest, RotaryForwardMatchesDoubleReference) {
  const int b = 2, t = 9, nh = 4, nkv = 2, hd = 8;
  const float theta = 10000.0f;
  auto qkv = random_floats(size_t(b) * t * (nh + 2 * nkv) * hd, 5);
  const auto want = rotary_reference(qkv, b, t, nh, nkv, hd, theta);
  ops->rotary_forward(qkv.data(), b, t, nh, nkv, hd, rotary_frequencies(hd, theta));
  // The angles are rounded to fp32 as transformers computes them: |Δangle| <= pos · 2u.
  EXPECT_LT(normalized_error(qkv, want), 4e-6);
  for (size_t i = 0; i < qkv.size(); ++i) {  // the values are untouched bit for bit
    const size_t col = i % size_t((nh + 2 * nkv) * hd);
    if (col >= size_t((nh + nkv) * hd)) {
      ASSERT_EQ(double(qkv[i]), want[i]) << i;
    }
  }
}

TEST_F(CpuOpsLlamaTest, RotaryBackwardIsTheTransposeAndMatchesFiniteDifferences) {
  const int b = 2, t = 5, nh = 2, nkv = 1, hd = 6;
  const float theta = 500.0f;
  auto x = random_floats(size_t(b) * t * (nh + 2 * nkv) * hd, 6), r = random_floats(x.size(), 7);
  auto loss = [&] {
    std::vector<float> y = x;
    ops->rotary_forward(y.data(), b, t, nh, nkv, hd, rotary_frequencies(hd, theta));
    return weighted_sum(y, r);
  };
  std::vector<float> dx = r;
  ops->rotary_backward_input(dx.data(), b, t, nh, nkv, hd, rotary_frequencies(hd, theta));
  EXPECT_LT(normalized_error(dx, finite_difference(x, loss, kStep)), kGradTolerance);
  // Orthogonal: backward after forward gives the input back.
  std::vector<float> round_trip = x;
  ops->rotary_forward(round_trip.data(), b, t, nh, nkv, hd, rotary_frequencies(hd, theta));
  ops->rotary_backward_input(round_trip.data(), b, t, nh, nkv, hd, rotary_frequencies(hd, theta));
  EXPECT_LT(normalized_error(round_trip, x), 1e-6);
}

// The inverse frequencies of transformers 5.24's ROPE_INIT_FUNCTIONS (fp32 bit patterns
// printed by float.hex()), for Llama 3.1/3.2's scaling (head size 64, theta 500000, factor
// 32, original 8192: planes on each side of the band and none in it), a llama3 scaling
// whose band holds a plane (original 16: plane 0 interpolated), and linear.
TEST_F(CpuOpsLlamaTest, RotaryFrequenciesAreTransformers) {
  struct Case {
    int hd;
    double theta;
    RopeScaling scaling;
    std::vector<double> want;
  };
  const std::vector<Case> cases = {
      {64, 500000.0, {"llama3", 32.0, 1.0, 4.0, 8192},
       {0x1.0000000000000p+0, 0x1.53c38c0000000p-1, 0x1.c2ef780000000p-2, 0x1.2b3dc60000000p-2, 0x1.8d27600000000p-3,
        0x1.078d400000000p-3, 0x1.5dc95a0000000p-4, 0x1.d03cce0000000p-5, 0x1.3411900000000p-5, 0x1.98de920000000p-6,
        0x1.0f53860000000p-6, 0x1.681ada0000000p-7, 0x1.ddee9e0000000p-8, 0x1.3d28040000000p-8, 0x1.a4ee400000000p-9,
        0x1.524f360000000p-10, 0x1.c26c400000000p-12, 0x1.9731ee0000000p-14, 0x1.46831a0000000p-16,
        0x1.b159020000000p-17, 0x1.1f91f00000000p-17, 0x1.7da9e80000000p-18, 0x1.fa8b860000000p-19,
        0x1.5024d60000000p-19, 0x1.be21880000000p-20, 0x1.280d960000000p-20, 0x1.88ec200000000p-21,
        0x1.04be680000000p-21, 0x1.5a0f4e0000000p-22, 0x1.cb4a9a0000000p-23, 0x1.30c94e0000000p-23,
        0x1.9483600000000p-24}},
      {16, 10000.0, {"linear", 4.0},
       {0x1.0000000000000p-2, 0x1.43d1360000000p-4, 0x1.99999a0000000p-6, 0x1.030dc60000000p-7, 0x1.47ae140000000p-9,
        0x1.9e7c700000000p-11, 0x1.0624de0000000p-12, 0x1.4b96c00000000p-14}},
      {16, 10000.0, {"llama3", 8.0, 1.0, 4.0, 16},
       {0x1.26f0dc0000000p-1, 0x1.43d1360000000p-5, 0x1.99999a0000000p-7, 0x1.030dc60000000p-8, 0x1.47ae140000000p-10,
        0x1.9e7c700000000p-12, 0x1.0624de0000000p-13, 0x1.4b96c00000000p-15}},
  };
  for (const Case& c : cases) {
    const RotaryFrequencies f = rotary_frequencies(c.hd, c.theta, c.scaling);
    ASSERT_EQ(f.planes, c.hd / 2);
    // Within one ulp: glibc's powf and torch's pow may each round the power its own way, and
    // an fp32 ulp is at most 2^-23 = 1.19e-7 of the value (so 1.2e-7 relative).
    for (int i = 0; i < f.planes; ++i)
      EXPECT_NEAR(f.inv_freq[i], c.want[i], c.want[i] * 1.2e-7) << c.scaling.type << " plane " << i;
  }
}

TEST_F(CpuOpsLlamaTest, ScaledRotaryTurnsByTheScaledFrequencies) {
  const int b = 1, t = 40, nh = 2, nkv = 1, hd = 16;
  const RotaryFrequencies f = rotary_frequencies(hd, 10000.0, {"llama3", 8.0, 1.0, 4.0, 16});
  auto qkv = random_floats(size_t(b) * t * (nh + 2 * nkv) * hd, 8);
  const auto want = rotary_reference(qkv, b, t, nh, nkv, hd, 10000.0, &f);
  const auto unscaled = rotary_reference(qkv, b, t, nh, nkv, hd, 10000.0);
  ops->rotary_forward(qkv.data(), b, t, nh, nkv, hd, f);
  // The op rounds the angle pos · inv_freq to fp32: with inv_freq <= 0.58 (plane 0, the
  // largest) and pos <= 39 the angle is below 23 rad, so its rounding moves it by at most
  // 23 · 2^-24 = 1.4e-6 rad, and the rotated values by that times their size: 4e-6
  // normwise leaves room for the cosine's and sine's own rounding, as the unscaled test.
  EXPECT_LT(normalized_error(qkv, want), 4e-6);
  // Not a bound but a check that the scaling acts: turning by the unscaled frequencies
  // moves the slow planes by whole radians at these positions, an O(1) normwise difference,
  // far above 1e-2.
  EXPECT_GT(normalized_error(qkv, unscaled), 1e-2);
}

// ---- SwiGLU ---------------------------------------------------------------------------

TEST_F(CpuOpsLlamaTest, SwigluForwardAndGradients) {
  const size_t n = 301;
  auto gate = random_floats(n, 8, -6.0f, 6.0f), up = random_floats(n, 9, -2.0f, 2.0f), r = random_floats(n, 10);
  std::vector<float> y(n);
  ops->swiglu_forward(y.data(), gate.data(), up.data(), n);
  std::vector<double> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = gate[i] / (1.0 + std::exp(-double(gate[i]))) * up[i];
  EXPECT_LT(normalized_error(y, want), kForwardTolerance);

  auto loss = [&] {
    ops->swiglu_forward(y.data(), gate.data(), up.data(), n);
    return weighted_sum(y, r);
  };
  std::vector<float> dgate(n, NAN), dup(n, NAN);
  ops->swiglu_backward_input(dgate.data(), dup.data(), r.data(), gate.data(), up.data(), n);
  EXPECT_LT(normalized_error(dgate, finite_difference(gate, loss, kStep)), kGradTolerance);
  EXPECT_LT(normalized_error(dup, finite_difference(up, loss, kStep)), kGradTolerance);
}

// ---- grouped-query attention ------------------------------------------------------------

struct GqaCase {
  int b, t, nh, nkv, hd;
  bool flash;
  std::vector<float> qkv, r;
  GqaCase(int b_, int t_, int nh_, int nkv_, int hd_, bool flash_)
      : b(b_), t(t_), nh(nh_), nkv(nkv_), hd(hd_), flash(flash_),
        qkv(random_floats(size_t(b_) * t_ * (nh_ + 2 * nkv_) * hd_, 11, -1.5f, 1.5f)),
        r(random_floats(size_t(b_) * t_ * nh_ * hd_, 12)) {}
  size_t heads() const { return size_t(b) * nh; }
  std::vector<float> forward(Ops& ops, std::vector<float>& probs, std::vector<float>& lse) {
    std::vector<float> out(r.size());
    probs.assign(flash ? 0 : heads() * t * t, 0.0f);
    lse.assign(heads() * t, 0.0f);
    if (flash) ops.gqa_flash_attention_forward(out.data(), lse.data(), qkv.data(), b, t, nh, nkv, hd);
    else ops.gqa_attention_forward(out.data(), probs.data(), qkv.data(), b, t, nh, nkv, hd);
    return out;
  }
  double loss(Ops& ops) {
    std::vector<float> probs, lse;
    return weighted_sum(forward(ops, probs, lse), r);
  }
  std::vector<float> dqkv(Ops& ops) {
    std::vector<float> probs, lse, delta(heads() * t), d(qkv.size(), NAN);  // dqkv is overwritten
    const auto out = forward(ops, probs, lse);
    if (flash)
      ops.gqa_flash_attention_backward_input(d.data(), delta.data(), r.data(), qkv.data(), out.data(), lse.data(), b,
                                             t, nh, nkv, hd);
    else
      ops.gqa_attention_backward_input(d.data(), r.data(), qkv.data(), probs.data(), b, t, nh, nkv, hd);
    return d;
  }
  // Hugging Face's eager attention with repeat_kv, in double: query head h reads key/value
  // head h / (NH/NKV).
  std::vector<double> reference() const {
    const int width = (nh + 2 * nkv) * hd, group = nh / nkv;
    std::vector<double> out(r.size());
    for (int batch = 0; batch < b; ++batch)
      for (int h = 0; h < nh; ++h) {
        const int kv = h / group;
        auto at = [&](int row, int col) { return double(qkv[(size_t(batch) * t + row) * width + col]); };
        for (int i = 0; i < t; ++i) {
          std::vector<double> p(i + 1);
          double max_score = -INFINITY, sum = 0;
          for (int j = 0; j <= i; ++j) {
            double s = 0;
            for (int d = 0; d < hd; ++d) s += at(i, h * hd + d) * at(j, (nh + kv) * hd + d);
            p[j] = s / std::sqrt(double(hd));
            max_score = std::max(max_score, p[j]);
          }
          for (double& v : p) sum += (v = std::exp(v - max_score));
          for (int d = 0; d < hd; ++d) {
            double o = 0;
            for (int j = 0; j <= i; ++j) o += p[j] / sum * at(j, (nh + nkv + kv) * hd + d);
            out[(size_t(batch) * t + i) * nh * hd + h * hd + d] = o;
          }
        }
      }
    return out;
  }
};

class GqaTest : public CpuOpsLlamaTest, public ::testing::WithParamInterface<std::tuple<int, bool>> {};

TEST_P(GqaTest, ForwardMatchesRepeatKvReferenceAndGradientsMatchFiniteDifferences) {
  const auto [nkv, flash] = GetParam();
  GqaCase gc(2, 6, 4, nkv, 4, flash);
  std::vector<float> probs, lse;
  EXPECT_LT(normalized_error(gc.forward(*ops, probs, lse), gc.reference()), kForwardTolerance);
  const auto dqkv = gc.dqkv(*ops);
  EXPECT_LT(normalized_error(dqkv, finite_difference(gc.qkv, [&] { return gc.loss(*ops); }, kStep)),
            kGradTolerance);
}

INSTANTIATE_TEST_SUITE_P(KeyValueHeads, GqaTest,
                         ::testing::Combine(::testing::Values(1, 2, 4), ::testing::Bool()),
                         [](const auto& info) {
                           return "nkv" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_flash" : "_naive");
                         });

TEST_F(CpuOpsLlamaTest, GqaAcrossRowBlocksAgreesBetweenNaiveAndFlash) {
  // T = 130 spans three 64-row blocks, two query heads per key/value head.
  GqaCase naive(1, 130, 4, 2, 8, false), flash(1, 130, 4, 2, 8, true);
  std::vector<float> probs, lse;
  EXPECT_LT(normalized_error(flash.forward(*ops, probs, lse), naive.forward(*ops, probs, lse)), 1e-5);
  EXPECT_LT(normalized_error(flash.dqkv(*ops), naive.dqkv(*ops)), 1e-5);
}

TEST_F(CpuOpsLlamaTest, GqaWithAsManyKeyValueHeadsIsMultiHeadAttentionBitForBit) {
  for (const bool flash : {false, true}) {
    GqaCase gc(2, 7, 3, 3, 4, flash);
    std::vector<float> probs, lse, delta(gc.heads() * gc.t), out(gc.r.size()), d(gc.qkv.size());
    const auto want_d = gc.dqkv(*ops);
    const auto want_out = gc.forward(*ops, probs, lse);
    if (flash) {
      ops->flash_attention_forward(out.data(), lse.data(), gc.qkv.data(), gc.b, gc.t, gc.nh, gc.hd);
      ops->flash_attention_backward_input(d.data(), delta.data(), gc.r.data(), gc.qkv.data(), out.data(), lse.data(),
                                          gc.b, gc.t, gc.nh, gc.hd);
    } else {
      ops->attention_forward(out.data(), probs.data(), gc.qkv.data(), gc.b, gc.t, gc.nh, gc.hd);
      ops->attention_backward_input(d.data(), gc.r.data(), gc.qkv.data(), probs.data(), gc.b, gc.t, gc.nh, gc.hd);
    }
    EXPECT_EQ(out, want_out);
    EXPECT_EQ(d, want_d);
  }
}

TEST_F(CpuOpsLlamaTest, BadShapesFailWithOneLine) {
  std::vector<float> x(64);
  auto message = [](auto call) -> std::string {
    try {
      call();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "no error";
  };
  RotaryFrequencies three;  // as for a head size of 3
  three.planes = 1;
  const std::string odd = message([&] { ops->rotary_forward(x.data(), 1, 2, 1, 1, 3, three); });
  EXPECT_NE(odd.find("hd even"), std::string::npos) << odd;
  std::vector<float> lse(8);
  const std::string group = message([&] { ops->gqa_flash_attention_forward(x.data(), lse.data(), x.data(), 1, 2, 3, 2, 2); });
  EXPECT_NE(group.find("nh=3 hd=2 nkv=2"), std::string::npos) << group;
  EXPECT_EQ(group.find('\n'), std::string::npos) << group;
}

}  // namespace
}  // namespace pptrain
