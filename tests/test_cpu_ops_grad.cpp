// cpu backend, backward ops: every dgrad and wgrad against central finite differences
// of L = Σ r ∘ y (so dL/dy = r), the accumulate rules of ops.h, the vocabulary-parallel
// cross-entropy split, and the parallel/blocked code paths against double references.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/ops.h"
#include "support/cpu_ops_util.h"

namespace pptrain {
namespace {

using testing::finite_difference;
using testing::normalized_error;
using testing::random_floats;
using testing::random_ints;
using testing::weighted_sum;

// Float ops differenced in double with step 1e-2: rounding noise ~1e-6 · |L| / h plus
// truncation ~h² · f''' keep the error near 1e-4 of the gradient's scale; a wrong term
// is off by O(1). See GradientCheckRejectsAWrongGradient.
constexpr double kStep = 1e-2;
constexpr double kGradTolerance = 1e-3;

class CpuOpsGradTest : public ::testing::Test {
 protected:
  std::unique_ptr<Ops> ops = make_cpu_ops();
};

// ---- linear ---------------------------------------------------------------------------

TEST_F(CpuOpsGradTest, Linear) {
  const int n = 7, in = 13, out = 11;
  auto x = random_floats(size_t(n) * in, 1), w = random_floats(size_t(out) * in, 2),
       b = random_floats(out, 3), r = random_floats(size_t(n) * out, 4);
  auto loss = [&] {
    std::vector<float> y(size_t(n) * out);
    ops->linear_forward(y.data(), x.data(), w.data(), b.data(), n, in, out);
    return weighted_sum(y, r);
  };
  std::vector<float> dx(x.size()), dw(w.size()), db(out);
  ops->linear_backward_input(dx.data(), r.data(), w.data(), n, in, out, false);
  ops->linear_backward_weight(dw.data(), db.data(), r.data(), x.data(), n, in, out);
  EXPECT_LT(normalized_error(dx, finite_difference(x, loss, kStep)), kGradTolerance);
  EXPECT_LT(normalized_error(dw, finite_difference(w, loss, kStep)), kGradTolerance);
  EXPECT_LT(normalized_error(db, finite_difference(b, loss, kStep)), kGradTolerance);
}

// ---- layernorm ------------------------------------------------------------------------

struct LayernormCase {
  int n = 7, c = 13;
  std::vector<float> x = random_floats(size_t(n) * c, 5, -2.0f, 3.0f), g = random_floats(c, 6),
                     b = random_floats(c, 7), r = random_floats(size_t(n) * c, 8);
  std::vector<float> mean = std::vector<float>(n), rstd = std::vector<float>(n);
  double loss(Ops& ops) {
    std::vector<float> y(size_t(n) * c);
    ops.layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), n, c);
    return weighted_sum(y, r);
  }
};

TEST_F(CpuOpsGradTest, Layernorm) {
  LayernormCase lc;
  lc.loss(*ops);  // mean, rstd at the unperturbed point
  std::vector<float> dx(lc.x.size()), dg(lc.c), db(lc.c);
  auto mean = lc.mean, rstd = lc.rstd;
  ops->layernorm_backward_input(dx.data(), lc.r.data(), lc.x.data(), mean.data(), rstd.data(),
                                lc.g.data(), lc.n, lc.c, nullptr);
  ops->layernorm_backward_weight(dg.data(), db.data(), lc.r.data(), lc.x.data(), mean.data(),
                                 rstd.data(), lc.n, lc.c);
  auto loss = [&] { return lc.loss(*ops); };
  EXPECT_LT(normalized_error(dx, finite_difference(lc.x, loss, kStep)), kGradTolerance);
  EXPECT_LT(normalized_error(dg, finite_difference(lc.g, loss, kStep)), kGradTolerance);
  EXPECT_LT(normalized_error(db, finite_difference(lc.b, loss, kStep)), kGradTolerance);
}

