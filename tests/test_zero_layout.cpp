// ZeRO-1 (parallel.zero: 1) without training: the flat parameter arenas and their
// buckets, the ranges each dp rank owns, and the sharded optimizer state (training under
// it: test_zero). Every check is exact (element coverage, byte counts, copied values).
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/optimizer_state.h"
#include "model/param.h"
#include "support/test_util.h"

using namespace pptrain;
using namespace pptrain::testing;

namespace {

// ---------------------------------------------------------------- layout, ranges, state

// Tensors of every sharding kind, tp = 2: a padded vocab-parallel matrix (19 rows -> 20),
// a fused QKV (Rows3), a row-parallel matrix (Cols), replicated vectors of odd sizes.
std::vector<ParamSpec> specs() {
  std::vector<ParamSpec> s;
  ParamSpec wte{"wte.weight", {19, 6}, Shard::Rows, Init::Normal, 0.02f, true};
  wte.padded_rows = 20;
  s.push_back(wte);
  s.push_back({"h.0.attn.qkv.weight", {12, 6}, Shard::Rows3, Init::Normal, 0.02f, true});
  s.push_back({"h.0.attn.proj.weight", {6, 4}, Shard::Cols, Init::Normal, 0.02f, true});
  s.push_back({"h.0.ln_1.weight", {7}, Shard::Replicated, Init::Ones});
  s.push_back({"ln_f.bias", {33}, Shard::Replicated, Init::Zeros});
  return s;
}

struct Store {
  std::unique_ptr<Ops> ops = make_cpu_ops();
  std::unique_ptr<ParamStore> params;
  explicit Store(int shards, int tp = 2, int tp_rank = 1) {
    params = std::make_unique<ParamStore>(*ops, tp, tp_rank, 7);
    for (const ParamSpec& s : specs()) params->get_or_create(s);
    if (shards > 0) params->flatten(shards);
  }
};

TEST(ZeroLayout, ArenaKeepsTheValuesAndAlignsTensorsAndShards) {
  Store plain(0), flat(3);
  const FlatLayout& l = flat.params->flat_layout();
  EXPECT_EQ(l.shard_size % kFlatAlign, 0u);
  EXPECT_EQ(l.total(), 3 * l.shard_size);
  EXPECT_GE(l.total(), l.used);
  EXPECT_LT(l.total() - l.used, 3 * kFlatAlign + 3);  // at most one aligned block per shard of padding
  size_t next = 0;
  for (auto& [name, p] : flat.params->all()) {
    EXPECT_EQ(p->flat_offset % kFlatAlign, 0u) << name;
    EXPECT_EQ(p->flat_offset, next) << name << ": tensors follow each other in name order";
    next = p->flat_offset + (p->numel() + kFlatAlign - 1) / kFlatAlign * kFlatAlign;
    EXPECT_EQ(p->value.data(), flat.params->value_arena() + p->flat_offset) << name;
    EXPECT_EQ(p->grad.data(), flat.params->grad_arena() + p->flat_offset) << name;
    EXPECT_FALSE(p->value.owned());
    EXPECT_EQ(p->value.to_host(), plain.params->find(name)->value.to_host()) << name << ": values moved intact";
  }
  EXPECT_EQ(next, l.used);
}

// The local elements a set of slabs covers, as global index -> local index.
std::map<int64_t, int64_t> coverage(const Param& p, const std::vector<Slab>& slabs) {
  std::map<int64_t, int64_t> out;
  for (const Slab& s : slabs)
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < s.cols; ++c) {
        const int64_t g = (s.global_row + r) * p.global_cols() + s.global_col + c;
        EXPECT_TRUE(out.emplace(g, (s.local_row + r) * p.local_cols + s.local_col + c).second)
            << p.spec.name << ": global element " << g << " covered twice";
      }
  return out;
}

TEST(ZeroLayout, RangesOfATensorTileItsSlabsExactly) {
  // Every split of each tensor's local elements into three runs: the runs' rectangles,
  // intersected with the slabs, cover what the slabs cover, each element once, each at the
  // same local place, and only local elements inside the run.
  Store store(0);
  for (auto& [name, p] : store.params->all()) {
    const std::map<int64_t, int64_t> want = coverage(*p, p->slabs);
    const size_t n = p->numel();
    for (size_t a = 0; a <= n; a += 5)
      for (size_t b = a; b <= n; b += 7) {
        std::map<int64_t, int64_t> got;
        for (LocalRange r : {LocalRange{0, a}, LocalRange{a, b}, LocalRange{b, n}}) {
          for (const auto& [g, local] : coverage(*p, slabs_in_range(*p, r))) {
            EXPECT_TRUE(size_t(local) >= r.begin && size_t(local) < r.end) << name;
            EXPECT_TRUE(got.emplace(g, local).second) << name << ": element " << g << " in two runs";
          }
          EXPECT_LE(slabs_in_range(*p, r).size(), 3 * p->slabs.size()) << name;
        }
        EXPECT_EQ(got, want) << name << " split at " << a << ", " << b;
      }
  }
}

