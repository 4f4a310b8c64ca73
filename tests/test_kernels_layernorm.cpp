// Layernorm forward / dgrad / wgrad and the bias-gradient column sums under the SIMT
// emulator vs. the cpu backend, fp32 and bf16, on row and channel counts that are not
// multiples of a warp, a block or the 64-row reduction chunk, in both fiber orders.
#include "support/kernel_test.h"

#include <gtest/gtest.h>

#include "backend/ops.h"
#include "bias_grad.cuh"
#include "layernorm.cuh"

using namespace pptrain;
using namespace pptrain::kernels;
using namespace pptrain::kernels::testing;

namespace {

template <typename T>
void check_layernorm(int n, int c) {
  SCOPED_TRACE(::testing::Message() << "n=" << n << " c=" << c);
  auto cpu = make_cpu_ops();
  size_t nc = size_t(n) * c;
  // A row offset larger than the spread tests the two-pass variance.
  std::vector<float> x = representable<T>(random_floats(nc, 11, 2.0f, 5.0f));
  std::vector<float> g = representable<T>(random_floats(c, 12, 0.5f, 1.5f));
  std::vector<float> b = representable<T>(random_floats(c, 13, -0.5f, 0.5f));
  std::vector<float> dy = representable<T>(random_floats(nc, 14, -1.0f, 1.0f));
  std::vector<float> dx_init = representable<T>(random_floats(nc, 15, -1.0f, 1.0f));
  std::vector<float> dg_init = random_floats(c, 16), db_init = random_floats(c, 17);

  std::vector<float> y(nc), mean(n), rstd(n), dx(nc), dx_res(nc), dg = dg_init, db = db_init;
  cpu->layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), n, c);
  cpu->layernorm_backward_input(dx.data(), dy.data(), x.data(), mean.data(), rstd.data(), g.data(),
                                n, c, nullptr);
  // dx_res = residual + LN'(dy), the residual being dx_init
  cpu->layernorm_backward_input(dx_res.data(), dy.data(), x.data(), mean.data(), rstd.data(),
                                g.data(), n, c, dx_init.data());
  cpu->layernorm_backward_weight(dg.data(), db.data(), dy.data(), x.data(), mean.data(), rstd.data(),
                                 n, c);

  auto out = run_both_orders([&](const LaunchContext& ctx) {
    Guarded<T> gx(store_as<T>(x)), gg(store_as<T>(g)), gb(store_as<T>(b)), gy{std::vector<T>(nc)};
    Guarded<float> gmean{std::vector<float>(n)}, grstd{std::vector<float>(n)};
    launch_layernorm_forward<T>(ctx, gy.data(), gmean.data(), grstd.data(), gx.data(), gg.data(),
                                gb.data(), n, c);
    // Backward uses the cpu statistics, so each pass is checked on its own.
    Guarded<float> cmean(mean), crstd(rstd);
    // dx buffers start as NaN: an output the kernel reads instead of the residual shows.
    Guarded<T> gdy(store_as<T>(dy)), gdx(store_as<T>(std::vector<float>(nc, NAN))),
        gdx_res(store_as<T>(std::vector<float>(nc, NAN)));
    Guarded<T> gresidual(store_as<T>(dx_init)), gdx_in_place(store_as<T>(dx_init));
    launch_layernorm_backward_input<T>(ctx, gdx.data(), gdy.data(), gx.data(), cmean.data(),
                                       crstd.data(), gg.data(), n, c, nullptr);
    launch_layernorm_backward_input<T>(ctx, gdx_res.data(), gdy.data(), gx.data(), cmean.data(),
                                       crstd.data(), gg.data(), n, c, gresidual.data());
    // dx aliasing the residual gives the same as apart from it.
    launch_layernorm_backward_input<T>(ctx, gdx_in_place.data(), gdy.data(), gx.data(), cmean.data(),
                                       crstd.data(), gg.data(), n, c, gdx_in_place.data());
    Guarded<float> gdg(dg_init), gdb(db_init);
    Guarded<float> workspace{std::vector<float>(layernorm_backward_weight_workspace_bytes(n, c) / 4, NAN)};
    launch_layernorm_backward_weight<T>(ctx, gdg.data(), gdb.data(), gdy.data(), gx.data(),
                                        cmean.data(), crstd.data(), workspace.data(), n, c);
    // In place (dx aliases dy) gives the same as out of place.
    launch_layernorm_backward_input<T>(ctx, gdy.data(), gdy.data(), gx.data(), cmean.data(),
                                       crstd.data(), gg.data(), n, c, nullptr);
    return std::vector<std::vector<float>>{
        checked(gy, "y"),    checked(gmean, "mean"), checked(grstd, "rstd"),
        checked(gdx, "dx"),  checked(gdx_res, "dx + residual"), checked(gdg, "dg"),
        checked(gdb, "db"),  checked(gdy, "dx in place"), checked(workspace, "workspace"),
        checked(gdx_in_place, "dx + residual in place"), checked(gresidual, "residual")};
  });
  EXPECT_TRUE(close_as<T>(out[0], y)) << "y";
  EXPECT_TRUE(close(out[1], mean, false)) << "mean";
  EXPECT_TRUE(close(out[2], rstd, false)) << "rstd";
  EXPECT_TRUE(close_as<T>(out[3], dx)) << "dx";
  EXPECT_TRUE(close_as<T>(out[4], dx_res)) << "dx + residual";
  EXPECT_TRUE(close(out[5], dg, false)) << "dg (fp32 gradient)";
  EXPECT_TRUE(close(out[6], db, false)) << "db (fp32 gradient)";
  EXPECT_TRUE(bitwise_equal({out[7]}, {out[3]})) << "dx in place";
  EXPECT_TRUE(bitwise_equal({out[9]}, {out[4]})) << "dx + residual, dx aliasing the residual";
}

