// The fused bias + residual add + layernorm kernel under the SIMT emulator, both fiber orders,
// fp32 and bf16, with and without the bias, on row and channel counts that are not multiples
// of a warp or a block:
//  - against the cpu op (the unfused reference: add_bias, add, layernorm_forward), with the
//    tolerances of kernel_test.h (fp32: 1e-5 of the element or of 10% of the tensor's
//    largest magnitude; bf16 outputs: plus half a bf16 ulp, 2⁻⁸ relative);
//  - against the unfused kernels (launch_add_bias, launch_add, launch_layernorm_forward): the
//    same bits, since each add rounds as they do and the statistics are taken of the sum as
//    stored, in the same order;
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
void check_residual_layernorm(int n, int c, bool with_bias) {
  SCOPED_TRACE(::testing::Message() << "n=" << n << " c=" << c << (with_bias ? " with bias" : " without bias"));
  auto cpu = make_cpu_ops();
  const size_t nc = size_t(n) * c;
  // A branch output a of either sign, and a residual stream b with a row offset larger than
  // its spread (the two-pass variance).
  std::vector<float> a = representable<T>(random_floats(nc, 31, -1.0f, 1.0f));    // [N,C] branch (proj) output
  std::vector<float> bias = representable<T>(random_floats(c, 35, -0.5f, 0.5f));  // [C]
  std::vector<float> b = representable<T>(random_floats(nc, 32, 2.0f, 5.0f));     // [N,C] residual stream
  std::vector<float> g = representable<T>(random_floats(c, 33, 0.5f, 1.5f));      // [C]
  std::vector<float> beta = representable<T>(random_floats(c, 34, -0.5f, 0.5f));  // [C]
  const float* bias_or_null = with_bias ? bias.data() : nullptr;

  // The cpu reference works in fp32 (a + bias and the sum unrounded). A bf16 kernel rounds
  // a + bias (as add_bias stores it) and the sum, and takes the statistics of the sum as
  // stored (the residual stream the rest of the block sees). So for bf16: a' = a + bias as
  // the cpu computes it, rounded to bf16; the sum reference is a' + b (which the kernel
  // rounds once: the bf16 bound); y, mean and rstd are the cpu op on the rounded sum, + 0.
  std::vector<float> sum(nc), y(nc), mean(n), rstd(n);
  if constexpr (std::is_same_v<T, float>) {
    cpu->residual_layernorm_forward(sum.data(), y.data(), mean.data(), rstd.data(), a.data(), bias_or_null,
                                    b.data(), g.data(), beta.data(), n, c);
  } else {
    std::vector<float> biased = a, zero(nc, 0.0f), unused(nc);
    if (with_bias) biased = representable<T>((cpu->add_bias(biased.data(), bias.data(), n, c), biased));
    cpu->residual_layernorm_forward(sum.data(), unused.data(), mean.data(), rstd.data(), biased.data(), nullptr,
                                    b.data(), g.data(), beta.data(), n, c);
    std::vector<float> stored = representable<T>(sum);
    cpu->residual_layernorm_forward(unused.data(), y.data(), mean.data(), rstd.data(), stored.data(), nullptr,
                                    zero.data(), g.data(), beta.data(), n, c);
  }

  auto out = run_both_orders([&](const LaunchContext& ctx) {
    Guarded<T> ga(store_as<T>(a)), gbias(store_as<T>(bias)), gb(store_as<T>(b)), gg(store_as<T>(g)),
        gbeta(store_as<T>(beta));
    T* gbias_or_null = with_bias ? gbias.data() : nullptr;
    Guarded<T> gsum{std::vector<T>(nc)}, gy{std::vector<T>(nc)};
    Guarded<float> gmean{std::vector<float>(n)}, grstd{std::vector<float>(n)};
    launch_residual_layernorm_forward<T>(ctx, gsum.data(), gy.data(), gmean.data(), grstd.data(), ga.data(),
                                         gbias_or_null, gb.data(), gg.data(), gbeta.data(), n, c);
    // The unfused kernels, as Block::forward called them: x2 += bias; x2 = x2 + x; ln_2(x2).
    Guarded<T> usum(store_as<T>(a)), uy{std::vector<T>(nc)};
    Guarded<float> umean{std::vector<float>(n)}, urstd{std::vector<float>(n)};
    if (with_bias) launch_add_bias<T>(ctx, usum.data(), gbias.data(), n, c);
    launch_add<T>(ctx, usum.data(), usum.data(), gb.data(), nc);
    launch_layernorm_forward<T>(ctx, uy.data(), umean.data(), urstd.data(), usum.data(), gg.data(), gbeta.data(),
                                n, c);
    // In place: sum over a, as Block::forward calls it.
    Guarded<T> ia(store_as<T>(a)), iy{std::vector<T>(nc)};
    launch_residual_layernorm_forward<T>(ctx, ia.data(), iy.data(), nullptr, nullptr, ia.data(), gbias_or_null,
                                         gb.data(), gg.data(), gbeta.data(), n, c);
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
  for (bool with_bias : {true, false})
    for (auto [n, c] : {std::pair{1, 1}, {9, 33}, {17, 100}, {3, 256}}) check_residual_layernorm<float>(n, c, with_bias);
}

TEST(KernelsResidualLayernorm, Bf16) {
  for (bool with_bias : {true, false})
    for (auto [n, c] : {std::pair{1, 1}, {9, 33}, {17, 100}, {3, 256}}) check_residual_layernorm<bf16>(n, c, with_bias);
}