TEST_F(CpuOpsGradTest, GradientCheckRejectsAWrongGradient) {
  // The check above must be able to fail: drop the x̂ · mean(dŷ · x̂) term of the
  // layernorm dgrad (a classic bug), and separately spoil one element by 2%.
  LayernormCase lc;
  lc.loss(*ops);
  auto loss = [&] { return lc.loss(*ops); };
  auto mean = lc.mean, rstd = lc.rstd;
  auto fd = finite_difference(lc.x, loss, kStep);
  std::vector<float> without_term(lc.x.size());
  for (int row = 0; row < lc.n; ++row) {
    double mean_dxhat = 0;
    for (int i = 0; i < lc.c; ++i) mean_dxhat += double(lc.r[row * lc.c + i]) * lc.g[i] / lc.c;
    for (int i = 0; i < lc.c; ++i)
      without_term[row * lc.c + i] =
          float(rstd[row] * (double(lc.r[row * lc.c + i]) * lc.g[i] - mean_dxhat));
  }
  EXPECT_GT(normalized_error(without_term, fd), 10 * kGradTolerance);
  std::vector<float> dx(lc.x.size());
  ops->layernorm_backward_input(dx.data(), lc.r.data(), lc.x.data(), mean.data(), rstd.data(),
                                lc.g.data(), lc.n, lc.c, nullptr);
  ASSERT_LT(normalized_error(dx, fd), kGradTolerance);
  double largest = 0;
  for (float v : dx) largest = std::max(largest, double(std::fabs(v)));
  dx[17] += float(0.02 * largest);
  EXPECT_GT(normalized_error(dx, fd), kGradTolerance);
}

// ---- GELU -----------------------------------------------------------------------------

TEST_F(CpuOpsGradTest, Gelu) {
  const size_t n = 91;
  auto x = random_floats(n, 9, -4.0f, 4.0f), r = random_floats(n, 10);
  auto loss = [&] {
    std::vector<float> y(n);
    ops->gelu_forward(y.data(), x.data(), n);
    return weighted_sum(y, r);
  };
  std::vector<float> dx(n);
  ops->gelu_backward(dx.data(), r.data(), x.data(), n);
  EXPECT_LT(normalized_error(dx, finite_difference(x, loss, kStep)), kGradTolerance);
}

// ---- embedding ------------------------------------------------------------------------

TEST_F(CpuOpsGradTest, EmbeddingOnAShard) {
  // Shard [11, 22) of 30 tokens; tokens outside it must add nothing to dwte.
  const int n = 14, t = 7, c = 13, v0 = 11, vl = 11;
  auto tokens = random_ints(n, 11, 0, 29);
  tokens[0] = tokens[5] = 15;  // a repeated token sums two rows
  tokens[1] = 3;
  tokens[2] = 25;
  auto wte = random_floats(size_t(vl) * c, 12), wpe = random_floats(size_t(t) * c, 13),
       r = random_floats(size_t(n) * c, 14);
  auto loss = [&] {
    std::vector<float> y(size_t(n) * c);
    ops->embedding_forward(y.data(), tokens.data(), wte.data(), wpe.data(), n, t, c, v0, vl);
    return weighted_sum(y, r);
  };
  std::vector<float> dwte(wte.size()), dwpe(wpe.size());
  ops->embedding_backward_weight(dwte.data(), dwpe.data(), r.data(), tokens.data(), n, t, c, v0,
                                 vl);
  EXPECT_LT(normalized_error(dwte, finite_difference(wte, loss, kStep)), kGradTolerance);
  EXPECT_LT(normalized_error(dwpe, finite_difference(wpe, loss, kStep)), kGradTolerance);

  // Without dwpe only the token table is updated, with the same values.
  std::vector<float> dwte_only(wte.size());
  ops->embedding_backward_weight(dwte_only.data(), nullptr, r.data(), tokens.data(), n, t, c, v0,
                                 vl);
  EXPECT_EQ(dwte_only, dwte);
  // Rows whose token lies outside the shard change nothing.
  auto outside = tokens;
  for (int32_t& tok : outside)
    if (tok < v0 || tok >= v0 + vl) tok = tok < v0 ? 0 : 29;
  std::vector<float> dwte_outside(wte.size());
  ops->embedding_backward_weight(dwte_outside.data(), nullptr, r.data(), outside.data(), n, t, c,
                                 v0, vl);
  EXPECT_EQ(dwte_outside, dwte);
}

