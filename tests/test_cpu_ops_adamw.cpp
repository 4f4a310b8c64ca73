// cpu backend, AdamW (ops.h's adamw): the first step by hand, several steps with a clip
// factor against a double-precision reference, the clip factor equal to scaling the
// gradient first bit for bit, the out-of-place step (post-validation's backup) equal to the
// in-place one and leaving its inputs, and a working copy refused with one line.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/ops.h"
#include "support/cpu_ops_util.h"
#include "support/error_of.h"

namespace pptrain {
namespace {

using testing::error_of;
using testing::normalized_error;
using testing::random_floats;

// Max error over max |reference| of several steps (derived in AdamwStepsMatchReference).
constexpr double kAdamwTolerance = 1e-5;

class CpuAdamwTest : public ::testing::Test {
 protected:
  std::unique_ptr<Ops> ops = make_cpu_ops();
};

TEST_F(CpuAdamwTest, AdamwFirstStepByHand) {
  // t=1: m̂ = g, v̂ = g², so the step is lr (g / (|g| + eps) + wd p).
  // p=1, g=0.5, lr=0.1, wd=0.01: 1 - 0.1 (0.5 / 0.5 + 0.01) = 0.899.
  float p = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;
  ops->adamw(&p, &m, &v, nullptr, &p, &g, &m, &v, 1, 1.0f, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
  EXPECT_NEAR(p, 0.899, 1e-6);
  EXPECT_NEAR(m, 0.05, 0.05 * 1e-6);
  // 1 - b2 is 1 - 0.999f = 0.00099998713 in float.
  const double v_ref = (1.0 - double(0.999f)) * 0.25;
  EXPECT_NEAR(v, v_ref, v_ref * 1e-6);
}

TEST_F(CpuAdamwTest, AdamwStepsMatchReference) {
  for (size_t n : {size_t(19), size_t(50000)}) {
    auto p = random_floats(n, 20), m = random_floats(n, 21, -0.1f, 0.1f),
         v = random_floats(n, 22, 0.0f, 0.01f);
    auto rp = testing::to_double(p), rm = testing::to_double(m), rv = testing::to_double(v);
    const double lr = 3e-3, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
    // A clip factor ≠ 1 on every step but the first (1 is the unclipped step). Bound: max
    // error over max |reference|; a step is ~12 fp32 roundings per element (the grad_scale
    // multiply one more), each ≤ u = 2^-24 of its operands' size, and m, v carry theirs over
    // the 3 steps: ≲ 3 · 13 · u ≈ 2.3e-6 < kAdamwTolerance. Ignoring grad_scale fails by
    // 5e-3 (p) to 0.8 (v).
    const float grad_scales[3] = {1.0f, 0.3f, 0.71f};
    for (int t = 1; t <= 3; ++t) {
      auto g = random_floats(n, 30 + t);
      const float s = grad_scales[t - 1];
      ops->adamw(p.data(), m.data(), v.data(), nullptr, p.data(), g.data(), m.data(), v.data(), n, s, float(lr),
                 float(b1), float(b2), float(eps), float(wd), t);
      for (size_t i = 0; i < n; ++i) {
        const double gs = double(g[i]) * s;  // exact in double
        rm[i] = b1 * rm[i] + (1 - b1) * gs;
        rv[i] = b2 * rv[i] + (1 - b2) * gs * gs;
        double mh = rm[i] / (1 - std::pow(b1, t)), vh = rv[i] / (1 - std::pow(b2, t));
        rp[i] -= lr * (mh / (std::sqrt(vh) + eps) + wd * rp[i]);
      }
    }
    EXPECT_LT(normalized_error(p, rp), kAdamwTolerance);
    EXPECT_LT(normalized_error(m, rm), kAdamwTolerance);
    EXPECT_LT(normalized_error(v, rv), kAdamwTolerance);
  }
}

TEST_F(CpuAdamwTest, AdamwGradScaleEqualsScalingTheGradientFirst) {
  // The clip factor folded into AdamW is the same one fp32 multiply scale() did in place,
  // so the fused step and scale-then-step agree bit for bit (and g is left unscaled).
  const size_t n = 50000;  // above kParallelMinElements: the threaded loop
  const float s = 0.37f;
  auto p = random_floats(n, 40), m = random_floats(n, 41, -0.1f, 0.1f), v = random_floats(n, 42, 0.0f, 0.01f);
  auto g = random_floats(n, 43);
  auto p2 = p, m2 = m, v2 = v, g2 = g;
  ops->adamw(p.data(), m.data(), v.data(), nullptr, p.data(), g.data(), m.data(), v.data(), n, s, 3e-3f, 0.9f, 0.95f,
             1e-8f, 0.1f, 2);
  ops->scale(g2.data(), s, n);
  ops->adamw(p2.data(), m2.data(), v2.data(), nullptr, p2.data(), g2.data(), m2.data(), v2.data(), n, 1.0f, 3e-3f,
             0.9f, 0.95f, 1e-8f, 0.1f, 2);
  EXPECT_EQ(p, p2);
  EXPECT_EQ(m, m2);
  EXPECT_EQ(v, v2);
  EXPECT_EQ(g, random_floats(n, 43)) << "adamw wrote the gradient";
}

TEST_F(CpuAdamwTest, AdamwOutOfPlaceEqualsInPlaceAndKeepsItsInputs) {
  // Post-validation's backup: the update written into other buffers leaves p, m, v (and g)
  // as they were, and the outputs are the in-place step's bits (element-wise arithmetic).
  const size_t n = 50000;  // above kParallelMinElements: the threaded loop
  const auto p = random_floats(n, 50), m = random_floats(n, 51, -0.1f, 0.1f), v = random_floats(n, 52, 0.0f, 0.01f);
  const auto g = random_floats(n, 53);
  auto ip = p, im = m, iv = v;
  ops->adamw(ip.data(), im.data(), iv.data(), nullptr, ip.data(), g.data(), im.data(), iv.data(), n, 0.37f, 3e-3f,
             0.9f, 0.95f, 1e-8f, 0.1f, 2);
  std::vector<float> op(n, NAN), om(n, NAN), ov(n, NAN);
  ops->adamw(op.data(), om.data(), ov.data(), nullptr, p.data(), g.data(), m.data(), v.data(), n, 0.37f, 3e-3f, 0.9f,
             0.95f, 1e-8f, 0.1f, 2);
  EXPECT_EQ(op, ip);
  EXPECT_EQ(om, im);
  EXPECT_EQ(ov, iv);
  EXPECT_NE(ip, p) << "the step changed nothing: the comparison above proves nothing";
  EXPECT_EQ(p, random_floats(n, 50)) << "out of place wrote p";
  EXPECT_EQ(m, random_floats(n, 51, -0.1f, 0.1f)) << "out of place wrote m";
  EXPECT_EQ(v, random_floats(n, 52, 0.0f, 0.01f)) << "out of place wrote v";
}

TEST_F(CpuAdamwTest, AdamwRejectsAWorkingCopy) {
  // The cpu backend has no bf16: a bf16 working copy is one line naming the op.
  float p = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f, copy = 0.0f;
  bfloat16 copy_bf16;
  EXPECT_EQ(error_of([&] {
              ops->adamw(&p, &m, &v, &copy_bf16, &p, &g, &m, &v, 1, 1.0f, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
            }),
            "backend 'cpu' has no bf16 adamw (training.precision: bf16 needs device: cuda)");
  EXPECT_EQ(error_of([&] {
              ops->adamw(&p, &m, &v, &copy, &p, &g, &m, &v, 1, 1.0f, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
            }),
            "adamw: p_working is the bf16 working copy or null, got an fp32 view");
}

}  // namespace
}  // namespace pptrain
