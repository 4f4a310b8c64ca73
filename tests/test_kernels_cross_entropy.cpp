// Cross-entropy kernels under the SIMT emulator vs. the cpu backend: each split call on a
// vocabulary shard with padding columns and targets inside and outside the shard; the fused
// tp = 1 kernel; and the vocabulary-parallel protocol over two shards (host all-reduces
// between the calls) against the cpu ops on the unsharded logits. fp32 and bf16, both
// fiber orders.
#include "support/kernel_test.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "backend/ops.h"
#include "cross_entropy.cuh"

using namespace pptrain;
using namespace pptrain::kernels;
using namespace pptrain::kernels::testing;

namespace {

using Outputs = std::vector<std::vector<float>>;

// logits[N,VL] with a large offset on one row (the max subtraction must keep exp finite)
// and junk larger than every real logit in the padding columns [valid, VL), which must not
// enter any max, sum or gradient.
std::vector<float> make_logits(int n, int vl, int valid, uint64_t seed) {
  std::vector<float> logits = random_floats(size_t(n) * vl, seed, -5.0f, 5.0f);
  for (int j = 0; j < vl; ++j) logits[size_t(n / 2) * vl + j] += 60.0f;
  for (int r = 0; r < n; ++r)
    for (int j = valid; j < vl; ++j) logits[size_t(r) * vl + j] = 80.0f;
  return logits;
}

struct CpuCe {
  std::vector<float> rmax, sumexp, target_logit, dlogits;
  double loss;
};
CpuCe cpu_ce(const std::vector<float>& logits, const std::vector<int32_t>& targets, int n, int vl,
             int valid, int v0, float scale) {
  auto cpu = make_cpu_ops();
  CpuCe r{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n),
          std::vector<float>(size_t(n) * vl), 0.0};
  cpu->ce_row_max(r.rmax.data(), logits.data(), n, vl, valid);
  cpu->ce_sumexp_target(r.sumexp.data(), r.target_logit.data(), logits.data(), r.rmax.data(),
                        targets.data(), n, vl, valid, v0);
  cpu->ce_loss_sum(&r.loss, r.rmax.data(), r.sumexp.data(), r.target_logit.data(), n);
  cpu->ce_backward(r.dlogits.data(), logits.data(), r.rmax.data(), r.sumexp.data(), targets.data(),
                   n, vl, valid, v0, scale);
  return r;
}

template <typename T>
void check_split_calls(int n, int vl, int valid, int v0, int vocab) {
  SCOPED_TRACE(::testing::Message() << "n=" << n << " vl=" << vl << " valid=" << valid << " v0=" << v0);
  std::vector<float> logits = representable<T>(make_logits(n, vl, valid, 61));
  std::vector<int32_t> targets = random_ints(n, 62, 0, vocab - 1);
  float scale = 1.0f / float(n);
  CpuCe ref = cpu_ce(logits, targets, n, vl, valid, v0, scale);
  std::vector<double> loss_on_cpu_stats(2);
  Outputs got = run_both_orders([&](const LaunchContext& ctx) {
    Guarded<T> glogits(store_as<T>(logits)), gd{std::vector<T>(size_t(n) * vl)};
    Guarded<int32_t> gtargets(targets);
    Guarded<float> rmax{std::vector<float>(n)}, sumexp{std::vector<float>(n)}, target{std::vector<float>(n)};
    Guarded<double> loss{std::vector<double>(1)}, loss_ref{std::vector<double>(1)};
    launch_ce_row_max<T>(ctx, rmax.data(), glogits.data(), n, vl, valid);
    launch_ce_sumexp_target<T>(ctx, sumexp.data(), target.data(), glogits.data(), rmax.data(),
                               gtargets.data(), n, vl, valid, v0);
    launch_ce_loss_sum(ctx, loss.data(), rmax.data(), sumexp.data(), target.data(), n);
    Guarded<float> cr(ref.rmax), cs(ref.sumexp), ct(ref.target_logit);
    launch_ce_loss_sum(ctx, loss_ref.data(), cr.data(), cs.data(), ct.data(), n);
    launch_ce_backward<T>(ctx, gd.data(), glogits.data(), rmax.data(), sumexp.data(),
                          gtargets.data(), n, vl, valid, v0, scale);
    launch_ce_backward<T>(ctx, glogits.data(), glogits.data(), rmax.data(), sumexp.data(),
                          gtargets.data(), n, vl, valid, v0, scale);  // in place
    EXPECT_TRUE(loss.guards_intact() && loss_ref.guards_intact());
    loss_on_cpu_stats = {loss.values()[0], loss_ref.values()[0]};
    return Outputs{checked(rmax, "rmax"), checked(sumexp, "sumexp"), checked(target, "target"),
                   checked(gd, "dlogits"), checked(glogits, "dlogits in place"),
                   {float(loss_on_cpu_stats[0])}};
  });
  EXPECT_TRUE(close(got[0], ref.rmax, false)) << "rmax";
  EXPECT_TRUE(close(got[1], ref.sumexp, false)) << "sumexp";
  EXPECT_TRUE(close(got[2], ref.target_logit, false)) << "target_logit";
  EXPECT_TRUE(close_as<T>(got[3], ref.dlogits)) << "dlogits";
  EXPECT_TRUE(bitwise_equal({got[4]}, {got[3]})) << "dlogits in place";
  EXPECT_NEAR(loss_on_cpu_stats[0], ref.loss, 1e-5 * std::fabs(ref.loss)) << "loss";
  EXPECT_NEAR(loss_on_cpu_stats[1], ref.loss, 1e-12 * std::fabs(ref.loss)) << "loss sum of cpu stats";
}

