// The Llama family's kernels under the SIMT emulator, in both fiber orders, fp32 and bf16,
// against the cpu backend: RMSNorm (forward, dgrad with and without the residual and in
// place, wgrad), rotary embedding (forward, backward; value heads untouched), SwiGLU
// (forward, backward; aligned and unaligned), the grouped-query permutes of the naive
// attention path, and grouped-query flash attention (forward and backward_input).
// Shapes are odd on purpose: rows not a multiple of a block or of the 64-row wgrad chunk,
// channels not a multiple of 32, head sizes from 8 to 64 (flash: 32, 64, its tile sizes).
//
// Bounds: kernel_test.h (elementwise 1e-5 relative with the 10%-of-max floor; bf16 outputs
// add half a bf16 ulp). Flash attention: as test_kernels_flash_attention.cpp, normwise 1e-5
// in fp32 against a double reference and the cpu op, and in bf16 element-wise within
// 2⁻⁸ (Σ|terms| + |ref|) of the double reference (the terms are the products whose operand
// the kernel rounds to bf16: P before P·V, dS before dS·K and dSᵀ·Q, P before Pᵀ·dO); a
// key/value head's gradient sums the terms of all its group's query heads.
#include "support/kernel_test.h"
#include "support/attention_reference.h"

#include <gtest/gtest.h>

#include <cmath>

#include "attention.cuh"
#include "backend/ops.h"
#include "flash_attention.cuh"
#include "rmsnorm.cuh"
#include "rotary.cuh"
#include "swiglu.cuh"

using namespace pptrain;
using namespace pptrain::kernels;
using namespace pptrain::kernels::testing;

