// cpu backend, forward ops: each op against a naive double-precision implementation on
// odd shapes (and on shapes large enough to take the parallel and blocked paths), plus
// memory, dtypes and determinism. AdamW: tests/test_cpu_ops_adamw.cpp; GELU and the other
// elementwise ops: tests/test_cpu_ops_elementwise.cpp.
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/buffer.h"
#include "backend/ops.h"
#include "core/error.h"
#include "support/cpu_ops_util.h"
#include "support/error_of.h"

namespace pptrain {
namespace {

using testing::error_of;
using testing::normalized_error;
using testing::random_floats;
using testing::random_ints;

// A float forward against its double reference: a few dozen roundings (a length-C sum, exp)
// of u = 2^-24 each, relative to the tensor's scale.
constexpr double kForwardTolerance = 1e-5;

class CpuOpsTest : public ::testing::Test {
 protected:
  std::unique_ptr<Ops> ops = make_cpu_ops();
};

// ---- naive references (double) -------------------------------------------------------

std::vector<double> ref_linear(const std::vector<float>& x, const std::vector<float>& w,
                               const float* b, int n, int in, int out) {
  std::vector<double> y(size_t(n) * out);
  for (int r = 0; r < n; ++r)
    for (int o = 0; o < out; ++o) {
      double s = b ? b[o] : 0.0;
      for (int k = 0; k < in; ++k) s += double(x[r * in + k]) * w[o * in + k];
      y[r * out + o] = s;
    }
  return y;
}

struct RefLayernorm {
  std::vector<double> y, mean, rstd;
};
RefLayernorm ref_layernorm(const std::vector<float>& x, const std::vector<float>& g,
                           const std::vector<float>& b, int n, int c) {
  RefLayernorm r{std::vector<double>(size_t(n) * c), std::vector<double>(n),
                 std::vector<double>(n)};
  for (int row = 0; row < n; ++row) {
    double m = 0, v = 0;
    for (int i = 0; i < c; ++i) m += x[row * c + i];
    m /= c;
    for (int i = 0; i < c; ++i) v += (x[row * c + i] - m) * (x[row * c + i] - m);
    v /= c;
    double s = 1.0 / std::sqrt(v + 1e-5);
    for (int i = 0; i < c; ++i) r.y[row * c + i] = (x[row * c + i] - m) * s * g[i] + b[i];
    r.mean[row] = m;
    r.rstd[row] = s;
  }
  return r;
}

// out[B,T,C] and probs[B,NH,T,T] of causal attention, straight from the definition.
void ref_attention(const std::vector<float>& qkv, int b, int t, int nh, int hd,
                   std::vector<double>& out, std::vector<double>& probs) {
  const int c = nh * hd;
  out.assign(size_t(b) * t * c, 0.0);
  probs.assign(size_t(b) * nh * t * t, 0.0);
  for (int bb = 0; bb < b; ++bb)
    for (int h = 0; h < nh; ++h)
      for (int i = 0; i < t; ++i) {
        const float* q = &qkv[(size_t(bb) * t + i) * 3 * c + h * hd];
        std::vector<double> s(i + 1);
        double mx = -INFINITY;
        for (int j = 0; j <= i; ++j) {
          const float* k = &qkv[(size_t(bb) * t + j) * 3 * c + c + h * hd];
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += double(q[d]) * k[d];
          s[j] = dot / std::sqrt(double(hd));
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (int j = 0; j <= i; ++j) z += std::exp(s[j] - mx);
        double* p = &probs[((size_t(bb) * nh + h) * t + i) * t];
        for (int j = 0; j <= i; ++j) p[j] = std::exp(s[j] - mx) / z;
        for (int d = 0; d < hd; ++d) {
          double acc = 0;
          for (int j = 0; j <= i; ++j)
            acc += p[j] * qkv[(size_t(bb) * t + j) * 3 * c + 2 * c + h * hd + d];
          out[(size_t(bb) * t + i) * c + h * hd + d] = acc;
        }
      }
}

// ---- memory ---------------------------------------------------------------------------

TEST_F(CpuOpsTest, AllocateIsAlignedAndZeroed) {
  EXPECT_EQ(ops->name(), "cpu");
  for (size_t bytes : {size_t(1), size_t(13), size_t(64), size_t(4096 + 4), size_t(1) << 20}) {
    auto* p = static_cast<unsigned char*>(ops->allocate(bytes));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    EXPECT_TRUE(std::all_of(p, p + bytes, [](unsigned char c) { return c == 0; })) << bytes;
    ops->release(p);
  }
}

TEST_F(CpuOpsTest, ReleasedBlocksAreReusedZeroedAndCountedAsReserved) {
  // A released block is kept and handed out again for the same rounded size (no fresh
  // pages to fault in on the next microbatch), zero-filled again; in_use and peak count
  // only what is allocated, reserved the cached blocks too.
  const size_t bytes = (size_t(3) << 20) + 5, rounded = (bytes + 63) / 64 * 64;
  const MemoryStats before = ops->memory_stats();
  auto* a = static_cast<unsigned char*>(ops->allocate(bytes));
  std::fill(a, a + bytes, 0xAB);
  ops->release(a);
  const MemoryStats released = ops->memory_stats();
  EXPECT_EQ(released.in_use, before.in_use);
  EXPECT_EQ(released.reserved, before.reserved + rounded) << "the released block is kept";
  auto* b = static_cast<unsigned char*>(ops->allocate(bytes - 3));  // same rounded size
  EXPECT_EQ(b, a) << "the cached block is handed out again";
  EXPECT_TRUE(std::all_of(b, b + bytes - 3, [](unsigned char c) { return c == 0; })) << "not zero-filled again";
  EXPECT_EQ(ops->memory_stats().in_use, before.in_use + bytes - 3);
  EXPECT_EQ(ops->memory_stats().reserved, before.reserved + rounded);
  auto* c = static_cast<unsigned char*>(ops->allocate(bytes + 64));  // another size: a new block
  EXPECT_NE(c, b);
  ops->release(b);
  ops->release(c);
}

TEST_F(CpuOpsTest, CopiesAndZero) {
  auto src = random_floats(1000, 1);
  Buffer<float> a(*ops, 1000), b(*ops, 1000);
  a.upload(src.data());
  ops->copy(b.data(), a.data(), 1000 * sizeof(float));
  EXPECT_EQ(b.to_host(), src);
  ops->zero(a.data(), 500 * sizeof(float));
  auto host = a.to_host();
  EXPECT_TRUE(std::all_of(host.begin(), host.begin() + 500, [](float v) { return v == 0.0f; }));
  EXPECT_TRUE(std::equal(host.begin() + 500, host.end(), src.begin() + 500));
  ops->synchronize();
}

// Past kParallelMinElements floats the threads zero 64 KiB chunks from the first 64-byte
// boundary on and memset the edges; past a quarter of the last level cache the chunks take
// streaming stores (memory.cpp). Each size starts 3 bytes past a boundary and ends off one,
// with guard bytes on both sides: every byte inside zero, every guard untouched.
TEST_F(CpuOpsTest, ZeroReachesEveryByteOfMisalignedBuffersAndNoOther) {
  // The last level cache as memory.cpp reads it: its quarter is where streaming starts.
  long cache = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (cache <= 0) cache = sysconf(_SC_LEVEL2_CACHE_SIZE);
  // 2^17 bytes is kParallelMinElements (2^15) floats, the first size the threads share; the
  // sizes past it leave a partial 64 KiB chunk (4099, 77 and 61 bytes over whole ones) for the
  // edges' memset. The streaming size is skipped where a quarter of the cache would take over 1 GiB
  // of this test's memory (no machine it has run on: 32 to 260 MiB).
  std::vector<size_t> sizes = {1, 100, (size_t(1) << 17) - 1, (size_t(1) << 17) + 4099, (size_t(3) << 20) + 77};
  if (cache > 0 && cache <= (long(1) << 32)) sizes.push_back(size_t(cache) / 4 + 65536 * 3 + 61);  // streaming
  // 3 bytes past a 64-byte boundary (none of the vector stores is aligned at the start); the
  // guards are two cache lines, more than any store can reach past the edges.
  constexpr size_t kGuard = 128, kOffset = 3;
  for (size_t bytes : sizes) {
    std::vector<unsigned char> buf(bytes + 2 * kGuard + 64, 0xAB);
    unsigned char* base = buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64;
    unsigned char* p = base + kGuard + kOffset;
    ops->zero(p, bytes);
    EXPECT_EQ(std::find_if(p, p + bytes, [](unsigned char c) { return c != 0; }), p + bytes)
        << bytes << " bytes: not all zero";
    EXPECT_TRUE(std::all_of(buf.data(), p, [](unsigned char c) { return c == 0xAB; })) << bytes << ": before";
    EXPECT_TRUE(std::all_of(p + bytes, buf.data() + buf.size(), [](unsigned char c) { return c == 0xAB; }))
        << bytes << ": after";
  }
}

// ---- linear ---------------------------------------------------------------------------

TEST_F(CpuOpsTest, LinearForwardMatchesReference) {
  // (7 x 13) · (11 x 13)ᵀ, and a shape that takes the parallel bias path
  for (auto [n, in, out] : {std::tuple{7, 13, 11}, std::tuple{300, 96, 130}}) {
    auto x = random_floats(size_t(n) * in, 2), w = random_floats(size_t(out) * in, 3),
         b = random_floats(out, 4);
    std::vector<float> y(size_t(n) * out, NAN);  // beta = 0 must not read y
    ops->linear_forward(y.data(), x.data(), w.data(), b.data(), n, in, out);
    EXPECT_LT(normalized_error(y, ref_linear(x, w, b.data(), n, in, out)), kForwardTolerance);
    std::fill(y.begin(), y.end(), NAN);
    ops->linear_forward(y.data(), x.data(), w.data(), nullptr, n, in, out);
    EXPECT_LT(normalized_error(y, ref_linear(x, w, nullptr, n, in, out)), kForwardTolerance);
  }
}

// ---- layernorm ------------------------------------------------------------------------

TEST_F(CpuOpsTest, LayernormForwardMatchesReference) {
  for (auto [n, c] : {std::pair{7, 13}, std::pair{64, 768}}) {
    // An offset mean tests the two-pass variance.
    auto x = random_floats(size_t(n) * c, 5, 2.0f, 4.0f), g = random_floats(c, 6),
         b = random_floats(c, 7);
    std::vector<float> y(size_t(n) * c), mean(n), rstd(n);
    ops->layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), n, c);
    auto ref = ref_layernorm(x, g, b, n, c);
    EXPECT_LT(normalized_error(y, ref.y), kForwardTolerance);
    EXPECT_LT(normalized_error(mean, ref.mean), kForwardTolerance);
    EXPECT_LT(normalized_error(rstd, ref.rstd), kForwardTolerance);
  }
}

// ---- dtypes: the cpu backend is fp32 only ---------------------------------------------

TEST_F(CpuOpsTest, RejectsABf16ViewWithOneLine) {
  std::vector<bfloat16> h(8);
  std::vector<float> f(8), dw(8);
  EXPECT_EQ(error_of([&] { ops->gelu_forward(h.data(), h.data(), h.size()); }),
            "backend 'cpu' has no bf16 gelu_forward (training.precision: bf16 needs device: cuda)");
  // One bf16 view among fp32 ones, and a bf16 view beside fp32 gradients.
  EXPECT_EQ(error_of([&] { ops->add(f.data(), h.data(), f.data(), f.size()); }),
            "backend 'cpu' has no bf16 add (training.precision: bf16 needs device: cuda)");
  EXPECT_EQ(error_of([&] { ops->linear_backward_weight(dw.data(), nullptr, h.data(), h.data(), 2, 2, 2); }),
            "backend 'cpu' has no bf16 linear_backward_weight (training.precision: bf16 needs device: cuda)");
  EXPECT_EQ(error_of([&] { ops->cast(f.data(), h.data(), f.size()); }),
            "backend 'cpu' has no bf16 cast (training.precision: bf16 needs device: cuda)");
}

TEST_F(CpuOpsTest, AnAbsentViewMatchesAnyDtypeAndCastIsACopy) {
  const int n = 3, in = 4, out = 5;
  auto x = random_floats(size_t(n) * in, 40), w = random_floats(size_t(out) * in, 41);
  std::vector<float> y(size_t(n) * out), y_null(y.size());
  ops->linear_forward(y.data(), x.data(), w.data(), nullptr, n, in, out);
  ops->linear_forward(y_null.data(), x.data(), w.data(), static_cast<const bfloat16*>(nullptr), n, in, out);
  EXPECT_EQ(y, y_null);
  std::vector<float> copy(x.size());
  ops->cast(copy.data(), x.data(), x.size());
  EXPECT_EQ(copy, x);
}

// ---- embedding ------------------------------------------------------------------------

TEST_F(CpuOpsTest, EmbeddingForwardOnAShard) {
  // Shard [11, 22) of a 30-token vocabulary; tokens outside the shard give only wpe.
  const int n = 14, t = 7, c = 13, v0 = 11, vl = 11;
  auto tokens = random_ints(n, 13, 0, 29);
  tokens[0] = v0;
  tokens[1] = v0 + vl - 1;
  tokens[2] = v0 - 1;
  tokens[3] = v0 + vl;
  auto wte = random_floats(size_t(vl) * c, 14), wpe = random_floats(size_t(t) * c, 15);
  for (bool with_wpe : {true, false}) {
    std::vector<float> y(size_t(n) * c, NAN);
    ops->embedding_forward(y.data(), tokens.data(), wte.data(), with_wpe ? wpe.data() : nullptr, n,
                           t, c, v0, vl);
    std::vector<double> ref(size_t(n) * c, 0.0);
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < c; ++i) {
        bool inside = tokens[r] >= v0 && tokens[r] < v0 + vl;
        ref[r * c + i] = (inside ? wte[(tokens[r] - v0) * c + i] : 0.0) +
                         (with_wpe ? wpe[(r % t) * c + i] : 0.0);
      }
    EXPECT_LT(normalized_error(y, ref), kForwardTolerance) << with_wpe;
  }
}

