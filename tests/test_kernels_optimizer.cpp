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

// The multi-tensor launch gives each tensor the bits of its own launch_adamw: 30 tensors (two
// launches of at most kAdamwTensorsPerLaunch), sizes from 1 to past a block's 1024 elements,
// one misaligned (element by element), one empty, weight decay per tensor, bf16 copies on some.
TEST(KernelsOptimizer, AdamwMultiGivesEachTensorItsOwnBits) {
  std::vector<size_t> sizes;
  for (int k = 0; k < 30; ++k) sizes.push_back(k == 7 ? 0 : size_t(1 + (k * 397) % 2500));
  ASSERT_GT(sizes.size(), size_t(kAdamwTensorsPerLaunch));
  Outputs got[2];
  for (int multi = 0; multi < 2; ++multi) {
    got[multi] = run_both_orders([&](const LaunchContext& ctx) {
      std::vector<std::unique_ptr<Guarded<float>>> buffers;
      std::vector<std::unique_ptr<Guarded<bf16>>> copies;
      auto make = [&](const std::vector<float>& x, size_t offset) {
        buffers.push_back(std::make_unique<Guarded<float>>(x, offset));
        return buffers.back()->data();
      };
      std::vector<AdamwTensorArgs> args;
      for (size_t k = 0; k < sizes.size(); ++k) {
        const size_t n = sizes[k], offset = k == 3 ? 1 : 0;  // tensor 3 misaligned
        const uint64_t seed = 500 + 10 * k;
        float* p = make(random_floats(n, seed), offset);
        float* g = make(random_floats(n, seed + 1, -0.5f, 0.5f), offset);
        float* m = make(random_floats(n, seed + 2, -0.1f, 0.1f), offset);
        float* v = make(random_floats(n, seed + 3, 0.0f, 0.1f), offset);
        bf16* copy = nullptr;
        if (k % 3 == 0) {
          copies.push_back(std::make_unique<Guarded<bf16>>(std::vector<bf16>(n), offset));
          copy = copies.back()->data();
        }
        args.push_back({p, m, v, copy, p, g, m, v, n, k % 2 ? 0.0f : kWd});
      }
      if (multi) {
        launch_adamw_multi(ctx, args.data(), int(args.size()), 0.5f, kLr, kB1, kB2, kEps, 2);
      } else {
        for (const AdamwTensorArgs& x : args)
          launch_adamw(ctx, x.p_out, x.m_out, x.v_out, x.p_bf16, x.p, x.g, x.m, x.v, x.n, 0.5f, kLr, kB1, kB2, kEps,
                       x.wd, 2);
      }
      Outputs out;
      for (auto& b : buffers) out.push_back(checked(*b, "buffer"));
      for (auto& c : copies) out.push_back(checked(*c, "bf16 copy"));
      return out;
    });
  }
  EXPECT_TRUE(bitwise_equal(got[1], got[0]));
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
