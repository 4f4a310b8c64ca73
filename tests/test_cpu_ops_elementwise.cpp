// cpu backend, elementwise ops: GELU forward and backward against the tanh formula and its
// derivative in double (serial and parallel sizes, a partial last vector, the tails, NaN),
// and add, accumulate, scale and the bias broadcast exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/ops.h"
#include "support/cpu_ops_util.h"

namespace pptrain {
namespace {

using testing::random_floats;

// A float op against its double reference: a dozen roundings of u = 2^-24 and exp's 2 ulp,
// and exp(−2|u|) moved by |2u| times u's relative rounding (3u), at most 25 · 3u = 4.5e-6 on
// [−6, 6] (|2u| <= 25 there), relative per element.
constexpr double kGeluTolerance = 1e-5;
// gelu(−20) and gelu'(−20) are about 20 · e^−604 exactly, far below float's smallest
// subnormal (1.4e-45): the float results are ±0; the bound only admits that.
constexpr double kVanishing = 1e-30;

class CpuElementwiseTest : public ::testing::Test {
 protected:
  std::unique_ptr<Ops> ops = make_cpu_ops();
};

// sigmoid(2u) = 0.5 (1 + tanh u), u = √(2/π)(x + 0.044715 x³), in double.
double ref_sigmoid(double x) { return 0.5 * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
double ref_gelu(double x) { return x * ref_sigmoid(x); }
// gelu'(x) from the tanh form: 0.5 (1 + tanh u) + 0.5 x sech²(u) u'.
double ref_gelu_derivative(double x) {
  const double c = std::sqrt(2.0 / M_PI), u = c * (x + 0.044715 * x * x * x), t = std::tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3 * 0.044715 * x * x);
}

// Relative per element, with a floor of 1e-3 where gelu crosses zero (x = 0: there the error
// is absolute, at most the bound times 1e-3).
TEST_F(CpuElementwiseTest, GeluForwardMatchesTanhFormula) {
  for (size_t n : {size_t(91), size_t(100003)}) {  // serial and parallel paths
    auto x = random_floats(n, 8, -6.0f, 6.0f);
    std::vector<float> y(n);
    ops->gelu_forward(y.data(), x.data(), n);
    double worst = 0;
    for (size_t i = 0; i < n; ++i) {
      double ref = ref_gelu(x[i]);
      worst = std::max(worst, std::fabs(y[i] - ref) / std::max(std::fabs(ref), 1e-3));
    }
    EXPECT_LT(worst, kGeluTolerance) << n;
  }
  // Tails: exact limits, no NaN.
  std::vector<float> x = {-100.0f, -20.0f, 0.0f, 20.0f, 100.0f}, y(5);
  ops->gelu_forward(y.data(), x.data(), 5);
  EXPECT_EQ(y[0], -0.0f);
  EXPECT_NEAR(y[1], 0.0f, kVanishing);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], 20.0f);
  EXPECT_EQ(y[4], 100.0f);
}

// The forward's bound, relative per element; but where gelu' = s + x·2s(1 − s)·u' crosses
// zero (x ≈ −0.75) its two terms cancel, and the error is relative to the first, s =
// sigmoid(2u) (0.23 there). The upstream gradient dy multiplies in with one more rounding, and
// dx may alias dy (the fused dgelu does).
TEST_F(CpuElementwiseTest, GeluBackwardMatchesTheDerivative) {
  for (size_t n : {size_t(91), size_t(100003)}) {  // serial and parallel paths, a partial last vector
    auto x = random_floats(n, 8, -6.0f, 6.0f), dy = random_floats(n, 9, 0.5f, 2.0f);
    std::vector<float> dx(n), in_place = dy;
    ops->gelu_backward(dx.data(), dy.data(), x.data(), n);
    ops->gelu_backward(in_place.data(), in_place.data(), x.data(), n);
    double worst = 0;
    for (size_t i = 0; i < n; ++i) {
      const double ref = double(dy[i]) * ref_gelu_derivative(x[i]);
      worst = std::max(worst, std::fabs(dx[i] - ref) / std::max(std::fabs(ref), dy[i] * ref_sigmoid(x[i])));
    }
    EXPECT_LT(worst, kGeluTolerance) << n;
    EXPECT_EQ(std::memcmp(dx.data(), in_place.data(), n * sizeof(float)), 0) << n;
  }
  // Tails: gelu' -> 0 below, 1 above, 1/2 at 0; NaN stays NaN, in both passes.
  std::vector<float> x = {-100.0f, -20.0f, 0.0f, -0.0f, 20.0f, 100.0f, NAN}, ones(x.size(), 1.0f), y(x.size()),
                     dx(x.size());
  ops->gelu_backward(dx.data(), ones.data(), x.data(), x.size());
  ops->gelu_forward(y.data(), x.data(), x.size());
  EXPECT_NEAR(dx[0], 0.0f, kVanishing);
  EXPECT_NEAR(dx[1], 0.0f, kVanishing);
  EXPECT_EQ(dx[2], 0.5f);
  EXPECT_EQ(dx[3], 0.5f);
  EXPECT_EQ(dx[4], 1.0f);
  EXPECT_EQ(dx[5], 1.0f);
  EXPECT_TRUE(std::isnan(dx[6]));
  EXPECT_TRUE(std::isnan(y[6]));
}

TEST_F(CpuElementwiseTest, AddAccumulateScaleBias) {
  for (size_t n : {size_t(37), size_t(70001)}) {
    auto a = random_floats(n, 9), b = random_floats(n, 10);
    std::vector<float> y(n);
    ops->add(y.data(), a.data(), b.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(y[i], a[i] + b[i]);
    auto a2 = a;
    ops->add(a2.data(), a2.data(), b.data(), n);  // y aliases a
    EXPECT_EQ(a2, y);
    ops->accumulate(a2.data(), b.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(a2[i], y[i] + b[i]);
    ops->scale(a2.data(), -0.5f, n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(a2[i], (y[i] + b[i]) * -0.5f);
  }
  const int n = 7, c = 13;
  auto y = random_floats(n * c, 11), bias = random_floats(c, 12);
  auto expect = y;
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < c; ++i) expect[r * c + i] += bias[i];
  ops->add_bias(y.data(), bias.data(), n, c);
  EXPECT_EQ(y, expect);
}

}  // namespace
}  // namespace pptrain