namespace {

using Outputs = std::vector<std::vector<float>>;

// ---- RMSNorm -------------------------------------------------------------------------------

template <typename T>
void check_rmsnorm(int n, int c) {
  SCOPED_TRACE(::testing::Message() << "n=" << n << " c=" << c);
  auto cpu = make_cpu_ops();
  const size_t nc = size_t(n) * c;
  const float eps = 1e-6f;
  std::vector<float> x = representable<T>(random_floats(nc, 11, -2.0f, 3.0f));
  std::vector<float> g = representable<T>(random_floats(c, 12, 0.5f, 1.5f));
  std::vector<float> dy = representable<T>(random_floats(nc, 14));
  std::vector<float> residual = representable<T>(random_floats(nc, 15));
  std::vector<float> dg_init = random_floats(c, 16);

  std::vector<float> y(nc), rstd(n), dx(nc), dx_res(nc), dg = dg_init;
  cpu->rmsnorm_forward(y.data(), rstd.data(), x.data(), g.data(), n, c, eps);
  cpu->rmsnorm_backward_input(dx.data(), dy.data(), x.data(), rstd.data(), g.data(), n, c, nullptr);
  cpu->rmsnorm_backward_input(dx_res.data(), dy.data(), x.data(), rstd.data(), g.data(), n, c, residual.data());
  cpu->rmsnorm_backward_weight(dg.data(), dy.data(), x.data(), rstd.data(), n, c);

  Outputs out = run_both_orders([&](const LaunchContext& ctx) {
    Guarded<T> gx(store_as<T>(x)), gg(store_as<T>(g)), gy{std::vector<T>(nc)};
    Guarded<float> grstd{std::vector<float>(n)};
    launch_rmsnorm_forward<T>(ctx, gy.data(), grstd.data(), gx.data(), gg.data(), n, c, eps);
    // Backward takes the cpu rstd, so each pass is checked on its own. dx starts as NaN: a
    // kernel reading it instead of the residual shows.
    Guarded<float> crstd(rstd);
    Guarded<T> gdy(store_as<T>(dy)), gdx(store_as<T>(std::vector<float>(nc, NAN))),
        gdx_res(store_as<T>(std::vector<float>(nc, NAN))), gresidual(store_as<T>(residual)),
        gdx_in_place(store_as<T>(residual));
    launch_rmsnorm_backward_input<T>(ctx, gdx.data(), gdy.data(), gx.data(), crstd.data(), gg.data(), n, c, nullptr);
    launch_rmsnorm_backward_input<T>(ctx, gdx_res.data(), gdy.data(), gx.data(), crstd.data(), gg.data(), n, c,
                                     gresidual.data());
    launch_rmsnorm_backward_input<T>(ctx, gdx_in_place.data(), gdy.data(), gx.data(), crstd.data(), gg.data(), n, c,
                                     gdx_in_place.data());
    Guarded<float> gdg(dg_init);
    Guarded<float> workspace{std::vector<float>(rmsnorm_backward_weight_workspace_bytes(n, c) / 4, NAN)};
    launch_rmsnorm_backward_weight<T>(ctx, gdg.data(), gdy.data(), gx.data(), crstd.data(), workspace.data(), n, c);
    // dx aliasing dy, last (dy is read above).
    launch_rmsnorm_backward_input<T>(ctx, gdy.data(), gdy.data(), gx.data(), crstd.data(), gg.data(), n, c, nullptr);
    return Outputs{checked(gy, "y"),           checked(grstd, "rstd"),         checked(gdx, "dx"),
                   checked(gdx_res, "dx + residual"), checked(gdg, "dg"),      checked(gdy, "dx in place"),
                   checked(gdx_in_place, "dx + residual in place"), checked(workspace, "workspace")};
  });
  EXPECT_TRUE(close_as<T>(out[0], y)) << "y";
  EXPECT_TRUE(close(out[1], rstd, false)) << "rstd";
  EXPECT_TRUE(close_as<T>(out[2], dx)) << "dx";
  EXPECT_TRUE(close_as<T>(out[3], dx_res)) << "dx + residual";
  EXPECT_TRUE(close(out[4], dg, false)) << "dg (fp32 gradient)";
  EXPECT_TRUE(bitwise_equal({out[5]}, {out[2]})) << "dx aliasing dy";
  EXPECT_TRUE(bitwise_equal({out[6]}, {out[3]})) << "dx aliasing the residual";
}

TEST(KernelsRmsnorm, Fp32) {
  check_rmsnorm<float>(37, 100);  // partial block of rows, C not a multiple of 32
  check_rmsnorm<float>(150, 33);  // three 64-row wgrad chunks, the last ragged
  check_rmsnorm<float>(3, 300);   // several channels per lane
  check_rmsnorm<float>(1, 7);     // fewer channels than lanes
}

TEST(KernelsRmsnorm, Bf16) {
  check_rmsnorm<bf16>(37, 100);
  check_rmsnorm<bf16>(150, 33);
}

// ---- rotary embedding ------------------------------------------------------------------------

template <typename T>
void check_rotary(int b, int t, int nh, int nkv, int hd, float theta, const RopeScaling& scaling = {}) {
  SCOPED_TRACE(::testing::Message() << "b=" << b << " t=" << t << " nh=" << nh << " nkv=" << nkv << " hd=" << hd
                                    << " theta=" << theta);
  auto cpu = make_cpu_ops();
  const size_t width = size_t(nh + 2 * nkv) * hd, n = size_t(b) * t * width;
  std::vector<float> qkv = representable<T>(random_floats(n, 21, -2.0f, 2.0f));
  std::vector<float> dqkv = representable<T>(random_floats(n, 22));
  std::vector<float> rotated = qkv, back = dqkv;
  const RotaryFrequencies rope = rotary_frequencies(hd, theta, scaling);
  cpu->rotary_forward(rotated.data(), b, t, nh, nkv, hd, rope);
  cpu->rotary_backward_input(back.data(), b, t, nh, nkv, hd, rope);

  Outputs out = run_both_orders([&](const LaunchContext& ctx) {
    Guarded<T> gqkv(store_as<T>(qkv)), gdqkv(store_as<T>(dqkv));
    Guarded<float> table{std::vector<float>(rotary_table_bytes(t, hd) / 4)};
    launch_rotary_forward<T>(ctx, gqkv.data(), table.data(), b, t, nh, nkv, hd, rope.inv_freq, rope.planes);
    launch_rotary_backward_input<T>(ctx, gdqkv.data(), table.data(), b, t, nh, nkv, hd, rope.inv_freq, rope.planes);
    return Outputs{checked(gqkv, "qkv"), checked(gdqkv, "dqkv"), checked(table, "table")};
  });
  EXPECT_TRUE(close_as<T>(out[0], rotated)) << "forward";
  EXPECT_TRUE(close_as<T>(out[1], back)) << "backward";
  // The value heads are not touched (bit for bit).
  for (size_t row = 0; row < size_t(b) * t; ++row)
    for (size_t col = size_t(nh + nkv) * hd; col < width; ++col) {
      ASSERT_EQ(out[0][row * width + col], qkv[row * width + col]) << "value row " << row << " col " << col;
      ASSERT_EQ(out[1][row * width + col], dqkv[row * width + col]) << "value gradient row " << row;
    }
}

TEST(KernelsRotary, Fp32) {
  check_rotary<float>(2, 37, 4, 2, 8, 10000.0f);   // head size 8, GQA
  check_rotary<float>(1, 5, 3, 1, 14, 10000.0f);   // 7 planes per head: not a warp multiple
  check_rotary<float>(2, 9, 2, 2, 64, 500000.0f);  // Llama 3's theta, multi-head
  check_rotary<float>(1, 1000, 1, 1, 16, 10000.0f);  // angles up to ~1000 rad
  check_rotary<float>(2, 40, 2, 1, 64, 500000.0f, {"llama3", 32.0, 1.0, 4.0, 8192});  // Llama 3.1's scaling
  check_rotary<float>(1, 40, 2, 1, 16, 10000.0f, {"llama3", 8.0, 1.0, 4.0, 16});      // a plane in the band
  check_rotary<float>(1, 12, 2, 2, 16, 10000.0f, {"linear", 4.0});
}

TEST(KernelsRotary, Bf16) {
  check_rotary<bf16>(2, 37, 4, 2, 8, 10000.0f);
  check_rotary<bf16>(2, 9, 2, 2, 64, 500000.0f);
}

TEST(KernelsRotary, OddHeadSizeFailsWithOneLine) {
  std::vector<float> qkv(3 * 5), table(16), inv_freq(2, 1.0f);
  emu::Stream stream;
  try {
    launch_rotary_forward<float>(LaunchContext{&stream}, qkv.data(), table.data(), 1, 1, 1, 1, 5, inv_freq.data(), 2);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "rotary_forward: expected b >= 0, t, nh, nkv >= 1, an even head size hd up to 512 and "
                           "hd/2 inverse frequencies, got b=1 t=1 nh=1 nkv=1 hd=5 planes=2");
  }
  EXPECT_EQ(stream.launches, 0);
}