// ---- attention ------------------------------------------------------------------------

struct AttentionCase {
  int b, t, nh, hd;
  std::vector<float> qkv, r;
  AttentionCase(int b_, int t_, int nh_, int hd_)
      : b(b_),
        t(t_),
        nh(nh_),
        hd(hd_),
        qkv(random_floats(size_t(b_) * t_ * 3 * nh_ * hd_, 15, -1.5f, 1.5f)),
        r(random_floats(size_t(b_) * t_ * nh_ * hd_, 16)) {}
  std::vector<float> probs() const { return std::vector<float>(size_t(b) * nh * t * t); }
  double loss(Ops& ops) {
    std::vector<float> out(r.size()), p = probs();
    ops.attention_forward(out.data(), p.data(), qkv.data(), b, t, nh, hd);
    return weighted_sum(out, r);
  }
  std::vector<float> dqkv(Ops& ops, const std::vector<float>& dout) {
    std::vector<float> out(r.size()), p = probs(), d(qkv.size(), NAN);  // dqkv is overwritten
    ops.attention_forward(out.data(), p.data(), qkv.data(), b, t, nh, hd);
    ops.attention_backward_input(d.data(), dout.data(), qkv.data(), p.data(), b, t, nh, hd);
    return d;
  }
};

TEST_F(CpuOpsGradTest, Attention) {
  AttentionCase ac(2, 5, 3, 4);
  auto dqkv = ac.dqkv(*ops, ac.r);
  auto loss = [&] { return ac.loss(*ops); };
  EXPECT_LT(normalized_error(dqkv, finite_difference(ac.qkv, loss, kStep)), kGradTolerance);
}

TEST_F(CpuOpsGradTest, AttentionAcrossBlocks) {
  // T=130 spans three 64-row blocks; check a sample of coordinates spread over them.
  // One (batch, head) pair keeps the 240 forward calls serial: fast even on a busy machine.
  AttentionCase ac(1, 130, 1, 8);
  auto dqkv = ac.dqkv(*ops, ac.r);
  auto loss = [&] { return ac.loss(*ops); };
  auto at = testing::sample_indices(ac.qkv.size(), 120, 17);
  auto fd = finite_difference(ac.qkv, loss, kStep, at);
  EXPECT_LT(normalized_error(testing::gather(dqkv, at), testing::gather(fd, at)), kGradTolerance);
}

TEST_F(CpuOpsGradTest, AttentionGradientIsCausal) {
  // With dout zero from token 3 on, no gradient may reach q, k or v of tokens >= 3.
  AttentionCase ac(2, 70, 3, 4);
  const int c = ac.nh * ac.hd;
  auto dout = ac.r;
  for (int bb = 0; bb < ac.b; ++bb)
    for (int i = 3; i < ac.t; ++i)
      for (int k = 0; k < c; ++k) dout[(size_t(bb) * ac.t + i) * c + k] = 0.0f;
  auto d = ac.dqkv(*ops, dout);
  for (int bb = 0; bb < ac.b; ++bb)
    for (int i = 0; i < ac.t; ++i)
      for (int k = 0; k < 3 * c; ++k) {
        const float g = d[(size_t(bb) * ac.t + i) * 3 * c + k];
        if (i >= 3) {
          ASSERT_EQ(g, 0.0f) << "token " << i << " column " << k;
        } else if (i > 0 ||
                   k >=
                       c) {  // token 0's query sees one key: a softmax of one score has no gradient
          ASSERT_NE(g, 0.0f) << "token " << i << " column " << k;
        }
      }
}

// ---- cross-entropy --------------------------------------------------------------------

