// Fused causal attention (kernels/flash_attention.cu) under the SIMT emulator, in both fiber
// orders: out, lse and dqkv against a double-precision reference (support/attention_reference.h),
// and against the cpu backend's naive attention_forward / attention_backward_input.
//
// Bounds.
//  - fp32: normwise ‖got − ref‖₂ ≤ 1e-5 ‖ref‖₂ (the project's fp32 tolerance). Every output is
//    a chain of fp32 dot products and sums of n ≤ HD + T + a few terms (≤ 200 here) with unit
//    roundoff u = 2⁻²⁴; rounding errors of random sign grow like √n·u ≈ 1e-6 relative to the
//    sum of |terms|, and normwise the terms do not cancel systematically, so 1e-5 has about
//    a 10× margin, whatever the summation order (the kernel, the naive op and OpenBLAS all
//    sum in different orders). Element-wise checks would fail on rows that cancel.
//  - bf16: inputs are bf16 values; the reference is evaluated in double on exactly those
//    values (and, for the backward, on the out and lse the kernel is given). The kernel
//    rounds to bf16 (unit roundoff u = 2⁻⁸): the forward's P before P·V, each output; the
//    backward's P before dV = Pᵀ dO, dS before dQ = dS K and dK = dSᵀ Q, each output. A
//    product Σ_j x̃_j y_j with x̃ = x(1 + ε), |ε| ≤ u, errs by at most u Σ_j |x_j y_j|, and the
//    final rounding by u |result|, so element-wise |got − ref| ≤ u (A + |ref|) with A the
//    sum of |terms| of the rounded product (computed by the reference), plus the fp32 part
//    (1e-5 of the element or of 10% of the tensor's largest element, as kernel_test.h).
//    lse is fp32 output of fp32 arithmetic on exact inputs: the fp32 normwise bound.
#include "support/kernel_test.h"
#include "support/attention_reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "backend/ops.h"
#include "core/config.h"
#include "flash_attention.cuh"

using namespace pptrain;
using namespace pptrain::kernels;
using namespace pptrain::kernels::testing;