template <typename T>
void check_fused(int n, int vl, int valid) {
  SCOPED_TRACE(::testing::Message() << "n=" << n << " vl=" << vl << " valid=" << valid);
  std::vector<float> logits = representable<T>(make_logits(n, vl, valid, 71));
  std::vector<int32_t> targets = random_ints(n, 72, 0, valid - 1);
  float scale = 0.25f;
  CpuCe ref = cpu_ce(logits, targets, n, vl, valid, 0, scale);
  Outputs got = run_both_orders([&](const LaunchContext& ctx) {
    Guarded<T> glogits(store_as<T>(logits)), gd{std::vector<T>(size_t(n) * vl)};
    Guarded<int32_t> gtargets(targets);
    Guarded<float> rmax{std::vector<float>(n)}, sumexp{std::vector<float>(n)}, target{std::vector<float>(n)};
    launch_ce_fused<T>(ctx, gd.data(), rmax.data(), sumexp.data(), target.data(), glogits.data(),
                       gtargets.data(), n, vl, valid, scale);
    launch_ce_fused<T>(ctx, glogits.data(), rmax.data(), sumexp.data(), target.data(),
                       glogits.data(), gtargets.data(), n, vl, valid, scale);  // in place
    return Outputs{checked(rmax, "rmax"), checked(sumexp, "sumexp"), checked(target, "target"),
                   checked(gd, "dlogits"), checked(glogits, "dlogits in place")};
  });
  EXPECT_TRUE(close(got[0], ref.rmax, false)) << "rmax";
  EXPECT_TRUE(close(got[1], ref.sumexp, false)) << "sumexp";
  EXPECT_TRUE(close(got[2], ref.target_logit, false)) << "target_logit";
  EXPECT_TRUE(close_as<T>(got[3], ref.dlogits)) << "dlogits";
  EXPECT_TRUE(bitwise_equal({got[4]}, {got[3]})) << "dlogits in place";
}

}  // namespace

TEST(KernelsCrossEntropy, SplitCallsFp32) {
  check_split_calls<float>(11, 300, 290, 0, 290);      // tp = 1 with padding columns
  check_split_calls<float>(11, 300, 290, 250, 600);    // a shard; most targets elsewhere
  check_split_calls<float>(3, 1000, 1000, 0, 1000);    // several columns per thread
}

TEST(KernelsCrossEntropy, SplitCallsBf16) { check_split_calls<bf16>(11, 300, 290, 250, 600); }