// Summed loss of one shard (tp = 1: no all-reduce between the calls).
double shard_loss(Ops& ops, const std::vector<float>& logits, const std::vector<int32_t>& targets,
                  int n, int vl, int valid, int v0) {
  std::vector<float> rmax(n), sumexp(n), target_logit(n);
  ops.ce_row_max(rmax.data(), logits.data(), n, vl, valid);
  ops.ce_sumexp_target(sumexp.data(), target_logit.data(), logits.data(), rmax.data(),
                       targets.data(), n, vl, valid, v0);
  double loss = NAN;
  ops.ce_loss_sum(&loss, rmax.data(), sumexp.data(), target_logit.data(), n);
  return loss;
}

TEST_F(CpuOpsGradTest, CrossEntropy) {
  const int n = 7, vl = 11, valid = 9;
  auto logits = random_floats(size_t(n) * vl, 18, -3.0f, 3.0f);
  auto targets = random_ints(n, 19, 0, valid - 1);
  auto loss = [&] { return shard_loss(*ops, logits, targets, n, vl, valid, 0); };
  std::vector<float> rmax(n), sumexp(n), target_logit(n), dlogits(logits.size());
  ops->ce_row_max(rmax.data(), logits.data(), n, vl, valid);
  ops->ce_sumexp_target(sumexp.data(), target_logit.data(), logits.data(), rmax.data(),
                        targets.data(), n, vl, valid, 0);
  ops->ce_backward(dlogits.data(), logits.data(), rmax.data(), sumexp.data(), targets.data(), n, vl,
                   valid, 0, 1.0f);
  // FD gives 0 for the padding columns as well: they do not enter the loss.
  EXPECT_LT(normalized_error(dlogits, finite_difference(logits, loss, kStep)), kGradTolerance);
}

// ce_fused (tp = 1) takes the split ops' steps row by row: the same bits, in place (as the
// head calls it) and not. Rows of a few thousand columns with padding, so that the vector
// loops run with remainders, and enough of them to split over threads.
TEST_F(CpuOpsGradTest, CrossEntropyFusedIsTheSplitOpsBitForBit) {
  const int n = 33, vl = 4099, valid = 4093;
  const auto logits = random_floats(size_t(n) * vl, 22, -8.0f, 8.0f);
  auto targets = random_ints(n, 23, 0, valid - 1);
  targets[0] = 0, targets[1] = valid - 1;
  std::vector<float> rmax(n), sumexp(n), target_logit(n), dlogits(logits.size());
  ops->ce_row_max(rmax.data(), logits.data(), n, vl, valid);
  ops->ce_sumexp_target(sumexp.data(), target_logit.data(), logits.data(), rmax.data(), targets.data(), n, vl,
                        valid, 0);
  ops->ce_backward(dlogits.data(), logits.data(), rmax.data(), sumexp.data(), targets.data(), n, vl, valid, 0,
                   0.25f);
  for (bool in_place : {false, true}) {
    std::vector<float> in = logits, out(logits.size(), NAN), stats(3 * size_t(n), NAN);
    float* d = in_place ? in.data() : out.data();
    ops->ce_fused(d, stats.data(), stats.data() + n, stats.data() + 2 * n, in.data(), targets.data(), n, vl, valid,
                  0.25f);
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(stats[r], rmax[r]) << "row max, row " << r << (in_place ? " in place" : "");
      ASSERT_EQ(stats[n + r], sumexp[r]) << "sum of exponentials, row " << r << (in_place ? " in place" : "");
      ASSERT_EQ(stats[2 * n + r], target_logit[r]) << "target logit, row " << r << (in_place ? " in place" : "");
    }
    for (size_t i = 0; i < dlogits.size(); ++i)
      ASSERT_EQ(d[i], dlogits[i]) << "dlogits element " << i << (in_place ? " in place" : "");
  }
}

