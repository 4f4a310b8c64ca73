// The fused residual add + layernorm kernel under the SIMT emulator, both fiber orders, fp32
// and bf16, on row and channel counts that are not multiples of a warp or a block:
//  - against the cpu op (the unfused reference: add, then layernorm_forward), with the
//    tolerances of kernel_test.h (fp32: 1e-5 of the element or of 10% of the tensor's
//    largest magnitude; bf16 outputs: plus half a bf16 ulp, 2⁻⁸ relative);
//  - against the unfused kernels (launch_add, then launch_layernorm_forward): the same bits,
//    since the statistics are taken of the sum as stored, in the same order;
//  - in place (sum aliasing a, as the block calls it): the same bits as out of place.
#include "support/kernel_test.h"

#include <gtest/gtest.h>

#include "backend/ops.h"
#include "elementwise.cuh"
#include "layernorm.cuh"
#include "residual_layernorm.cuh"

using namespace pptrain;
using namespace pptrain::kernels;
using namespace pptrain::kernels::testing;

namespace {

template <typename T>
void check_residual_layernorm(int n, int c) {
  SCOPED_TRACE(::testing::Message() << "n=" << n << " c=" << c);
  auto cpu = make_cpu_ops();
  const size_t nc = size_t(n) * c;
  // A residual stream with a row offset larger than its spread (the two-pass variance), and
  // a branch output of either sign.
  std::vector<float> a = representable<T>(random_floats(nc, 31, 2.0f, 5.0f));   // [N,C]
  std::vector<float> b = representable<T>(random_floats(nc, 32, -1.0f, 1.0f));  // [N,C]
  std::vector<float> g = representable<T>(random_floats(c, 33, 0.5f, 1.5f));    // [C]
  std::vector<float> beta = representable<T>(random_floats(c, 34, -0.5f, 0.5f));  // [C]

  // The cpu reference works in fp32: its sum is a + b unrounded, which a bf16 kernel rounds
  // once (checked with the bf16 bound). The kernel's statistics are those of the sum as stored
  // (the residual stream the rest of the block sees), so for bf16 the reference of y, mean and
  // rstd is the cpu op on that stored sum: a' = the rounded sum (exact in fp32), b' = 0.
  std::vector<float> sum(nc), y(nc), mean(n), rstd(n);
  cpu->residual_layernorm_forward(sum.data(), y.data(), mean.data(), rstd.data(), a.data(), b.data(), g.data(),
                                  beta.data(), n, c);
  if constexpr (std::is_same_v<T, bf16>) {
    std::vector<float> stored = representable<T>(sum), zero(nc, 0.0f), unused(nc);
    cpu->residual_layernorm_forward(unused.data(), y.data(), mean.data(), rstd.data(), stored.data(), zero.data(),
                                    g.data(), beta.data(), n, c);
  }

  auto out = run_both_orders([&](const LaunchContext& ctx) {
    Guarded<T> ga(store_as<T>(a)), gb(store_as<T>(b)), gg(store_as<T>(g)), gbeta(store_as<T>(beta));
    Guarded<T> gsum{std::vector<T>(nc)}, gy{std::vector<T>(nc)};
    Guarded<float> gmean{std::vector<float>(n)}, grstd{std::vector<float>(n)};
    launch_residual_layernorm_forward<T>(ctx, gsum.data(), gy.data(), gmean.data(), grstd.data(), ga.data(),
                                         gb.data(), gg.data(), gbeta.data(), n, c);
    // The unfused kernels.
    Guarded<T> usum{std::vector<T>(nc)}, uy{std::vector<T>(nc)};
    Guarded<float> umean{std::vector<float>(n)}, urstd{std::vector<float>(n)};
    launch_add<T>(ctx, usum.data(), ga.data(), gb.data(), nc);
    launch_layernorm_forward<T>(ctx, uy.data(), umean.data(), urstd.data(), usum.data(), gg.data(), gbeta.data(),
                                n, c);
    // In place: sum over a, as Block::forward calls it (x2 = x2 + x).
    Guarded<T> ia(store_as<T>(a)), iy{std::vector<T>(nc)};
    launch_residual_layernorm_forward<T>(ctx, ia.data(), iy.data(), nullptr, nullptr, ia.data(), gb.data(),
                                         gg.data(), gbeta.data(), n, c);
    return std::vector<std::vector<float>>{
        checked(gsum, "sum"),          checked(gy, "y"),           checked(gmean, "mean"),
        checked(grstd, "rstd"),        checked(usum, "add"),       checked(uy, "layernorm"),
        checked(umean, "unfused mean"), checked(urstd, "unfused rstd"), checked(ia, "sum in place"),
        checked(iy, "y in place")};
  });
  EXPECT_TRUE(close_as<T>(out[0], sum)) << "sum";
  EXPECT_TRUE(close_as<T>(out[1], y)) << "y";
  EXPECT_TRUE(close(out[2], mean, false)) << "mean";
  EXPECT_TRUE(close(out[3], rstd, false)) << "rstd";
  EXPECT_TRUE(bitwise_equal({out[0], out[1], out[2], out[3]}, {out[4], out[5], out[6], out[7]}))
      << "fused and unfused kernels differ";
  EXPECT_TRUE(bitwise_equal({out[8], out[9]}, {out[0], out[1]})) << "in place differs";
}

}  // namespace

TEST(KernelsResidualLayernorm, Fp32) {
  for (auto [n, c] : {std::pair{1, 1}, {9, 33}, {17, 100}, {3, 256}}) check_residual_layernorm<float>(n, c);
}

TEST(KernelsResidualLayernorm, Bf16) {
  for (auto [n, c] : {std::pair{1, 1}, {9, 33}, {17, 100}, {3, 256}}) check_residual_layernorm<bf16>(n, c);
}
