// Optimizer kernels under the SIMT emulator vs. the cpu backend: AdamW over several steps
// (with and without the bf16 weight copy and the clip factor, aligned and misaligned arrays,
// in place and out of place: the out-of-place run alternates between two sets of buffers as
// post-validation does, leaves its inputs unwritten and gives the in-place bits) and the
// deterministic sum of squares (one and many partial blocks, accumulation), both fiber
// orders.
#include "support/kernel_test.h"

#include <gtest/gtest.h>

#include "adamw.cuh"
#include "backend/ops.h"
#include "sum_squares.cuh"

using namespace pptrain;
using namespace pptrain::kernels;
using namespace pptrain::kernels::testing;

namespace {

using Outputs = std::vector<std::vector<float>>;

constexpr float kLr = 1e-2f, kB1 = 0.9f, kB2 = 0.95f, kEps = 1e-8f, kWd = 0.1f;

// The kernel over `grads.size()` steps from p, m, v: in place, or out of place, each step
// reading one set of buffers and writing the other (the inputs checked unwritten). Returns
// the final p, m, v and bf16 copy.
Outputs kernel_adamw(const LaunchContext& ctx, const std::vector<float>& p, const std::vector<float>& m,
                     const std::vector<float>& v, const std::vector<std::vector<float>>& grads, size_t offset,
                     bool with_copy, bool in_place, float grad_scale) {
  const size_t n = p.size();
  struct State {
    Guarded<float> p, m, v;
  };
  const std::vector<float> poison(n, NAN);  // out of place: what the kernel must overwrite
  State sets[2] = {{Guarded<float>(p, offset), Guarded<float>(m, offset), Guarded<float>(v, offset)},
                   {Guarded<float>(poison, offset), Guarded<float>(poison, offset), Guarded<float>(poison, offset)}};
  Guarded<bf16> copy{std::vector<bf16>(n), offset};
  int current = 0;
  for (int t = 1; t <= int(grads.size()); ++t) {
    State& in = sets[current];
    State& out = sets[in_place ? current : 1 - current];
    const Outputs before{in.p.floats(), in.m.floats(), in.v.floats()};
    Guarded<float> gg(grads[t - 1], offset);
    launch_adamw(ctx, out.p.data(), out.m.data(), out.v.data(), with_copy ? copy.data() : nullptr, in.p.data(),
                 gg.data(), in.m.data(), in.v.data(), n, grad_scale, kLr, kB1, kB2, kEps, kWd, t);
    EXPECT_EQ(checked(gg, "g"), grads[t - 1]) << "the gradient is read, never scaled in place";
    if (!in_place) {
      EXPECT_TRUE(bitwise_equal(Outputs{in.p.floats(), in.m.floats(), in.v.floats()}, before))
          << "out of place wrote its inputs at step " << t;
      current = 1 - current;
    }
  }
  State& last = sets[current];
  return Outputs{checked(last.p, "p"), checked(last.m, "m"), checked(last.v, "v"), checked(copy, "bf16 copy")};
}

void check_adamw(size_t n, size_t offset, bool with_copy, float grad_scale) {
  SCOPED_TRACE(::testing::Message() << "n=" << n << " offset=" << offset << " copy=" << with_copy
                                    << " grad_scale=" << grad_scale);
  auto cpu = make_cpu_ops();
  const int steps = 3;
  std::vector<float> p = random_floats(n, 91), m(n, 0.0f), v(n, 0.0f);
  std::vector<std::vector<float>> grads;
  for (int t = 1; t <= steps; ++t) grads.push_back(random_floats(n, 91 + t, -0.5f, 0.5f));
  std::vector<float> cp = p, cm = m, cv = v;
  for (int t = 1; t <= steps; ++t)
    cpu->adamw(cp.data(), cm.data(), cv.data(), nullptr, cp.data(), grads[t - 1].data(), cm.data(), cv.data(), n,
               grad_scale, kLr, kB1, kB2, kEps, kWd, t);
  Outputs in_place = run_both_orders(
      [&](const LaunchContext& ctx) { return kernel_adamw(ctx, p, m, v, grads, offset, with_copy, true, grad_scale); });
  Outputs out_of_place = run_both_orders(
      [&](const LaunchContext& ctx) { return kernel_adamw(ctx, p, m, v, grads, offset, with_copy, false, grad_scale); });
  EXPECT_TRUE(close(in_place[0], cp, false)) << "p";
  EXPECT_TRUE(close(in_place[1], cm, false)) << "m";
  EXPECT_TRUE(close(in_place[2], cv, false)) << "v";
  // The copy is the kernel's own fp32 weights rounded to nearest-even, bit for bit.
  std::vector<float> expect_copy = with_copy ? to_floats(to_bf16(in_place[0])) : std::vector<float>(n, 0.0f);
  EXPECT_TRUE(bitwise_equal({in_place[3]}, {expect_copy})) << "bf16 copy";
  // Element-wise arithmetic: where the results are written changes no bit.
  EXPECT_TRUE(bitwise_equal(out_of_place, in_place)) << "out of place differs from in place";
}

void check_sum_squares(size_t n) {
  SCOPED_TRACE(::testing::Message() << "n=" << n);
  auto cpu = make_cpu_ops();
  std::vector<float> x = random_floats(n, 101, -3.0f, 3.0f);
  std::vector<float> y = random_floats(77, 102);
  double expect = cpu->sum_squares(x.data(), n), expect_y = cpu->sum_squares(y.data(), y.size());
  double got_total = 0, got_sum = 0;
  run_both_orders([&](const LaunchContext& ctx) {
    Guarded<float> gx(x), gy(y);
    Guarded<double> out{std::vector<double>(2)};
    size_t bytes = std::max(sum_squares_workspace_bytes(n), sum_squares_workspace_bytes(y.size()));
    Guarded<double> workspace{std::vector<double>(bytes / sizeof(double), NAN)};
    launch_sum_squares(ctx, out.data(), gx.data(), n, workspace.data(), false);
    launch_sum_squares(ctx, out.data() + 1, gx.data(), n, workspace.data(), false);
    launch_sum_squares(ctx, out.data() + 1, gy.data(), y.size(), workspace.data(), true);
    EXPECT_TRUE(out.guards_intact() && workspace.guards_intact());
    got_sum = out.values()[0];
    got_total = out.values()[1];
    return Outputs{{float(got_sum), float(got_sum - double(float(got_sum)))}};
  });
  EXPECT_NEAR(got_sum, expect, 1e-12 * expect);  // double accumulation: only the order differs
  EXPECT_NEAR(got_total, expect + expect_y, 1e-12 * (expect + expect_y)) << "accumulate";
}

}  // namespace

TEST(KernelsOptimizer, AdamwMatchesCpuOverSteps) {
  // grad_scale ≠ 1 is the clip factor, applied as the gradient is read.
  check_adamw(1003, 0, true, 0.37f);  // vector path plus a ragged tail
  check_adamw(1003, 1, true, 0.37f);  // misaligned: scalar path
  check_adamw(64, 0, false, 1.0f);
  check_adamw(64, 0, true, 1.0f);
}

TEST(KernelsOptimizer, SumSquaresMatchesCpu) {
  check_sum_squares(1003);    // one partial block
  check_sum_squares(50001);   // 13 partial blocks, ragged
}

TEST(KernelsOptimizer, SumSquaresOfNothingIsZero) {
  Guarded<double> out{std::vector<double>(1, 5.0)}, workspace{std::vector<double>(4, NAN)};
  launch_sum_squares({}, out.data(), nullptr, 0, workspace.data(), false);
  EXPECT_EQ(out.values()[0], 0.0);
}