namespace {

using Outputs = std::vector<std::vector<float>>;

struct Shape {
  int b, t, nh, hd;
  size_t rows() const { return size_t(b) * t; }
  size_t c() const { return size_t(nh) * hd; }
  size_t q(int bi, int i, int h, int d) const { return (size_t(bi) * t + i) * 3 * c() + size_t(h) * hd + d; }
  size_t k(int bi, int i, int h, int d) const { return q(bi, i, h, d) + c(); }
  size_t v(int bi, int i, int h, int d) const { return q(bi, i, h, d) + 2 * c(); }
  size_t o(int bi, int i, int h, int d) const { return (size_t(bi) * t + i) * c() + size_t(h) * hd + d; }
  size_t stat(int bi, int h, int i) const { return (size_t(bi) * nh + h) * t + i; }
};

// Forward then backward of the kernels at storage type T, in both fiber orders; the backward
// runs on the forward's out and lse. `forward` picks the bf16 kernels (mma.sync or Hopper's
// wgmma ones; automatic is mma.sync under the emulator).
template <typename T>
Outputs run_kernels(const Shape& s, const std::vector<float>& qkv, const std::vector<float>& dout,
                    FlashKernels forward = FlashKernels::automatic) {
  return run_both_orders([&](const LaunchContext& ctx) {
    Guarded<T> gqkv(store_as<T>(qkv)), gdout(store_as<T>(dout));
    Guarded<T> out{std::vector<T>(s.rows() * s.c())}, dqkv{std::vector<T>(qkv.size())};
    Guarded<float> lse{std::vector<float>(size_t(s.b) * s.nh * s.t)}, delta{std::vector<float>(lse.size())};
    if constexpr (std::is_same_v<T, bf16>)
      launch_flash_attention_forward_bf16(ctx, out.data(), lse.data(), gqkv.data(), s.b, s.t, s.nh, s.nh, s.hd,
                                          forward);
    else
      launch_flash_attention_forward<T>(ctx, out.data(), lse.data(), gqkv.data(), s.b, s.t, s.nh, s.hd);
    if constexpr (std::is_same_v<T, bf16>)
      launch_flash_attention_backward_input_bf16(ctx, dqkv.data(), delta.data(), gdout.data(), gqkv.data(),
                                                 out.data(), lse.data(), s.b, s.t, s.nh, s.nh, s.hd, forward);
    else
      launch_flash_attention_backward_input<T>(ctx, dqkv.data(), delta.data(), gdout.data(), gqkv.data(), out.data(),
                                               lse.data(), s.b, s.t, s.nh, s.hd);
    return Outputs{checked(out, "out"), checked(lse, "lse"), checked(dqkv, "dqkv"), checked(delta, "delta")};
  });
}

std::vector<float> inputs(size_t n, uint64_t seed) { return random_floats(n, seed, -1.5f, 1.5f); }

void check_fp32(const Shape& s) {
  SCOPED_TRACE(::testing::Message() << "fp32 b=" << s.b << " t=" << s.t << " nh=" << s.nh << " hd=" << s.hd);
  std::vector<float> qkv = inputs(s.rows() * 3 * s.c(), 61), dout = inputs(s.rows() * s.c(), 62);
  Outputs got = run_kernels<float>(s, qkv, dout);
  AttentionReference ref = attention_forward_reference(s, qkv);
  attention_backward_reference(ref, s, qkv, dout, got[0], got[1]);
  EXPECT_TRUE(normwise(got[0], ref.out)) << "out vs double";
  EXPECT_TRUE(normwise(got[1], ref.lse)) << "lse vs double";
  EXPECT_TRUE(normwise(got[2], ref.dqkv)) << "dqkv vs double";
  // The project's reference: the cpu backend's naive attention (probs materialised).
  auto cpu = make_cpu_ops();
  std::vector<float> out(s.rows() * s.c()), probs(size_t(s.b) * s.nh * s.t * s.t), dqkv(qkv.size());
  cpu->attention_forward(out.data(), probs.data(), qkv.data(), s.b, s.t, s.nh, s.hd);
  cpu->attention_backward_input(dqkv.data(), dout.data(), qkv.data(), probs.data(), s.b, s.t, s.nh, s.hd);
  EXPECT_TRUE(normwise(got[0], std::vector<double>(out.begin(), out.end()))) << "out vs cpu naive";
  EXPECT_TRUE(normwise(got[2], std::vector<double>(dqkv.begin(), dqkv.end()))) << "dqkv vs cpu naive";
}

void check_bf16(const Shape& s, FlashKernels forward = FlashKernels::automatic) {
  SCOPED_TRACE(::testing::Message() << "bf16 b=" << s.b << " t=" << s.t << " nh=" << s.nh << " hd=" << s.hd
                                    << (forward == FlashKernels::wgmma ? " (wgmma kernels)" : ""));
  std::vector<float> qkv = representable<bf16>(inputs(s.rows() * 3 * s.c(), 71));
  std::vector<float> dout = representable<bf16>(inputs(s.rows() * s.c(), 72));
  Outputs got = run_kernels<bf16>(s, qkv, dout, forward);
  AttentionReference ref = attention_forward_reference(s, qkv);
  EXPECT_TRUE(within_bf16(got[0], ref.out, ref.abs_out)) << "out vs double";
  EXPECT_TRUE(normwise(got[1], ref.lse)) << "lse vs double";
  attention_backward_reference(ref, s, qkv, dout, got[0], got[1]);
  EXPECT_TRUE(within_bf16(got[2], ref.dqkv, ref.abs_dqkv)) << "dqkv vs double";
  // The cpu naive op on the same inputs (its own out and probs: fp32 accurate), against the
  // bf16 bound widened by the naive op's fp32 error, which the fp32 part covers.
  auto cpu = make_cpu_ops();
  std::vector<float> out(s.rows() * s.c()), probs(size_t(s.b) * s.nh * s.t * s.t);
  cpu->attention_forward(out.data(), probs.data(), qkv.data(), s.b, s.t, s.nh, s.hd);
  EXPECT_TRUE(within_bf16(got[0], std::vector<double>(out.begin(), out.end()), ref.abs_out)) << "out vs cpu naive";
}

const Shape kShapes[] = {
    {2, 17, 2, 32},  // one partial tile; B·NH = 4 heads
    {1, 70, 2, 64},  // a full and a partial tile of query rows and of keys
    {2, 1, 1, 64},   // a single token
    {1, 40, 1, 128}, // head dim 128: 32-key tiles
    // Three query tiles, the middle one with every warp's rows valid and two key tiles: a
    // tile buffer refilled while another warp still reads it shows (emu/ptx_emu.h).
    {1, 150, 1, 64},
    {1, 140, 1, 128},
    // More key tiles than the Hopper forward's ring of stages (4 at HD 64): a stage is reused.
    {1, 300, 1, 64},
};

}  // namespace

TEST(KernelsFlashAttention, Fp32MatchesReferenceAndNaive) {
  for (const Shape& s : kShapes) check_fp32(s);
}

TEST(KernelsFlashAttention, Bf16WithinRoundingBound) {
  for (const Shape& s : kShapes) check_bf16(s);
}

// The Hopper kernels (wgmma on swizzled shared tiles, emu/ptx_emu.h), forward and backward,
// against the same reference and bound. Their head sizes: 64, 128.
TEST(KernelsFlashAttention, Bf16WgmmaKernelsWithinRoundingBound) {
  for (const Shape& s : kShapes)
    if (s.hd != 32) check_bf16(s, FlashKernels::wgmma);
}