template <typename T>
void check_bias_backward(int n, int o) {
  SCOPED_TRACE(::testing::Message() << "n=" << n << " o=" << o);
  auto cpu = make_cpu_ops();
  std::vector<float> dy = representable<T>(random_floats(size_t(n) * o, 21, -1, 1));
  std::vector<float> db_init = random_floats(o, 22);
  // The cpu backend's bias gradient comes with the weight gradient; x = 0 makes dW += 0.
  std::vector<float> x(size_t(n) * 3, 0.0f), dw(size_t(o) * 3, 0.0f), db = db_init;
  cpu->linear_backward_weight(dw.data(), db.data(), dy.data(), x.data(), n, 3, o);
  auto out = run_both_orders([&](const LaunchContext& ctx) {
    Guarded<T> gdy(store_as<T>(dy));
    Guarded<float> gdb(db_init), workspace{std::vector<float>(bias_backward_workspace_bytes(n, o) / 4, NAN)};
    launch_bias_backward<T>(ctx, gdb.data(), gdy.data(), workspace.data(), n, o);
    return std::vector<std::vector<float>>{checked(gdb, "db"), checked(workspace, "workspace")};
  });
  EXPECT_TRUE(close(out[0], db, false)) << "db";
}

}  // namespace

// The weight gradient's column sums read 16-byte packs of columns where C is a multiple of the
// pack (fp32 4, bf16 8), else single columns: C = 100 and 300 packed in fp32, 104 and 520 in
// bf16; 33 and bf16 100 not.
TEST(KernelsLayernorm, Fp32) {
  check_layernorm<float>(37, 100);
  check_layernorm<float>(150, 33);  // three 64-row wgrad chunks, the last ragged
  check_layernorm<float>(3, 300);   // several channels per lane, partial block of rows
  check_layernorm<float>(2200, 40);  // 35 chunks: the finishing block's 32 phases, some with two
}

TEST(KernelsLayernorm, Bf16) {
  check_layernorm<bf16>(37, 100);
  check_layernorm<bf16>(150, 33);
  check_layernorm<bf16>(150, 104);  // packed: 13 packs, one block of columns
  check_layernorm<bf16>(37, 520);   // packed: columns over 3 blocks, the last partly outside
}

TEST(KernelsBiasGrad, Fp32) {
  check_bias_backward<float>(150, 100);
  check_bias_backward<float>(5, 40);
}

TEST(KernelsBiasGrad, Bf16) {
  check_bias_backward<bf16>(150, 100);
  check_bias_backward<bf16>(150, 104);  // packed
  check_bias_backward<bf16>(4200, 104);  // packed, 66 chunks over the finishing block's 32 phases
}