// ---- SwiGLU ----------------------------------------------------------------------------------

template <typename T>
void check_swiglu(size_t n, size_t offset) {
  SCOPED_TRACE(::testing::Message() << "n=" << n << " offset=" << offset);
  auto cpu = make_cpu_ops();
  std::vector<float> gate = representable<T>(random_floats(n, 31, -6.0f, 6.0f));
  std::vector<float> up = representable<T>(random_floats(n, 32, -2.0f, 2.0f));
  std::vector<float> dy = representable<T>(random_floats(n, 33));
  std::vector<float> y(n), dgate(n), dup(n);
  cpu->swiglu_forward(y.data(), gate.data(), up.data(), n);
  cpu->swiglu_backward_input(dgate.data(), dup.data(), dy.data(), gate.data(), up.data(), n);

  Outputs out = run_both_orders([&](const LaunchContext& ctx) {
    Guarded<T> ggate(store_as<T>(gate), offset), gup(store_as<T>(up), offset), gdy(store_as<T>(dy), offset);
    Guarded<T> gy(std::vector<T>(n), offset), gdgate(std::vector<T>(n), offset), gdup(std::vector<T>(n), offset);
    launch_swiglu_forward<T>(ctx, gy.data(), ggate.data(), gup.data(), n);
    launch_swiglu_backward_input<T>(ctx, gdgate.data(), gdup.data(), gdy.data(), ggate.data(), gup.data(), n);
    return Outputs{checked(gy, "y"), checked(gdgate, "dgate"), checked(gdup, "dup")};
  });
  EXPECT_TRUE(close_as<T>(out[0], y)) << "y";
  EXPECT_TRUE(close_as<T>(out[1], dgate)) << "dgate";
  EXPECT_TRUE(close_as<T>(out[2], dup)) << "dup";
}

