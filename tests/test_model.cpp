// Whole-model gradients: every parameter against central finite differences of the
// loss; the dgrad/wgrad split against a fused backward; microbatch accumulation against
// one large batch. Tiny GPT-2 and Llama shapes, cpu backend.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "backend/ops.h"
#include "core/communicator.h"
#include "core/rng.h"
#include "model/block.h"
#include "model/llama_block.h"
#include "model/stage.h"
#include "partition/partition.h"
#include "support/single_rank_model.h"
#include "support/tolerances.h"

using namespace pptrain;

namespace {

using pptrain::testing::tiny_model;

// The single-rank model with one microbatch of token buffers.
struct TinyModel : pptrain::testing::SingleRankModel {
  Buffer<int32_t> tokens, targets;

  TinyModel(const ModelConfig& m, int batch, uint64_t seed = 7) : SingleRankModel(m, batch, seed) {
    stage->set_loss_scale(1.0f / float(dims.rows()));
    tokens = Buffer<int32_t>(*ops, dims.rows());
    targets = Buffer<int32_t>(*ops, dims.rows());
  }
  void set_data(const std::vector<int32_t>& tok, const std::vector<int32_t>& tgt) {
    tokens.upload(tok.data());
    targets.upload(tgt.data());
  }
  MicrobatchData data() { return {tokens.data(), targets.data()}; }
  // Mean loss of the current data (forward only).
  double loss() {
    stage->forward(0, data());
    double l = stage->loss_sum(0) / dims.rows();
    stage->discard(0);
    return l;
  }
};

std::vector<int32_t> random_tokens(size_t n, int vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = int32_t(gen() % vocab);
  return v;
}

// Perturbs the parameters so that gains, biases and weights are all generic (the
// GPT-2 init has zero biases and unit gains, which hides bugs in their gradients).
void randomise(ParamStore& params, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> noise(0.0f, 0.3f);
  for (auto& [name, p] : params.all()) {
    auto v = p->value.to_host();
    for (auto& x : v) x += noise(gen);
    p->set_masters(v.data());
  }
}


// Every parameter's gradient (its 6 largest elements and 6 spread ones) against central
// finite differences of the loss, after randomising the parameters; returns how many
// elements it checked.
int check_gradients_against_finite_differences(const ModelConfig& m) {
  TinyModel model(m, 2);
  randomise(*model.params, 3);
  const int n = model.dims.rows();
  model.set_data(random_tokens(n, m.vocab_size, 1), random_tokens(n, m.vocab_size, 2));
  model.params->zero_grads();
  model.stage->forward(0, model.data());
  model.stage->backward_input(0);
  model.stage->backward_weight(0);

  int checked = 0;
  for (auto& [name, p] : model.params->all()) {
    auto grad = p->grad.to_host();
    auto value = p->value.to_host();
    double gmax = 0;
    for (float g : grad) gmax = std::max(gmax, double(std::fabs(g)));
    EXPECT_GT(gmax, 0.0) << name << " has an all-zero gradient";
    // the 6 largest-gradient elements and 6 spread ones
    std::vector<size_t> idx(grad.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::partial_sort(idx.begin(), idx.begin() + std::min<size_t>(6, idx.size()), idx.end(),
                      [&](size_t a, size_t b) { return std::fabs(grad[a]) > std::fabs(grad[b]); });
    idx.resize(std::min<size_t>(6, idx.size()));
    for (size_t k = 0; k < 6; ++k) idx.push_back((k * 7919) % grad.size());
    for (size_t i : idx) {
      const float eps = 1e-2f;
      float orig = value[i];
      value[i] = orig + eps;
      p->set_masters(value.data());
      double lp = model.loss();
      value[i] = orig - eps;
      p->set_masters(value.data());
      double lm = model.loss();
      value[i] = orig;
      p->set_masters(value.data());
      double fd = (lp - lm) / (2 * eps);
      EXPECT_NEAR(grad[i], fd, 2e-2 * std::fabs(fd) + 2e-3 * gmax + 1e-5)
          << name << "[" << i << "] analytic " << grad[i] << " vs finite difference " << fd;
      ++checked;
    }
  }
  return checked;
}

// 2 blocks of 4 query heads and `kv_heads` key/value heads, head size 4 (even, for the
// rotary embedding), SwiGLU width 24, vocab 11; a small rope_theta so the rotation angles
// differ well between the 5 positions.
ModelConfig tiny_llama(int kv_heads) {
  ModelConfig m = tiny_model();
  m.arch = "llama";
  m.n_head = 4;
  m.n_kv_head = kv_heads;
  m.d_model = 16;
  m.ffn_hidden = 24;
  m.rope_theta = 100.0;
  m.norm_eps = 1e-5;
  m.tie_embeddings = false;
  return m;
}

}  // namespace

TEST(ModelGradients, EveryParameterMatchesFiniteDifferences) {
  EXPECT_GE(check_gradients_against_finite_differences(tiny_model()), 12 * 16);  // 2 x 12 tensors + wte, wpe, ln_f
}

TEST(LlamaModelGradients, EveryParameterMatchesFiniteDifferencesForEachKindOfAttention) {
  // Grouped-query attention with one key/value head (multi-query), two (groups of two) and
  // four (multi-head); untied and tied output head.
  for (int kv_heads : {1, 2, 4}) {
    SCOPED_TRACE("n_kv_head " + std::to_string(kv_heads));
    // 2 blocks x 7 tensors + wte, ln_f, lm_head, 12 elements each
    EXPECT_EQ(check_gradients_against_finite_differences(tiny_llama(kv_heads)), 12 * 17);
  }
  ModelConfig tied = tiny_llama(2);
  tied.tie_embeddings = true;
  EXPECT_EQ(check_gradients_against_finite_differences(tied), 12 * 16);
}

TEST(LlamaModel, ParametersAreNamedByTheirRoles) {
  TinyModel model(tiny_llama(2), 1);
  std::vector<std::string> names;
  for (auto& [name, p] : model.params->all()) names.push_back(name + " " + std::to_string(p->global_rows()) + "x" +
                                                             std::to_string(p->global_cols()));
  const std::vector<std::string> block0 = {
      "h.0.attn.proj.weight 16x16", "h.0.attn.qkv.weight 32x16", "h.0.ln_1.weight 16x1", "h.0.ln_2.weight 16x1",
      "h.0.mlp.down.weight 16x24",  "h.0.mlp.gate.weight 24x16", "h.0.mlp.up.weight 24x16"};
  for (const std::string& want : block0) EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  for (const char* want : {"wte.weight 11x16", "lm_head.weight 11x16", "ln_f.weight 16x1"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  EXPECT_EQ(names.size(), 2 * block0.size() + 3);  // no biases, no wpe
}

namespace {

// Interleaved I and W of two microbatches (as zero-bubble schedules run them) against a
// fused backward per microbatch: the same gradients.
void expect_split_backward_equals_fused(const ModelConfig& m) {
  TinyModel fused(m, 2), split(m, 2);
  const int n = fused.dims.rows(), v = m.vocab_size;
  std::vector<std::vector<int32_t>> tok = {random_tokens(n, v, 4), random_tokens(n, v, 5)};
  std::vector<std::vector<int32_t>> tgt = {random_tokens(n, v, 6), random_tokens(n, v, 7)};
  std::vector<Buffer<int32_t>> bufs;
  for (int i = 0; i < 2; ++i) {
    bufs.emplace_back(*fused.ops, n);
    bufs.back().upload(tok[i].data());
    bufs.emplace_back(*fused.ops, n);
    bufs.back().upload(tgt[i].data());
  }
  auto mb = [&](int i) { return MicrobatchData{bufs[2 * i].data(), bufs[2 * i + 1].data()}; };
  for (int i = 0; i < 2; ++i) {
    fused.stage->forward(i, mb(i));
    fused.stage->backward_input(i);
    fused.stage->backward_weight(i);
  }
  split.stage->forward(0, mb(0));
  split.stage->forward(1, mb(1));
  split.stage->backward_input(0);
  split.stage->backward_input(1);
  split.stage->backward_weight(1);
  split.stage->backward_weight(0);
  EXPECT_EQ(split.stage->live_microbatches(), 0u);
  for (auto& [name, p] : fused.params->all()) {
    auto a = p->grad.to_host(), b = split.params->find(name)->grad.to_host();
    double gmax = 0;
    for (float g : a) gmax = std::max(gmax, double(std::fabs(g)));
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-6 * gmax + 1e-9) << name << "[" << i << "]";
  }
}

}  // namespace

TEST(LlamaModelGradients, SplitDgradWgradEqualsFusedBackward) {
  expect_split_backward_equals_fused(tiny_llama(2));
  ModelConfig flash = tiny_llama(1);
  flash.attention = "flash";
  expect_split_backward_equals_fused(flash);
}

TEST(ModelGradients, SplitDgradWgradEqualsFusedBackward) { expect_split_backward_equals_fused(tiny_model()); }

TEST(ModelGradients, FourMicrobatchesEqualOneBatchOfFour) {
  const ModelConfig m = tiny_model();
  TinyModel small(m, 1), big(m, 4);
  const int t = m.seq_len;
  auto tok = random_tokens(4 * t, 11, 8), tgt = random_tokens(4 * t, 11, 9);
  big.set_data(tok, tgt);
  big.stage->set_loss_scale(1.0f / (4 * t));
  big.stage->forward(0, big.data());
  double big_loss = big.stage->loss_sum(0);
  big.stage->backward_input(0);
  big.stage->backward_weight(0);

  small.stage->set_loss_scale(1.0f / (4 * t));
  double small_loss = 0;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> a(tok.begin() + i * t, tok.begin() + (i + 1) * t), b(tgt.begin() + i * t, tgt.begin() + (i + 1) * t);
    small.set_data(a, b);
    small.stage->forward(i, small.data());
    small_loss += small.stage->loss_sum(i);
    small.stage->backward_input(i);
    small.stage->backward_weight(i);
  }
  EXPECT_NEAR(small_loss, big_loss, 1e-5 * std::fabs(big_loss));
  for (auto& [name, p] : big.params->all()) {
    auto a = p->grad.to_host(), b = small.params->find(name)->grad.to_host();
    double gmax = 0;
    for (float g : a) gmax = std::max(gmax, double(std::fabs(g)));
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5 * gmax + 1e-9) << name << "[" << i << "]";
  }
}

