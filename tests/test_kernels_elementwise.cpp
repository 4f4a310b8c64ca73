// Elementwise kernels (add, accumulate, scale, add_bias, GELU, casts) under the SIMT
// emulator vs. the cpu backend, fp32 and bf16, aligned (128-bit path plus ragged tail) and
// misaligned (scalar path) buffers, in both fiber orders.
#include "support/kernel_test.h"

#include <gtest/gtest.h>

#include "backend/ops.h"
#include "cast.cuh"
#include "elementwise.cuh"
#include "gelu.cuh"

using namespace pptrain;
using namespace pptrain::kernels;
using namespace pptrain::kernels::testing;

namespace {

constexpr size_t kN = 1003;  // not a multiple of the pack size, the block size or a warp

template <typename T>
void check_add_accumulate_scale(size_t offset) {
  auto cpu = make_cpu_ops();
  std::vector<float> a = representable<T>(random_floats(kN, 1, -2, 2));
  std::vector<float> b = representable<T>(random_floats(kN, 2, -2, 2));
  std::vector<float> sum(kN), acc = a, scaled = a;
  cpu->add(sum.data(), a.data(), b.data(), kN);
  cpu->accumulate(acc.data(), b.data(), kN);
  cpu->scale(scaled.data(), 0.37f, kN);
  auto out = run_both_orders([&](const LaunchContext& ctx) {
    Guarded<T> ga(store_as<T>(a), offset), gb(store_as<T>(b), offset), gy(store_as<T>(b), offset);
    Guarded<T> gacc(store_as<T>(a), offset), gscaled(store_as<T>(a), offset), galias(store_as<T>(a), offset);
    launch_add<T>(ctx, gy.data(), ga.data(), gb.data(), kN);
    launch_add<T>(ctx, galias.data(), galias.data(), gb.data(), kN);  // y aliases a
    launch_accumulate<T>(ctx, gacc.data(), gb.data(), kN);
    launch_scale<T>(ctx, gscaled.data(), 0.37f, kN);
    return std::vector<std::vector<float>>{checked(gy, "add"), checked(galias, "add in place"),
                                           checked(gacc, "accumulate"), checked(gscaled, "scale")};
  });
  EXPECT_TRUE(close_as<T>(out[0], sum)) << "add";
  EXPECT_TRUE(close_as<T>(out[1], sum)) << "add in place";
  EXPECT_TRUE(close_as<T>(out[2], acc)) << "accumulate";
  EXPECT_TRUE(close_as<T>(out[3], scaled)) << "scale";
}

template <typename T>
void check_add_bias(int n, int c, size_t offset) {
  auto cpu = make_cpu_ops();
  std::vector<float> y = representable<T>(random_floats(size_t(n) * c, 3, -2, 2));
  std::vector<float> bias = representable<T>(random_floats(c, 4, -1, 1));
  std::vector<float> expect = y;
  cpu->add_bias(expect.data(), bias.data(), n, c);
  auto out = run_both_orders([&](const LaunchContext& ctx) {
    Guarded<T> gy(store_as<T>(y), offset), gb(store_as<T>(bias), offset);
    launch_add_bias<T>(ctx, gy.data(), gb.data(), n, c);
    return std::vector<std::vector<float>>{checked(gy, "add_bias")};
  });
  EXPECT_TRUE(close_as<T>(out[0], expect)) << "n=" << n << " c=" << c << " offset=" << offset;
}

// The q heads of packed rows out into their own buffer and back into other rows: the
// untouched columns of the destination keep their values (bit for bit).
template <typename T>
void check_copy_columns(int rows, int cols, int y_stride, int x_stride) {
  auto cpu = make_cpu_ops();
  std::vector<float> x = representable<T>(random_floats(size_t(rows) * x_stride, 7, -2, 2));
  std::vector<float> y = representable<T>(random_floats(size_t(rows) * y_stride, 8, -2, 2));
  std::vector<float> expect = y;
  cpu->copy_columns(expect.data(), x.data(), rows, cols, y_stride, x_stride);
  auto out = run_both_orders([&](const LaunchContext& ctx) {
    Guarded<T> gx(store_as<T>(x)), gy(store_as<T>(y));
    launch_copy_columns<T>(ctx, gy.data(), gx.data(), rows, cols, y_stride, x_stride);
    return std::vector<std::vector<float>>{checked(gy, "copy_columns")};
  });
  EXPECT_EQ(out[0], expect) << "rows=" << rows << " cols=" << cols;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < y_stride; ++c)
      ASSERT_EQ(expect[size_t(r) * y_stride + c], c < cols ? x[size_t(r) * x_stride + c] : y[size_t(r) * y_stride + c]);
}