TEST(KernelsSwiglu, Fp32) {
  check_swiglu<float>(1027, 0);  // 128-bit packs and a ragged tail
  check_swiglu<float>(1027, 1);  // unaligned: the scalar path
  check_swiglu<float>(3, 0);
}

TEST(KernelsSwiglu, Bf16) {
  check_swiglu<bf16>(1027, 0);
  check_swiglu<bf16>(1027, 3);
}

// ---- grouped-query permutes of the naive attention path ----------------------------------------

template <typename T>
void check_gqa_permutes(int b, int t, int nh, int nkv, int hd) {
  SCOPED_TRACE(::testing::Message() << "b=" << b << " t=" << t << " nh=" << nh << " nkv=" << nkv << " hd=" << hd);
  const size_t width = size_t(nh + 2 * nkv) * hd, n = size_t(b) * t * width;
  const size_t eq = size_t(b) * nh * t * hd, ekv = size_t(b) * nkv * t * hd;
  std::vector<float> qkv = representable<T>(random_floats(n, 41));
  // The expected heads, gathered on the host: head h of row (bi, i) at column offset col0 + h·HD.
  auto heads = [&](int count, size_t col0) {
    std::vector<float> out(size_t(b) * count * t * hd);
    for (int bi = 0; bi < b; ++bi)
      for (int h = 0; h < count; ++h)
        for (int i = 0; i < t; ++i)
          for (int d = 0; d < hd; ++d)
            out[((size_t(bi) * count + h) * t + i) * hd + d] = qkv[(size_t(bi) * t + i) * width + col0 + h * hd + d];
    return out;
  };
  Outputs out = run_both_orders([&](const LaunchContext& ctx) {
    Guarded<T> gqkv(store_as<T>(qkv)), q{std::vector<T>(eq)}, k{std::vector<T>(ekv)}, v{std::vector<T>(ekv)};
    Guarded<T> back(store_as<T>(std::vector<float>(n, NAN)));
    launch_attention_permute<T>(ctx, q.data(), k.data(), v.data(), gqkv.data(), b, t, nh, nkv, hd);
    launch_attention_permute_backward<T>(ctx, back.data(), q.data(), k.data(), v.data(), b, t, nh, nkv, hd);
    return Outputs{checked(q, "q"), checked(k, "k"), checked(v, "v"), checked(back, "round trip")};
  });
  EXPECT_TRUE(bitwise_equal({out[0], out[1], out[2]},
                            {heads(nh, 0), heads(nkv, size_t(nh) * hd), heads(nkv, size_t(nh + nkv) * hd)}));
  EXPECT_TRUE(bitwise_equal({out[3]}, {qkv})) << "permute_backward(permute(qkv)) = qkv";
}

TEST(KernelsAttentionGqa, PermutesPlaceEveryHead) {
  check_gqa_permutes<float>(2, 5, 4, 2, 8);
  check_gqa_permutes<float>(1, 3, 6, 1, 12);
  check_gqa_permutes<bf16>(2, 5, 4, 2, 8);
}

// ---- grouped-query flash attention -------------------------------------------------------------