// ---- attention ------------------------------------------------------------------------

struct AttentionShape {
  int b, t, nh, hd;
};

TEST_F(CpuOpsTest, AttentionForwardMatchesReference) {
  // T=5 is one block; T=150 spans three 64-row blocks, the last one partial.
  for (auto s : {AttentionShape{2, 5, 3, 4}, AttentionShape{2, 150, 3, 8}}) {
    const int c = s.nh * s.hd;
    auto qkv = random_floats(size_t(s.b) * s.t * 3 * c, 16, -2.0f, 2.0f);
    std::vector<float> out(size_t(s.b) * s.t * c, NAN), probs(size_t(s.b) * s.nh * s.t * s.t, NAN);
    ops->attention_forward(out.data(), probs.data(), qkv.data(), s.b, s.t, s.nh, s.hd);
    std::vector<double> ref_out, ref_probs;
    ref_attention(qkv, s.b, s.t, s.nh, s.hd, ref_out, ref_probs);
    EXPECT_LT(normalized_error(out, ref_out), kForwardTolerance) << s.t;
    EXPECT_LT(normalized_error(probs, ref_probs), kForwardTolerance) << s.t;
    for (int bh = 0; bh < s.b * s.nh; ++bh)
      for (int i = 0; i < s.t; ++i)
        for (int j = i + 1; j < s.t; ++j)
          ASSERT_EQ(probs[(size_t(bh) * s.t + i) * s.t + j], 0.0f) << "above the diagonal";
  }
}