TEST(KernelsElementwise, CopyColumnsFp32AndBf16) {
  check_copy_columns<float>(9, 24, 24, 40);  // out of packed rows
  check_copy_columns<float>(9, 24, 40, 24);  // back into them
  check_copy_columns<bf16>(7, 16, 48, 16);
}

template <typename T>
void check_gelu(size_t offset) {
  auto cpu = make_cpu_ops();
  std::vector<float> x = representable<T>(random_floats(kN, 5, -6, 6));
  std::vector<float> dy = representable<T>(random_floats(kN, 6, -1, 1));
  std::vector<float> y(kN), dx(kN);
  cpu->gelu_forward(y.data(), x.data(), kN);
  cpu->gelu_backward(dx.data(), dy.data(), x.data(), kN);
  auto out = run_both_orders([&](const LaunchContext& ctx) {
    Guarded<T> gx(store_as<T>(x), offset), gy(std::vector<T>(kN), offset);
    Guarded<T> gdy(store_as<T>(dy), offset), gdx(std::vector<T>(kN), offset);
    launch_gelu_forward<T>(ctx, gy.data(), gx.data(), kN);
    launch_gelu_backward<T>(ctx, gdx.data(), gdy.data(), gx.data(), kN);
    launch_gelu_backward<T>(ctx, gdy.data(), gdy.data(), gx.data(), kN);  // dx aliases dy
    return std::vector<std::vector<float>>{checked(gy, "gelu"), checked(gdx, "gelu backward"),
                                           checked(gdy, "gelu backward in place")};
  });
  EXPECT_TRUE(close_as<T>(out[0], y)) << "gelu_forward";
  EXPECT_TRUE(close_as<T>(out[1], dx)) << "gelu_backward";
  EXPECT_TRUE(close_as<T>(out[2], dx)) << "gelu_backward in place";
}

}  // namespace

TEST(KernelsElementwise, AddAccumulateScaleFp32) {
  check_add_accumulate_scale<float>(0);
  check_add_accumulate_scale<float>(1);
}
TEST(KernelsElementwise, AddAccumulateScaleBf16) {
  check_add_accumulate_scale<bf16>(0);
  check_add_accumulate_scale<bf16>(3);
}

TEST(KernelsElementwise, AddBiasFp32) {
  check_add_bias<float>(7, 100, 0);  // C % 4 == 0: vector path
  check_add_bias<float>(7, 99, 0);   // scalar path
  check_add_bias<float>(5, 96, 1);   // misaligned: scalar path
}
TEST(KernelsElementwise, AddBiasBf16) {
  check_add_bias<bf16>(7, 96, 0);   // C % 8 == 0: vector path
  check_add_bias<bf16>(7, 100, 0);  // scalar path
}

TEST(KernelsElementwise, GeluFp32) {
  check_gelu<float>(0);
  check_gelu<float>(1);
}
TEST(KernelsElementwise, GeluBf16) {
  check_gelu<bf16>(0);
  check_gelu<bf16>(5);
}

TEST(KernelsElementwise, CastRoundsToNearestEvenAndBack) {
  std::vector<float> x = random_floats(kN, 7, -100, 100);
  x[0] = 0.0f, x[1] = -0.0f, x[2] = 1e-40f, x[3] = 3.0e38f, x[4] = -INFINITY;
  std::vector<bf16> expect = to_bf16(x);  // the emulator's bf16 rounding, checked in test_emu
  for (size_t offset : {0, 1}) {
    auto out = run_both_orders([&](const LaunchContext& ctx) {
      Guarded<float> gx(x, offset), back(std::vector<float>(kN), offset);
      Guarded<bf16> gh(std::vector<bf16>(kN), offset);
      launch_cast(ctx, gh.data(), gx.data(), kN);
      launch_cast(ctx, back.data(), gh.data(), kN);
      return std::vector<std::vector<float>>{checked(gh, "cast to bf16"), checked(back, "cast to fp32")};
    });
    std::vector<float> expect_floats = to_floats(expect);
    EXPECT_TRUE(bitwise_equal({out[0]}, {expect_floats})) << "offset " << offset;
    EXPECT_TRUE(bitwise_equal({out[1]}, {expect_floats})) << "offset " << offset;
  }
}

TEST(KernelsElementwise, EmptyTensorsLaunchNothing) {
  emu::Stream stream;
  LaunchContext ctx{&stream};
  launch_add<float>(ctx, nullptr, nullptr, nullptr, 0);
  launch_gelu_forward<bf16>(ctx, nullptr, nullptr, 0);
  launch_add_bias<float>(ctx, nullptr, nullptr, 0, 16);
  launch_cast(ctx, static_cast<bf16*>(nullptr), static_cast<const float*>(nullptr), 0);
  EXPECT_EQ(stream.launches, 0);
}