// The fused kernel reads 16-byte packs where a row is a whole number of them (fp32: VL a
// multiple of 4; bf16: of 8), else single columns: both paths, with padding columns inside the
// last pack (valid not a multiple of the pack) and rows of several packs per thread (VL past
// 1024 threads x 4 packs x the pack).
TEST(KernelsCrossEntropy, FusedFp32) {
  check_fused<float>(11, 300, 290);   // packed
  check_fused<float>(4, 1000, 997);   // packed, the last pack partly padding
  check_fused<float>(3, 301, 299);    // single columns
  check_fused<float>(2, 20000, 19999);  // 5 packs per thread
}

TEST(KernelsCrossEntropy, FusedBf16) {
  check_fused<bf16>(11, 300, 290);    // single columns (300 is not a multiple of 8)
  check_fused<bf16>(5, 304, 301);     // packed, the last pack partly padding
  check_fused<bf16>(2, 40000, 39997);  // 5 packs per thread
}

// Two tp shards of a 580-token vocabulary padded to 600, with the all-reduces done on the
// host between the calls, equal the cpu ops on the unsharded [N, 580] logits.
TEST(KernelsCrossEntropy, VocabularyParallelEqualsUnsharded) {
  const int n = 9, vocab = 580, vl = 300;
  std::vector<float> full = make_logits(n, vocab, vocab, 81);
  std::vector<int32_t> targets = random_ints(n, 82, 0, vocab - 1);
  float scale = 1.0f / float(n);
  CpuCe ref = cpu_ce(full, targets, n, vocab, vocab, 0, scale);
  auto shard_logits = [&](int s) {
    std::vector<float> out(size_t(n) * vl, 123.0f);  // padding holds junk: must be ignored
    for (int r = 0; r < n; ++r)
      for (int j = 0; j < vl && s * vl + j < vocab; ++j) out[size_t(r) * vl + j] = full[size_t(r) * vocab + s * vl + j];
    return out;
  };
  double loss = 0;
  Outputs got = run_both_orders([&](const LaunchContext& ctx) {
    Guarded<int32_t> gtargets(targets);
    Guarded<float> logits[2] = {Guarded<float>(shard_logits(0)), Guarded<float>(shard_logits(1))};
    int valid[2] = {vl, vocab - vl};
    std::vector<float> rmax(n, -INFINITY), sumexp(n, 0.0f), target(n, 0.0f);
    for (int s = 0; s < 2; ++s) {
      Guarded<float> part{std::vector<float>(n)};
      launch_ce_row_max<float>(ctx, part.data(), logits[s].data(), n, vl, valid[s]);
      for (int r = 0; r < n; ++r) rmax[r] = std::max(rmax[r], part.values()[r]);  // all-reduce max
    }
    Guarded<float> grmax(rmax);
    for (int s = 0; s < 2; ++s) {
      Guarded<float> ps{std::vector<float>(n)}, pt{std::vector<float>(n)};
      launch_ce_sumexp_target<float>(ctx, ps.data(), pt.data(), logits[s].data(), grmax.data(),
                                     gtargets.data(), n, vl, valid[s], s * vl);
      for (int r = 0; r < n; ++r) sumexp[r] += ps.values()[r], target[r] += pt.values()[r];  // all-reduce sum
    }
    Guarded<float> gsumexp(sumexp), gtarget(target);
    Guarded<double> gloss{std::vector<double>(1)};
    launch_ce_loss_sum(ctx, gloss.data(), grmax.data(), gsumexp.data(), gtarget.data(), n);
    loss = gloss.values()[0];
    std::vector<float> dlogits(size_t(n) * vocab);
    for (int s = 0; s < 2; ++s) {
      launch_ce_backward<float>(ctx, logits[s].data(), logits[s].data(), grmax.data(), gsumexp.data(),
                                gtargets.data(), n, vl, valid[s], s * vl, scale);
      std::vector<float> d = checked(logits[s], "dlogits shard");
      for (int r = 0; r < n; ++r)
        for (int j = 0; j < vl; ++j) {
          if (j < valid[s]) dlogits[size_t(r) * vocab + s * vl + j] = d[size_t(r) * vl + j];
          else EXPECT_EQ(d[size_t(r) * vl + j], 0.0f) << "padding column gradient";
        }
    }
    return Outputs{dlogits};
  });
  EXPECT_NEAR(loss, ref.loss, 1e-5 * std::fabs(ref.loss));
  EXPECT_TRUE(close(got[0], ref.dlogits, false)) << "dlogits";
}