TEST(KernelsFlashAttention, WgmmaKernelsRefuseHeadSize32WithOneLine) {
  std::vector<bf16> buf(3 * 32 * 4), out(32 * 4);
  std::vector<float> lse(4);
  emu::Stream stream;
  try {
    launch_flash_attention_forward_bf16(LaunchContext{&stream}, out.data(), lse.data(), buf.data(), 1, 4, 1, 1, 32,
                                        FlashKernels::wgmma);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "flash attention: the wgmma kernels take head sizes 64 and 128, not 32");
  }
  EXPECT_EQ(stream.launches, 0);
}

TEST(KernelsFlashAttention, UnsupportedHeadDimFailsWithOneLine) {
  std::vector<float> buf(3 * 48 * 4, 0.0f), lse(4);
  emu::Stream stream;
  try {
    launch_flash_attention_forward<float>(LaunchContext{&stream}, buf.data(), lse.data(), buf.data(), 1, 4, 1, 48);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "flash attention: head dim 48 is not supported (32, 64, 128)");
  }
  EXPECT_EQ(stream.launches, 0);
}

// The config (core, which cannot see kernels/) keeps its own list of the head sizes flash takes
// on cuda; both must agree: for every head size up to 160 the config accepts flash on cuda
// exactly when the launcher runs it (T = 1: one block, no work beyond the tile loads).
TEST(KernelsFlashAttention, ConfigAcceptsFlashOnCudaExactlyForTheKernelsHeadDims) {
  for (int hd = 1; hd <= 160; ++hd) {
    bool config_accepts = true;
    try {
      parse_config(cat("device: cuda\nmodel: {n_head: 1, d_model: ", hd, ", attention: flash}\n"), "t.yaml");
    } catch (const Error&) {
      config_accepts = false;
    }
    std::vector<float> qkv(3 * size_t(hd), 0.5f), out(hd), lse(1);
    emu::Stream stream;
    bool kernel_runs = true;
    try {
      launch_flash_attention_forward<float>(LaunchContext{&stream}, out.data(), lse.data(), qkv.data(), 1, 1, 1, hd);
    } catch (const Error&) {
      kernel_runs = false;
    }
    EXPECT_EQ(config_accepts, kernel_runs) << "head size " << hd;
  }
}

// Shared memory is static and sized by (T, HD) only: a long sequence launches the same blocks
// as a short one, and nothing of size T×T exists anywhere (the op has no such argument).
// T = 1024 rather than 4096: the emulated bf16 forward at T = 4096 (2080 tile steps of 64×64)
// takes about 4 s, T = 1024 (136 steps) a quarter of a second, and shows the same.
TEST(KernelsFlashAttention, SharedMemoryDoesNotDependOnT) {
  for (int hd : {32, 64, 128}) {
    EXPECT_LE(flash_attention_shared_bytes<float>(hd), 48u * 1024) << hd;
    EXPECT_LE(flash_attention_shared_bytes<bf16>(hd), 48u * 1024) << hd;
  }
  for (int t : {64, 1024}) {
    Shape s{1, t, 1, 64};
    std::vector<float> qkv = representable<bf16>(inputs(s.rows() * 3 * s.c(), 81));
    Guarded<bf16> gqkv(store_as<bf16>(qkv)), out{std::vector<bf16>(s.rows() * s.c())};
    Guarded<float> lse{std::vector<float>(size_t(t))};
    emu::Stream stream;
    launch_flash_attention_forward<bf16>(LaunchContext{&stream}, out.data(), lse.data(), gqkv.data(), 1, t, 1, 64);
    EXPECT_EQ(stream.blocks, (t + 63) / 64) << "one block per 64 query rows";
    // Spot-check the last row (it sees every key) against the reference.
    Shape last{1, t, 1, 64};
    std::vector<float> got = checked(out, "out");
    double mx = -INFINITY, sum = 0;
    std::vector<double> sc(t), o(64, 0.0), abs(64, 0.0);
    int i = t - 1;
    for (int j = 0; j < t; ++j) {
      double dot = 0;
      for (int d = 0; d < 64; ++d) dot += double(qkv[last.q(0, i, 0, d)]) * qkv[last.k(0, j, 0, d)];
      sc[j] = dot / 8, mx = std::max(mx, sc[j]);
    }
    for (int j = 0; j < t; ++j) sum += std::exp(sc[j] - mx);
    for (int j = 0; j < t; ++j)
      for (int d = 0; d < 64; ++d) {
        double p = std::exp(sc[j] - mx) / sum;
        o[d] += p * qkv[last.v(0, j, 0, d)], abs[d] += p * std::fabs(qkv[last.v(0, j, 0, d)]);
      }
    std::vector<float> row(got.begin() + long(size_t(i) * 64), got.begin() + long(size_t(i) * 64 + 64));
    EXPECT_TRUE(within_bf16(row, o, abs)) << "t=" << t;
  }
}