struct GqaShape {
  int b, t, nh, nkv, hd;
  int group() const { return nh / nkv; }
  size_t rows() const { return size_t(b) * t; }
  size_t width() const { return size_t(nh + 2 * nkv) * hd; }
  size_t c() const { return size_t(nh) * hd; }
  size_t q(int bi, int i, int h, int d) const { return (size_t(bi) * t + i) * width() + size_t(h) * hd + d; }
  // The key and value of query head h: its group's.
  size_t k(int bi, int j, int h, int d) const {
    return (size_t(bi) * t + j) * width() + size_t(nh + h / group()) * hd + d;
  }
  size_t v(int bi, int j, int h, int d) const { return k(bi, j, h, d) + size_t(nkv) * hd; }
  size_t o(int bi, int i, int h, int d) const { return (size_t(bi) * t + i) * c() + size_t(h) * hd + d; }
  size_t stat(int bi, int h, int i) const { return (size_t(bi) * nh + h) * t + i; }
};

template <typename T>
Outputs run_gqa_flash(const GqaShape& s, const std::vector<float>& qkv, const std::vector<float>& dout) {
  return run_both_orders([&](const LaunchContext& ctx) {
    Guarded<T> gqkv(store_as<T>(qkv)), gdout(store_as<T>(dout));
    Guarded<T> out{std::vector<T>(s.rows() * s.c())}, dqkv(store_as<T>(std::vector<float>(qkv.size(), NAN)));
    Guarded<float> lse{std::vector<float>(size_t(s.b) * s.nh * s.t)}, delta{std::vector<float>(lse.size())};
    launch_flash_attention_forward<T>(ctx, out.data(), lse.data(), gqkv.data(), s.b, s.t, s.nh, s.nkv, s.hd);
    launch_flash_attention_backward_input<T>(ctx, dqkv.data(), delta.data(), gdout.data(), gqkv.data(), out.data(),
                                             lse.data(), s.b, s.t, s.nh, s.nkv, s.hd);
    return Outputs{checked(out, "out"), checked(lse, "lse"), checked(dqkv, "dqkv"), checked(delta, "delta")};
  });
}

// Multi-head qkv[B,T,3·NH·HD] with every key/value head repeated for its group's query heads
// (Hugging Face's repeat_kv): the same attention, computed by the multi-head kernels.
std::vector<float> repeat_kv(const GqaShape& s, const std::vector<float>& qkv) {
  std::vector<float> mha(s.rows() * 3 * s.c());
  for (int bi = 0; bi < s.b; ++bi)
    for (int i = 0; i < s.t; ++i)
      for (int h = 0; h < s.nh; ++h)
        for (int d = 0; d < s.hd; ++d) {
          const size_t row = (size_t(bi) * s.t + i) * 3 * s.c() + size_t(h) * s.hd + d;
          mha[row] = qkv[s.q(bi, i, h, d)];
          mha[row + s.c()] = qkv[s.k(bi, i, h, d)];
          mha[row + 2 * s.c()] = qkv[s.v(bi, i, h, d)];
        }
  return mha;
}

std::vector<float> inputs(size_t n, uint64_t seed) { return random_floats(n, seed, -1.5f, 1.5f); }