TEST(ModelGradients, FlashAttentionEqualsNaive) {
  // model.attention: flash and naive compute the same step in a different order (the
  // probabilities recomputed from the log-sum-exp): loss and every gradient within the
  // normwise fp32 bound of two differently ordered runs (support/tolerances.h).
  ModelConfig flash_model = tiny_model(), naive_model = tiny_model();
  flash_model.attention = "flash";
  naive_model.attention = "naive";
  TinyModel flash(flash_model, 2), naive(naive_model, 2);
  randomise(*flash.params, 3);
  randomise(*naive.params, 3);
  const int n = flash.dims.rows();
  double loss[2];
  for (TinyModel* model : {&flash, &naive}) {
    model->set_data(random_tokens(n, 11, 10), random_tokens(n, 11, 11));
    model->stage->forward(0, model->data());
    loss[model == &naive] = model->stage->loss_sum(0);
    model->stage->backward_input(0);
    model->stage->backward_weight(0);
  }
  Config cfg;
  cfg.model = flash_model;
  cfg.training.micro_batch_size = 2;
  cfg.parallel.microbatches = 1;  // the step's tokens: one microbatch of 2 sequences
  const auto bound = pptrain::testing::fp32_step_bounds(cfg);
  EXPECT_LE(std::fabs(loss[0] - loss[1]), bound.loss * std::fabs(loss[1]));
  for (auto& [name, p] : naive.params->all()) {
    auto want = p->grad.to_host(), got = flash.params->find(name)->grad.to_host();
    double gmax = 0, diff = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      gmax = std::max(gmax, double(std::fabs(want[i])));
      diff = std::max(diff, double(std::fabs(got[i] - want[i])));
    }
    EXPECT_LE(diff, bound.gradient * gmax) << name;
  }
}