TEST_F(CpuOpsTest, AttentionProbabilitiesAreTheSameStreamedOrCopied) {
  // The forward writes each strip of P with cache-bypassing stores where the strip is a whole
  // number of vectors at an aligned address (T a multiple of 16 and P on a 64-byte boundary)
  // and with a plain copy elsewhere: P one float off the boundary must give the same bits,
  // and both the reference's values (T = 128: the pp benchmarks' length; 48: three vectors).
  for (auto s : {AttentionShape{2, 128, 2, 8}, AttentionShape{1, 48, 3, 4}}) {
    const int c = s.nh * s.hd;
    const size_t n_probs = size_t(s.b) * s.nh * s.t * s.t;
    auto qkv = random_floats(size_t(s.b) * s.t * 3 * c, 23, -2.0f, 2.0f);
    std::vector<float> storage(n_probs + 32, NAN), out(size_t(s.b) * s.t * c, NAN), out_off(out.size(), NAN);
    const size_t skip = (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64 / sizeof(float);
    float* aligned = storage.data() + skip;  // float-aligned vectors start 4-byte aligned
    ASSERT_EQ(reinterpret_cast<uintptr_t>(aligned) % 64, 0u);
    ops->attention_forward(out.data(), aligned, qkv.data(), s.b, s.t, s.nh, s.hd);
    const std::vector<float> streamed(aligned, aligned + n_probs);
    std::fill(storage.begin(), storage.end(), NAN);
    ops->attention_forward(out_off.data(), aligned + 1, qkv.data(), s.b, s.t, s.nh, s.hd);
    const std::vector<float> copied(aligned + 1, aligned + 1 + n_probs);
    ASSERT_EQ(std::memcmp(streamed.data(), copied.data(), n_probs * sizeof(float)), 0) << s.t;
    ASSERT_EQ(std::memcmp(out.data(), out_off.data(), out.size() * sizeof(float)), 0) << s.t;
    std::vector<double> ref_out, ref_probs;
    ref_attention(qkv, s.b, s.t, s.nh, s.hd, ref_out, ref_probs);
    EXPECT_LT(normalized_error(streamed, ref_probs), kForwardTolerance) << s.t;
    EXPECT_LT(normalized_error(out, ref_out), kForwardTolerance) << s.t;
  }
}

TEST_F(CpuOpsTest, AttentionIsCausal) {
  // Changing token 3's key and value must leave the outputs of tokens 0..2 unchanged.
  const int b = 2, t = 6, nh = 3, hd = 4, c = nh * hd;
  auto qkv = random_floats(size_t(b) * t * 3 * c, 17);
  std::vector<float> out(size_t(b) * t * c), probs(size_t(b) * nh * t * t);
  ops->attention_forward(out.data(), probs.data(), qkv.data(), b, t, nh, hd);
  auto changed = qkv;
  for (int bb = 0; bb < b; ++bb)
    for (int i = c; i < 3 * c; ++i) changed[(size_t(bb) * t + 3) * 3 * c + i] += 0.5f;
  std::vector<float> out2(out.size()), probs2(probs.size());
  ops->attention_forward(out2.data(), probs2.data(), changed.data(), b, t, nh, hd);
  for (int bb = 0; bb < b; ++bb)
    for (int i = 0; i < t; ++i)
      for (int k = 0; k < c; ++k) {
        size_t at = (size_t(bb) * t + i) * c + k;
        if (i < 3)
          ASSERT_EQ(out[at], out2[at]) << "token " << i << " saw a future key/value";
        else
          ASSERT_NE(out[at], out2[at]) << "token " << i << " ignored token 3";
      }
}

// ---- cross-entropy --------------------------------------------------------------------

TEST_F(CpuOpsTest, CrossEntropyHelpersMatchReference) {
  // Second shard of a 20-token vocabulary padded to 22: v0=11, VL=11, valid=9.
  for (auto [n, vl, valid, v0] : {std::tuple{7, 11, 9, 11}, std::tuple{64, 1000, 990, 3000}}) {
    auto logits = random_floats(size_t(n) * vl, 18, -4.0f, 4.0f);
    for (int r = 0; r < n; ++r)
      for (int j = valid; j < vl; ++j) logits[r * vl + j] = 50.0f;  // padding must be ignored
    auto targets = random_ints(n, 19, v0 - 3, v0 + valid + 2);
    targets[0] = v0;
    targets[1] = v0 + valid - 1;
    targets[2] = v0 - 1;  // in another shard
    std::vector<float> rmax(n), sumexp(n), target_logit(n, NAN);
    ops->ce_row_max(rmax.data(), logits.data(), n, vl, valid);
    ops->ce_sumexp_target(sumexp.data(), target_logit.data(), logits.data(), rmax.data(),
                          targets.data(), n, vl, valid, v0);
    double loss = NAN;
    ops->ce_loss_sum(&loss, rmax.data(), sumexp.data(), target_logit.data(), n);
    std::vector<double> ref_max(n), ref_sum(n), ref_target(n);
    double ref_loss = 0;
    for (int r = 0; r < n; ++r) {
      double m = -INFINITY, z = 0;
      for (int j = 0; j < valid; ++j) m = std::max(m, double(logits[r * vl + j]));
      for (int j = 0; j < valid; ++j) z += std::exp(logits[r * vl + j] - m);
      bool inside = targets[r] >= v0 && targets[r] < v0 + valid;
      ref_max[r] = m;
      ref_sum[r] = z;
      ref_target[r] = inside ? logits[r * vl + targets[r] - v0] : 0.0;
      ref_loss += std::log(z) + m - ref_target[r];
    }
    EXPECT_LT(normalized_error(rmax, ref_max), kForwardTolerance);
    EXPECT_LT(normalized_error(sumexp, ref_sum), kForwardTolerance);
    EXPECT_LT(normalized_error(target_logit, ref_target), kForwardTolerance);
    EXPECT_NEAR(loss, ref_loss, kForwardTolerance * std::fabs(ref_loss));

    const float scale = 0.25f;
    std::vector<float> dlogits(logits.size(), NAN);
    ops->ce_backward(dlogits.data(), logits.data(), rmax.data(), sumexp.data(), targets.data(), n,
                     vl, valid, v0, scale);
    std::vector<double> ref_d(logits.size(), 0.0);
    for (int r = 0; r < n; ++r)
      for (int j = 0; j < valid; ++j)
        ref_d[r * vl + j] = scale * (std::exp(logits[r * vl + j] - ref_max[r]) / ref_sum[r] -
                                     (targets[r] - v0 == j ? 1.0 : 0.0));
    EXPECT_LT(normalized_error(dlogits, ref_d), kForwardTolerance);
    for (int r = 0; r < n; ++r)
      for (int j = valid; j < vl; ++j) ASSERT_EQ(dlogits[r * vl + j], 0.0f) << "padding";
    // In place (dlogits aliases logits) gives the same bits.
    auto in_place = logits;
    ops->ce_backward(in_place.data(), in_place.data(), rmax.data(), sumexp.data(), targets.data(),
                     n, vl, valid, v0, scale);
    EXPECT_EQ(in_place, dlogits);
  }
}

// ---- reductions -----------------------------------------------------------------------

TEST_F(CpuOpsTest, SumSquares) {
  for (size_t n : {size_t(0), size_t(5), size_t(1000003)}) {
    auto x = random_floats(n, 23);
    double ref = 0;
    for (float v : x) ref += double(v) * v;
    EXPECT_NEAR(ops->sum_squares(x.data(), n), ref, 1e-12 * std::max(ref, 1.0)) << n;
  }
}

// ---- determinism ----------------------------------------------------------------------

TEST_F(CpuOpsTest, ReductionsAreBitIdenticalAcrossRunsAndThreadCounts) {
  // Repeated tokens make the embedding scatter-add collide; the channel split keeps the
  // per-element order fixed, so even a different thread count gives the same bits.
  const int n = 1024, t = 256, c = 96, vl = 50;
  auto tokens = random_ints(n, 24, 0, vl - 1);
  auto dy = random_floats(size_t(n) * c, 25);
  auto x = random_floats(size_t(1) << 20, 26);
  auto run = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<float> dwte(size_t(vl) * c), dwpe(size_t(t) * c);
    ops->embedding_backward_weight(dwte.data(), dwpe.data(), dy.data(), tokens.data(), n, t, c, 0,
                                   vl);
    double sq = ops->sum_squares(x.data(), x.size());
    omp_set_num_threads(saved);
    return std::tuple{dwte, dwpe, sq};
  };
  auto first = run(2), second = run(2), single = run(1);
  EXPECT_TRUE(first == second);
  EXPECT_TRUE(first == single);
}