TEST(ZeroLayout, ShardedMomentsAreOneDpthOfTheFullState) {
  for (int dp : {2, 3, 4}) {
    Store store(dp);
    ParamStore& params = *store.params;
    const OptimizerState full(params);
    size_t numel = 0;
    for (auto& [name, p] : params.all()) numel += p->numel();
    EXPECT_EQ(full.bytes(), 8 * numel);
    std::map<std::string, size_t> covered;
    size_t bytes = 0;
    for (int shard = 0; shard < dp; ++shard) {
      OptimizerState state(params, shard);
      EXPECT_TRUE(state.sharded());
      // Measured from the state: every shard holds the same bytes, 1/dp of the padded total.
      EXPECT_EQ(state.bytes(), 8 * params.flat_layout().total() / size_t(dp)) << "dp " << dp << " shard " << shard;
      bytes += state.bytes();
      for (auto& [name, p] : params.all()) {
        const LocalRange r = state.range(name);
        EXPECT_EQ(state.m(name).size(), r.size());
        covered[name] += r.size();
      }
    }
    EXPECT_EQ(bytes, 8 * params.flat_layout().total());
    EXPECT_LE(bytes - full.bytes(), 8 * (params.all().size() + size_t(dp)) * kFlatAlign) << "only padding is added";
    for (auto& [name, p] : params.all()) EXPECT_EQ(covered[name], p->numel()) << name << ": ranges tile the tensor";
  }
}

TEST(ZeroLayout, MomentsGoToAndFromTheWholeLocalShard) {
  Store store(2);
  ParamStore& params = *store.params;
  OptimizerState state(params, 1);
  for (auto& [name, p] : params.all()) {
    std::vector<float> local(p->numel());
    std::iota(local.begin(), local.end(), 1.0f);
    state.upload_local(name, state.m(name), local.data());
    std::vector<float> back(p->numel(), -1.0f);
    state.download_local(name, state.m(name), back.data());
    const LocalRange r = state.range(name);
    for (size_t i = 0; i < p->numel(); ++i)
      EXPECT_EQ(back[i], i >= r.begin && i < r.end ? local[i] : 0.0f) << name << " element " << i;
  }
}

TEST(ZeroLayout, EachBucketIsSplitDpWaysAndTheShardArenasTileIt) {
  // Two buckets as the Job makes them (a stage's tensors, then a shared one), 3 shards:
  // each bucket padded to 3 equal aligned parts; shard k owns part k of every bucket, its
  // arena those parts back to back; together the shards own each element exactly once, and
  // a parameter's masters, moments and gradient line up at the same flat positions.
  for (int shards : {1, 2, 3}) {
    std::unique_ptr<Ops> ops = make_cpu_ops();
    ParamStore params(*ops, 2, 1, 7);
    for (const ParamSpec& spec : specs()) params.get_or_create(spec);
    params.flatten(shards, false, -1,
                   {{1, {"ln_f.bias", "h.0.attn.qkv.weight", "h.0.ln_1.weight", "h.0.attn.proj.weight"}},
                    {-1, {"wte.weight"}}});
    const FlatLayout& l = params.flat_layout();
    ASSERT_EQ(l.buckets.size(), 2u);
    EXPECT_EQ(l.buckets[0].stage, 1);
    EXPECT_EQ(l.buckets[1].stage, -1);
    EXPECT_EQ(l.buckets[0].begin, 0u);
    EXPECT_EQ(l.buckets[1].begin, size_t(shards) * l.buckets[0].shard_size);
    EXPECT_EQ(l.buckets[1].shard_begin, l.buckets[0].shard_size);
    EXPECT_EQ(l.shard_size, l.buckets[0].shard_size + l.buckets[1].shard_size);
    for (const FlatBucket& b : l.buckets) EXPECT_EQ(b.shard_size % kFlatAlign, 0u);
    EXPECT_EQ(params.find("wte.weight")->bucket, 1);
    EXPECT_EQ(params.find("wte.weight")->flat_offset, l.buckets[1].begin);
    EXPECT_EQ(params.find("h.0.attn.proj.weight")->flat_offset, 0u) << "name order within a bucket";
    std::map<std::string, size_t> covered;
    for (int k = 0; k < shards; ++k) {
      std::vector<bool> used(l.shard_size, false);  // shard k's arena
      const OptimizerState state(params, k);
      for (auto& [name, p] : params.all()) {
        const LocalRange r = shard_range(*p, l, k);
        EXPECT_EQ(state.range(name).begin, r.begin) << name;
        EXPECT_EQ(state.range(name).end, r.end) << name;
        covered[name] += r.size();
        if (r.empty()) continue;
        // Inside part k of the parameter's bucket.
        const size_t lo = l.part_begin(p->bucket, k), hi = lo + l.buckets[size_t(p->bucket)].shard_size;
        EXPECT_GE(p->flat_offset + r.begin, lo) << name;
        EXPECT_LE(p->flat_offset + r.end, hi) << name;
        const size_t at = shard_arena_offset(*p, l, k);
        EXPECT_EQ(at, l.buckets[size_t(p->bucket)].shard_begin + p->flat_offset + r.begin - lo) << name;
        for (size_t i = at; i < at + r.size(); ++i) {
          ASSERT_LT(i, l.shard_size) << name;
          EXPECT_FALSE(used[i]) << name << ": shard " << k << " arena element " << i << " used twice";
          used[i] = true;
        }
      }
    }
    for (auto& [name, p] : params.all()) EXPECT_EQ(covered[name], p->numel()) << name << ": the shards tile it";
  }
}