TEST_F(CpuOpsGradTest, CrossEntropyTwoShardsEqualOne) {
  // Vocabulary of 20 split over tp=2 and padded to 22: shard 0 = [0, 11), shard 1 =
  // [11, 22) with 9 real columns. The caller's all-reduces are done here by hand:
  // max of rmax, then sums of sumexp and target_logit.
  const int n = 7, vocab = 20, vl = 11;
  const int v0s[2] = {0, 11}, valids[2] = {11, 9};
  auto full = random_floats(size_t(n) * vocab, 20, -3.0f, 3.0f);
  auto targets = random_ints(n, 21, 0, vocab - 1);
  targets[0] = 0;
  targets[1] = 10;
  targets[2] = 11;
  targets[3] = 19;
  const float scale = 1.0f / n;

  std::vector<float> rmax(n), sumexp(n), target_logit(n), dfull(full.size());
  ops->ce_row_max(rmax.data(), full.data(), n, vocab, vocab);
  ops->ce_sumexp_target(sumexp.data(), target_logit.data(), full.data(), rmax.data(),
                        targets.data(), n, vocab, vocab, 0);
  double loss_one = NAN;
  ops->ce_loss_sum(&loss_one, rmax.data(), sumexp.data(), target_logit.data(), n);
  ops->ce_backward(dfull.data(), full.data(), rmax.data(), sumexp.data(), targets.data(), n, vocab,
                   vocab, 0, scale);

  std::vector<float> shard[2];
  for (int s = 0; s < 2; ++s) {
    shard[s].assign(size_t(n) * vl, 1e3f);  // padding: large enough to corrupt max and sum
    for (int row = 0; row < n; ++row)
      for (int j = 0; j < valids[s]; ++j) shard[s][row * vl + j] = full[row * vocab + v0s[s] + j];
  }
  std::vector<float> shard_max[2], shard_sum[2], shard_target[2];
  for (int s = 0; s < 2; ++s) {
    shard_max[s].resize(n);
    ops->ce_row_max(shard_max[s].data(), shard[s].data(), n, vl, valids[s]);
  }
  std::vector<float> global_max(n), global_sum(n, 0.0f), global_target(n, 0.0f);
  for (int row = 0; row < n; ++row)
    global_max[row] = std::max(shard_max[0][row], shard_max[1][row]);
  for (int s = 0; s < 2; ++s) {
    shard_sum[s].resize(n);
    shard_target[s].resize(n);
    ops->ce_sumexp_target(shard_sum[s].data(), shard_target[s].data(), shard[s].data(),
                          global_max.data(), targets.data(), n, vl, valids[s], v0s[s]);
    for (int row = 0; row < n; ++row) {
      global_sum[row] += shard_sum[s][row];
      global_target[row] += shard_target[s][row];
    }
  }
  double loss_two = NAN;
  ops->ce_loss_sum(&loss_two, global_max.data(), global_sum.data(), global_target.data(), n);
  EXPECT_NEAR(loss_two, loss_one, 1e-6 * std::fabs(loss_one));

  for (int s = 0; s < 2; ++s) {
    std::vector<float> d(size_t(n) * vl, NAN);
    ops->ce_backward(d.data(), shard[s].data(), global_max.data(), global_sum.data(),
                     targets.data(), n, vl, valids[s], v0s[s], scale);
    for (int row = 0; row < n; ++row) {
      for (int j = 0; j < valids[s]; ++j)
        EXPECT_NEAR(d[row * vl + j], dfull[row * vocab + v0s[s] + j], 1e-6) << s << " " << row;
      for (int j = valids[s]; j < vl; ++j) EXPECT_EQ(d[row * vl + j], 0.0f) << "padding";
    }
  }
}

// ---- accumulate rules -----------------------------------------------------------------