TEST(ModelMemory, FusedAttentionSlotHoldsLseAndDeltaInsteadOfProbs) {
  // A block's slot under flash lacks probs [B,NHL,T,T] (storage type) and holds lse and
  // delta [B,NHL,T] (fp32) instead: everything else in it is per token, so it is linear in T.
  auto ops = make_cpu_ops();
  LocalComm alone;
  for (int tp : {1, 2}) {
    ParamStore params(*ops, tp, 0, 5);
    auto slot_bytes = [&](bool bf16, bool fused, int t) {
      ModelConfig m = tiny_model();
      m.n_head = 4;
      m.seq_len = t;
      m.attention = fused ? "flash" : "naive";
      const ModelDims dims = ModelDims::from(m, 3, tp, 0);
      if (bf16) return Block<bfloat16>(params, dims, 0, alone).slot_bytes();
      return Block<float>(params, dims, 0, alone).slot_bytes();
    };
    const size_t b = 3, nhl = 4 / tp;
    for (bool bf16 : {false, true}) {
      const size_t element = bf16 ? sizeof(bfloat16) : sizeof(float);
      for (size_t t : {5, 16}) {
        const size_t probs = b * nhl * t * t * element, lse_delta = 2 * b * nhl * t * sizeof(float);
        EXPECT_EQ(slot_bytes(bf16, false, t) - slot_bytes(bf16, true, t), probs - lse_delta)
            << "tp " << tp << " bf16 " << bf16 << " T " << t;
      }
      const size_t base = slot_bytes(bf16, true, 8);
      EXPECT_EQ(slot_bytes(bf16, true, 16), 2 * base) << "flash slot linear in T";
      EXPECT_EQ(slot_bytes(bf16, true, 24), 3 * base) << "flash slot linear in T";
      EXPECT_GT(slot_bytes(bf16, false, 16), 2 * slot_bytes(bf16, false, 8)) << "naive slot grows like T²";
    }
  }
}