void check_gqa_flash_fp32(const GqaShape& s) {
  SCOPED_TRACE(::testing::Message() << "fp32 b=" << s.b << " t=" << s.t << " nh=" << s.nh << " nkv=" << s.nkv
                                    << " hd=" << s.hd);
  std::vector<float> qkv = inputs(s.rows() * s.width(), 61), dout = inputs(s.rows() * s.c(), 62);
  Outputs got = run_gqa_flash<float>(s, qkv, dout);
  AttentionReference ref = attention_forward_reference(s, qkv);
  attention_backward_reference(ref, s, qkv, dout, got[0], got[1]);
  EXPECT_TRUE(normwise(got[0], ref.out)) << "out vs double";
  EXPECT_TRUE(normwise(got[1], ref.lse)) << "lse vs double";
  EXPECT_TRUE(normwise(got[2], ref.dqkv)) << "dqkv vs double";
  // The project's reference: the cpu backend's naive grouped-query attention.
  auto cpu = make_cpu_ops();
  std::vector<float> out(s.rows() * s.c()), probs(size_t(s.b) * s.nh * s.t * s.t), dqkv(qkv.size());
  cpu->gqa_attention_forward(out.data(), probs.data(), qkv.data(), s.b, s.t, s.nh, s.nkv, s.hd);
  cpu->gqa_attention_backward_input(dqkv.data(), dout.data(), qkv.data(), probs.data(), s.b, s.t, s.nh, s.nkv, s.hd);
  EXPECT_TRUE(normwise(got[0], std::vector<double>(out.begin(), out.end()))) << "out vs cpu naive";
  EXPECT_TRUE(normwise(got[2], std::vector<double>(dqkv.begin(), dqkv.end()))) << "dqkv vs cpu naive";
}

void check_gqa_flash_bf16(const GqaShape& s) {
  SCOPED_TRACE(::testing::Message() << "bf16 b=" << s.b << " t=" << s.t << " nh=" << s.nh << " nkv=" << s.nkv
                                    << " hd=" << s.hd);
  std::vector<float> qkv = representable<bf16>(inputs(s.rows() * s.width(), 71));
  std::vector<float> dout = representable<bf16>(inputs(s.rows() * s.c(), 72));
  Outputs got = run_gqa_flash<bf16>(s, qkv, dout);
  AttentionReference ref = attention_forward_reference(s, qkv);
  EXPECT_TRUE(within_bf16(got[0], ref.out, ref.abs_out)) << "out vs double";
  EXPECT_TRUE(normwise(got[1], ref.lse)) << "lse vs double";
  attention_backward_reference(ref, s, qkv, dout, got[0], got[1]);
  EXPECT_TRUE(within_bf16(got[2], ref.dqkv, ref.abs_dqkv)) << "dqkv vs double";
  // A query head reads its group's key/value rows and nothing else: out and lse equal the
  // multi-head kernels' on the repeated heads bit for bit.
  GqaShape mha{s.b, s.t, s.nh, s.nh, s.hd};
  Outputs repeated = run_gqa_flash<bf16>(mha, repeat_kv(s, qkv), dout);
  EXPECT_TRUE(bitwise_equal({got[0], got[1]}, {repeated[0], repeated[1]})) << "out, lse vs multi-head on repeat_kv";
}

const GqaShape kGqaShapes[] = {
    {2, 17, 4, 2, 32},  // one partial tile, groups of 2
    {1, 70, 3, 1, 64},  // multi-query: one key/value head for 3 query heads; full + partial tiles
    {1, 9, 4, 4, 32},   // NKV = NH: multi-head through the grouped-query launcher
    {1, 100, 4, 2, 128},  // head dim 128 (32-key tiles): each dK/dV block loops over 2 heads × 4 tiles
};

TEST(KernelsFlashAttentionGqa, Fp32MatchesReferenceAndCpuNaive) {
  for (const GqaShape& s : kGqaShapes) check_gqa_flash_fp32(s);
}

TEST(KernelsFlashAttentionGqa, Bf16WithinRoundingBound) {
  for (const GqaShape& s : kGqaShapes) check_gqa_flash_bf16(s);
}

TEST(KernelsFlashAttentionGqa, KeyValueHeadsThatDoNotDivideFailWithOneLine) {
  std::vector<float> buf(4 * 5 * 32, 0.0f), lse(3);
  emu::Stream stream;
  try {
    launch_flash_attention_forward<float>(LaunchContext{&stream}, buf.data(), lse.data(), buf.data(), 1, 1, 3, 2, 32);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "flash attention: 2 key/value heads do not divide 3 query heads evenly");
  }
  EXPECT_EQ(stream.launches, 0);
}

}  // namespace