TEST_F(CpuOpsGradTest, AccumulateFlagsAndWeightGradientsAdd) {
  const int n = 7, in = 13, out = 11, c = 13;
  auto x = random_floats(size_t(n) * in, 22), w = random_floats(size_t(out) * in, 23),
       dy = random_floats(size_t(n) * out, 24), prior = random_floats(size_t(n) * in, 25);
  auto added = [](std::vector<float> a, const std::vector<float>& b) {
    for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
    return a;
  };

  // linear dgrad: accumulate=false overwrites (even NaN), true adds.
  std::vector<float> fresh(prior.size(), NAN);
  ops->linear_backward_input(fresh.data(), dy.data(), w.data(), n, in, out, false);
  for (float v : fresh) ASSERT_TRUE(std::isfinite(v));
  auto acc = prior;
  ops->linear_backward_input(acc.data(), dy.data(), w.data(), n, in, out, true);
  EXPECT_LT(normalized_error(acc, added(prior, fresh)), 1e-6);

  // linear wgrad always adds.
  std::vector<float> dw0(w.size()), db0(out);
  ops->linear_backward_weight(dw0.data(), db0.data(), dy.data(), x.data(), n, in, out);
  auto dw_prior = random_floats(w.size(), 26), db_prior = random_floats(out, 27);
  auto dw = dw_prior, db = db_prior;
  ops->linear_backward_weight(dw.data(), db.data(), dy.data(), x.data(), n, in, out);
  EXPECT_LT(normalized_error(dw, added(dw_prior, dw0)), 1e-6);
  EXPECT_LT(normalized_error(db, added(db_prior, db0)), 1e-6);
  // db may be null.
  auto dw_no_bias = dw_prior;
  ops->linear_backward_weight(dw_no_bias.data(), nullptr, dy.data(), x.data(), n, in, out);
  EXPECT_EQ(dw_no_bias, dw);

  // layernorm dgrad and wgrad.
  LayernormCase lc;
  lc.loss(*ops);
  // layernorm dgrad: without a residual dx is overwritten (even NaN); with one, dx[i] is
  // residual[i] + the layernorm term in fp32, with dx apart from or aliasing residual (the
  // same loop, so the same bits).
  std::vector<float> ln_fresh(size_t(n) * c, NAN);
  ops->layernorm_backward_input(ln_fresh.data(), lc.r.data(), lc.x.data(), lc.mean.data(),
                                lc.rstd.data(), lc.g.data(), n, c, nullptr);
  for (float v : ln_fresh) ASSERT_TRUE(std::isfinite(v));
  std::vector<float> ln_res(size_t(n) * c, NAN);
  ops->layernorm_backward_input(ln_res.data(), lc.r.data(), lc.x.data(), lc.mean.data(),
                                lc.rstd.data(), lc.g.data(), n, c, prior.data());
  // The compiler may fuse residual + s·(...) into one FMA (one rounding instead of two), so
  // per element |ln_res - (prior + fresh)| ≤ u·|prior + s·t| + u·|s·t| + u·|sum| (the two
  // roundings of the reference and the one of the fused form), u = 2⁻²⁴; 3u·(|prior| + |fresh|)
  // bounds that with room for the second-order terms. Dropping the residual, or adding it
  // twice, is off by |prior| ~ 0.5: millions of times the bound.
  auto reference = added(prior, ln_fresh);
  for (size_t i = 0; i < ln_res.size(); ++i)
    ASSERT_LE(std::fabs(ln_res[i] - reference[i]),
              3 * std::ldexp(1.0, -24) * (std::fabs(prior[i]) + std::fabs(ln_fresh[i])))
        << "element " << i;
  auto ln_in_place = prior;
  ops->layernorm_backward_input(ln_in_place.data(), lc.r.data(), lc.x.data(), lc.mean.data(),
                                lc.rstd.data(), lc.g.data(), n, c, ln_in_place.data());
  EXPECT_EQ(ln_in_place, ln_res);
  std::vector<float> dg0(c), dbeta0(c);
  ops->layernorm_backward_weight(dg0.data(), dbeta0.data(), lc.r.data(), lc.x.data(),
                                 lc.mean.data(), lc.rstd.data(), n, c);
  auto dg = random_floats(c, 28), dbeta = random_floats(c, 29);
  auto dg_prior = dg, dbeta_prior = dbeta;
  ops->layernorm_backward_weight(dg.data(), dbeta.data(), lc.r.data(), lc.x.data(), lc.mean.data(),
                                 lc.rstd.data(), n, c);
  EXPECT_LT(normalized_error(dg, added(dg_prior, dg0)), 1e-6);
  EXPECT_LT(normalized_error(dbeta, added(dbeta_prior, dbeta0)), 1e-6);

  // embedding wgrad adds.
  const int t = 7, vl = 5;
  auto tokens = random_ints(n, 30, 0, vl - 1);
  std::vector<float> dwte0(size_t(vl) * c), dwpe0(size_t(t) * c);
  ops->embedding_backward_weight(dwte0.data(), dwpe0.data(), lc.r.data(), tokens.data(), n, t, c, 0,
                                 vl);
  auto dwte = random_floats(dwte0.size(), 31), dwpe = random_floats(dwpe0.size(), 32);
  auto dwte_prior = dwte, dwpe_prior = dwpe;
  ops->embedding_backward_weight(dwte.data(), dwpe.data(), lc.r.data(), tokens.data(), n, t, c, 0,
                                 vl);
  EXPECT_LT(normalized_error(dwte, added(dwte_prior, dwte0)), 1e-6);
  EXPECT_LT(normalized_error(dwpe, added(dwpe_prior, dwpe0)), 1e-6);
}