TEST(ModelInit, ValuesDoNotDependOnTensorParallelism) {
  // The tp=2 shards of every parameter, put side by side, equal the tp=1 tensor.
  ModelConfig m = tiny_model();
  m.vocab_size = 11;  // odd: padded to 12 under tp=2
  auto ops = make_cpu_ops();
  LocalComm alone;
  ParamStore whole(*ops, 1, 0, 5);
  // Building the stages creates their parameters in the stores.
  auto full = make_stage(whole, ModelDims::from(m, 1, 1, 0), StageSpec{0, 0, 2, true, true}, alone);
  std::vector<std::unique_ptr<ParamStore>> shards;
  std::vector<std::unique_ptr<Stage>> stages;
  for (int r = 0; r < 2; ++r) {
    shards.push_back(std::make_unique<ParamStore>(*ops, 2, r, 5));
    stages.push_back(make_stage(*shards.back(), ModelDims::from(m, 1, 2, r), StageSpec{0, 0, 2, true, true}, alone));
  }
  for (auto& [name, p] : whole.all()) {
    auto global = p->value.to_host();
    std::vector<int> seen(global.size(), 0);
    for (int r = 0; r < 2; ++r) {
      Param* q = shards[r]->find(name);
      ASSERT_NE(q, nullptr) << name;
      auto local = q->value.to_host();
      for (const Slab& s : q->slabs)
        for (int64_t i = 0; i < s.rows; ++i)
          for (int64_t j = 0; j < s.cols; ++j) {
            size_t gi = (s.global_row + i) * p->global_cols() + s.global_col + j;
            ASSERT_EQ(local[(s.local_row + i) * q->local_cols + s.local_col + j], global[gi]) << name;
            seen[gi]++;
          }
    }
    int expect = shards[0]->find(name)->replicated_over_tp ? 2 : 1;
    for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], expect) << name << " element " << i;
  }
}