TEST(ZeroLayout, MergedRunsSumWhatThePartsSumAndCrossOnlyPadding) {
  // Gradients of small integers (sums exact in double): per shard of 1, 2 and 3, the parts
  // a rank sums (its ranges, one tensor left out as a non-primary one would be) give the
  // same sum of squares over merge_flat_runs's runs as part by part, and the runs never
  // cover an element of the left-out tensor or of another shard's part.
  for (int shards : {1, 2, 3}) {
    Store store(shards);
    ParamStore& params = *store.params;
    std::vector<const Param*> all;
    for (auto& [name, p] : params.all()) {
      all.push_back(p.get());
      std::vector<float> g(p->numel());
      for (size_t i = 0; i < g.size(); ++i) g[i] = float((i * 7 + p->flat_offset) % 13) - 6.0f;
      p->grad.upload(g.data());
    }
    const std::vector<float> arena = Buffer<float>::view(*store.ops, params.grad_arena(), params.flat_layout().total()).to_host();
    for (const char* left_out : {"", "h.0.ln_1.weight"}) {  // the third of five in flat order
      for (int k = 0; k < shards; ++k) {
        std::vector<std::pair<const Param*, LocalRange>> parts;
        std::vector<bool> allowed(arena.size(), false);
        double want = 0;
        for (auto& [name, p] : params.all()) {
          const LocalRange r = shard_range(*p, params.flat_layout(), k);
          if (name == left_out || r.empty()) continue;
          parts.emplace_back(p.get(), r);
          for (size_t i = r.begin; i < r.end; ++i) {
            want += double(arena[p->flat_offset + i]) * arena[p->flat_offset + i];
            allowed[p->flat_offset + i] = true;
          }
        }
        const auto runs = merged_flat_runs(parts, all);
        double got = 0;
        for (const auto& [begin, end] : runs)
          for (size_t i = begin; i < end; ++i) {
            got += double(arena[i]) * arena[i];
            EXPECT_TRUE(allowed[i] || arena[i] == 0.0f) << "run crosses element " << i;
            for (auto& [name, p] : params.all())
              if (i >= p->flat_offset && i < p->flat_offset + p->numel()) {
                EXPECT_TRUE(allowed[i]) << "run covers " << name << " element " << i - p->flat_offset;
              }
          }
        EXPECT_EQ(got, want) << shards << " shards, shard " << k << ", left out '" << left_out << "'";
        if (shards == 1) {
          EXPECT_EQ(runs.size(), *left_out ? 2u : 1u) << "runs merge across padding";
        }
      }
    }
  }
}

TEST(ZeroLayout, ABucketListMissingOrRepeatingAParameterIsRefused) {
  std::unique_ptr<Ops> ops = make_cpu_ops();
  ParamStore a(*ops, 2, 1, 7), b(*ops, 2, 1, 7);
  for (const ParamSpec& spec : specs()) {
    a.get_or_create(spec);
    b.get_or_create(spec);
  }
  EXPECT_THROW(a.flatten(2, false, -1, {{0, {"wte.weight"}}}), std::logic_error);
  EXPECT_THROW(b.flatten(2, false, -1,
                         {{0, {"wte.weight", "ln_f.bias", "h.0.ln_1.weight", "h.0.attn.qkv.weight"}},
                          {-1, {"h.0.attn.proj.weight", "wte.weight"}}}),
               std::logic_error);
}

}  // namespace