// ---- parallel paths against double references -----------------------------------------

TEST_F(CpuOpsGradTest, WeightGradientsOnParallelShapes) {
  // Shapes above the serial threshold, with widths that are not multiples of the
  // 64-channel chunks.
  const int n = 300, in = 70, out = 130, t = 100, vl = 40;
  auto x = random_floats(size_t(n) * in, 33), dy = random_floats(size_t(n) * out, 34);
  std::vector<float> dw(size_t(out) * in), db(out);
  ops->linear_backward_weight(dw.data(), db.data(), dy.data(), x.data(), n, in, out);
  std::vector<double> ref_dw(dw.size(), 0.0), ref_db(out, 0.0);
  for (int r = 0; r < n; ++r)
    for (int o = 0; o < out; ++o) {
      ref_db[o] += dy[r * out + o];
      for (int k = 0; k < in; ++k) ref_dw[o * in + k] += double(dy[r * out + o]) * x[r * in + k];
    }
  EXPECT_LT(normalized_error(dw, ref_dw), 1e-5);
  EXPECT_LT(normalized_error(db, ref_db), 1e-5);

  // layernorm wgrad, c = out
  std::vector<float> mean(n), rstd(n), y(size_t(n) * out);
  auto lx = random_floats(size_t(n) * out, 35), g = random_floats(out, 36),
       b = random_floats(out, 37);
  ops->layernorm_forward(y.data(), mean.data(), rstd.data(), lx.data(), g.data(), b.data(), n, out);
  std::vector<float> dg(out), dbeta(out);
  ops->layernorm_backward_weight(dg.data(), dbeta.data(), dy.data(), lx.data(), mean.data(),
                                 rstd.data(), n, out);
  std::vector<double> ref_dg(out, 0.0);
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < out; ++i)
      ref_dg[i] += double(dy[r * out + i]) * (lx[r * out + i] - mean[r]) * rstd[r];
  EXPECT_LT(normalized_error(dg, ref_dg), 1e-5);
  EXPECT_LT(normalized_error(dbeta, ref_db), 1e-5);

  // embedding wgrad, c = out
  auto tokens = random_ints(n, 38, -5, vl + 5);
  std::vector<float> dwte(size_t(vl) * out), dwpe(size_t(t) * out);
  ops->embedding_backward_weight(dwte.data(), dwpe.data(), dy.data(), tokens.data(), n, t, out, 0,
                                 vl);
  std::vector<double> ref_wte(dwte.size(), 0.0), ref_wpe(dwpe.size(), 0.0);
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < out; ++i) {
      if (tokens[r] >= 0 && tokens[r] < vl) ref_wte[tokens[r] * out + i] += dy[r * out + i];
      ref_wpe[(r % t) * out + i] += dy[r * out + i];
    }
  EXPECT_LT(normalized_error(dwte, ref_wte), 1e-5);
  EXPECT_LT(normalized_error(dwpe, ref_wpe), 1e-5);
}

}  // namespace
}  // namespace pptrain