// Large enough for initial_values to split its elements over threads (65,536 or more a
// slab), sharded so that the slabs sit at offsets: at 1 thread and at 3 each element is
// init_std · N(0,1) at its global index, the same bits.
TEST(ModelInit, ValuesDoNotDependOnTheThreads) {
  for (Shard shard : {Shard::Rows3, Shard::Cols}) {
    ParamSpec spec{"h.0.attn.qkv.weight", {3 * 320, 512}, shard, Init::Normal, 0.02f};
    Param p;
    p.spec = spec;
    shard_layout(spec, 2, 1, p);
    ASSERT_GE(p.slabs[0].rows * p.slabs[0].cols, 65536) << "too small to run on several threads";
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const std::vector<float> one = initial_values(p, 5);
    omp_set_num_threads(3);
    const std::vector<float> three = initial_values(p, 5);
    omp_set_num_threads(threads);
    const CounterRng rng(5, spec.name);
    for (const Slab& s : p.slabs)
      for (int64_t i = 0; i < s.rows; ++i)
        for (int64_t j = 0; j < s.cols; ++j) {
          const size_t local = size_t((s.local_row + i) * p.local_cols + s.local_col + j);
          const float expect = 0.02f * rng.normal(uint64_t((s.global_row + i) * p.global_cols() + s.global_col + j));
          ASSERT_EQ(one[local], expect) << "element " << local;
          ASSERT_EQ(three[local], expect) << "element " << local;
        }
  }
}

TEST(Partition, LlamaBlockCostCountsItsWeights) {
  // Llama 2 7B's block: C 4096, F 11008, 32 heads: 2 FLOPs per weight, 4·C² + 3·C·F weights.
  Config c;
  c.model.arch = "llama";
  c.model.d_model = 4096;
  c.model.n_head = 32;
  c.model.seq_len = 1;
  const double c2 = 4096.0 * 4096.0;
  EXPECT_DOUBLE_EQ(block_cost(c.model), 2 * (4 * c2 + 3 * 4096.0 * 11008) + 2 * 4096);
  c.model.n_kv_head = 8;  // grouped-query: k and v are a quarter of q
  EXPECT_DOUBLE_EQ(block_cost(c.model), 2 * (2.5 * c2 + 3 * 4096.0 * 11008) + 2 * 4096);
}

TEST(Partition, BalancesBlocksAgainstTheHead) {
  Config c;
  c.model.n_layer = 12;
  c.model.d_model = 64;
  c.model.seq_len = 64;
  c.model.vocab_size = 50304;  // head ≈ 2·64·50304 ≈ 6.5e6 FLOPs/token vs block ≈ 1.1e5
  c.parallel.pp = 2;
  auto cut = blocks_per_stage(c);
  ASSERT_EQ(cut.size(), 2u);
  EXPECT_EQ(cut[0] + cut[1], 12);
  EXPECT_EQ(cut[1], 1);  // the head dwarfs the blocks: the last stage keeps one
  c.model.vocab_size = 64;
  cut = blocks_per_stage(c);
  EXPECT_EQ(cut[0], 6);
  EXPECT_EQ(cut[1], 6);
  c.parallel.layers_per_stage = {3, 9};
  EXPECT_EQ(blocks_per_stage(c), (std::vector<int>{3, 9}));
}