TEST_F(CpuOpsTest, AttentionIsBitIdenticalRunToRun) {
  const int b = 4, t = 130, nh = 4, hd = 16, c = nh * hd;
  auto qkv = random_floats(size_t(b) * t * 3 * c, 27);
  auto dout = random_floats(size_t(b) * t * c, 28);
  auto run = [&] {
    std::vector<float> out(size_t(b) * t * c), probs(size_t(b) * nh * t * t), dqkv(qkv.size());
    ops->attention_forward(out.data(), probs.data(), qkv.data(), b, t, nh, hd);
    ops->attention_backward_input(dqkv.data(), dout.data(), qkv.data(), probs.data(), b, t, nh, hd);
    return std::tuple{out, probs, dqkv};
  };
  auto first = run(), second = run();
  EXPECT_TRUE(first == second);
}

TEST_F(CpuOpsTest, AttentionIsBitIdenticalOnAnyThreadCount) {
  // Grouped-query attention (4 query heads on 2 key/value heads), plain and flash, forward and
  // backward. 1 and 3 threads take (batch, head) pairs each (8 query pairs, 4 key/value
  // pairs, T² enough work); 16 threads are more than the pairs, so each pair's row and column
  // strips are spread over them instead. T = 100 makes two row blocks of the flash backward.
  const int b = 2, t = 100, nh = 4, nkv = 2, hd = 8;
  const size_t qkv_size = size_t(b) * t * (nh + 2 * nkv) * hd, out_size = size_t(b) * t * nh * hd;
  auto qkv = random_floats(qkv_size, 29, -1.5f, 1.5f);
  auto dout = random_floats(out_size, 30);
  auto run = [&](int threads, bool flash) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<float> out(out_size, NAN), probs(size_t(b) * nh * t * t, NAN), lse(size_t(b) * nh * t, NAN),
        delta(lse.size(), NAN), dqkv(qkv_size, NAN);
    if (flash) {
      ops->gqa_flash_attention_forward(out.data(), lse.data(), qkv.data(), b, t, nh, nkv, hd);
      ops->gqa_flash_attention_backward_input(dqkv.data(), delta.data(), dout.data(), qkv.data(), out.data(),
                                              lse.data(), b, t, nh, nkv, hd);
    } else {
      ops->gqa_attention_forward(out.data(), probs.data(), qkv.data(), b, t, nh, nkv, hd);
      ops->gqa_attention_backward_input(dqkv.data(), dout.data(), qkv.data(), probs.data(), b, t, nh, nkv, hd);
    }
    omp_set_num_threads(saved);
    return std::tuple{out, flash ? lse : probs, dqkv};  // what the path wrote
  };
  for (bool flash : {false, true}) {
    const auto one = run(1, flash);
    for (float g : std::get<2>(one)) ASSERT_FALSE(std::isnan(g)) << "dqkv not fully written, flash " << flash;
    // Bitwise: NaN-free, so == on the vectors is the comparison wanted.
    EXPECT_TRUE(run(3, flash) == one) << "flash " << flash;
    EXPECT_TRUE(run(16, flash) == one) << "flash " << flash;
  }
}

}  // namespace
}  // namespace pptrain
