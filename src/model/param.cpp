#include "model/param.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/rng.h"

namespace pptrain {
namespace {
size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
}  // namespace

void shard_layout(const ParamSpec& spec, int tp, int tp_rank, Param& out) {
  const int64_t rows = spec.global_shape[0];
  const int64_t cols = spec.global_shape.size() > 1 ? spec.global_shape[1] : 1;
  out.slabs.clear();
  out.replicated_over_tp = spec.shard == Shard::Replicated || tp == 1;
  switch (spec.shard) {
    case Shard::Replicated:
      out.local_rows = rows;
      out.local_cols = cols;
      out.slabs.push_back({0, 0, 0, 0, rows, cols});
      break;
    case Shard::Rows: {
      int64_t padded = spec.padded_rows ? spec.padded_rows : rows;
      PPTRAIN_CHECK(padded % tp == 0, spec.name);
      int64_t part = padded / tp, first = tp_rank * part;
      int64_t real = std::max<int64_t>(0, std::min(part, rows - first));  // padding rows hold no data
      out.local_rows = part;
      out.local_cols = cols;
      if (real > 0) out.slabs.push_back({first, 0, 0, 0, real, cols});
      break;
    }
    case Shard::Rows3:
    case Shard::RowSections: {
      // Each section split into tp parts; the local tensor is this rank's part of each, in order.
      const std::vector<int64_t> sections =
          spec.shard == Shard::Rows3 ? std::vector<int64_t>(3, rows / 3) : spec.row_sections;
      PPTRAIN_CHECK(spec.shard != Shard::Rows3 || rows % 3 == 0, spec.name);
      int64_t global_row = 0;
      out.local_rows = 0;
      out.local_cols = cols;
      for (int64_t section : sections) {
        PPTRAIN_CHECK(section % tp == 0, spec.name);
        const int64_t part = section / tp;
        out.slabs.push_back({global_row + tp_rank * part, 0, out.local_rows, 0, part, cols});
        global_row += section;
        out.local_rows += part;
      }
      PPTRAIN_CHECK(global_row == rows, spec.name, ": sections sum to ", global_row, ", not ", rows);
      break;
    }
    case Shard::Cols: {
      PPTRAIN_CHECK(cols % tp == 0, spec.name);
      int64_t part = cols / tp;
      out.local_rows = rows;
      out.local_cols = part;
      out.slabs.push_back({0, tp_rank * part, 0, 0, rows, part});
      break;
    }
  }
}

std::vector<float> initial_values(const Param& p, uint64_t seed) {
  std::vector<float> v(p.numel(), 0.0f);
  if (p.spec.init == Init::Zeros) return v;
  const CounterRng rng(seed, p.spec.name);
  const int64_t gcols = p.global_cols();
  const bool ones = p.spec.init == Init::Ones;
  // Each element is a pure function of its global index (a Philox draw, a log and a cos:
  // about 30 ns), so the threads split a slab's elements without changing a bit. One thread
  // took 3.7 s of a GPT-2 124M start on a 2-core VM; a rank of an 8B model holds billions.
  for (const Slab& s : p.slabs) {
    const int64_t n = s.rows * s.cols;
#pragma omp parallel for schedule(static) if (n >= 65536)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = i / s.cols, c = i % s.cols;
      float& x = v[size_t((s.local_row + r) * p.local_cols + s.local_col + c)];
      x = ones ? 1.0f : p.spec.init_std * rng.normal(uint64_t((s.global_row + r) * gcols + s.global_col + c));
    }
  }
  return v;
}

FlatLayout flat_layout_of(const std::vector<std::vector<size_t>>& bucket_numels, int shards,
                          const std::vector<int>& stages) {
  PPTRAIN_CHECK(shards >= 1, "flat layout over ", shards, " shards");
  PPTRAIN_CHECK(stages.empty() || stages.size() == bucket_numels.size(), "flat layout: ", stages.size(),
                " stages for ", bucket_numels.size(), " buckets");
  FlatLayout l;
  l.shards = shards;
  size_t begin = 0;
  for (size_t b = 0; b < bucket_numels.size(); ++b) {
    FlatBucket bucket;
    bucket.stage = stages.empty() ? -1 : stages[b];
    size_t used = 0;
    for (size_t n : bucket_numels[b]) used += round_up(n, kFlatAlign);
    bucket.begin = begin;
    bucket.shard_size = round_up((used + size_t(shards) - 1) / size_t(shards), kFlatAlign);
    bucket.shard_begin = l.shard_size;
    l.used += used;
    l.shard_size += bucket.shard_size;
    begin += bucket.shard_size * size_t(shards);
    l.buckets.push_back(bucket);
  }
  return l;
}

LocalRange local_range_in(const Param& p, size_t lo, size_t hi) {
  LocalRange r;
  const size_t first = p.flat_offset, last = p.flat_offset + p.numel();
  if (hi <= first || lo >= last) return r;
  r.begin = std::max(lo, first) - first;
  r.end = std::min(hi, last) - first;
  return r;
}

LocalRange shard_range(const Param& p, const FlatLayout& layout, int shard) {
  PPTRAIN_CHECK(shard >= 0 && shard < layout.shards && p.bucket >= 0 && size_t(p.bucket) < layout.buckets.size(),
                "parameter ", p.spec.name, ": shard ", shard, " of ", layout.shards, ", bucket ", p.bucket, " of ",
                layout.buckets.size());
  const size_t lo = layout.part_begin(p.bucket, shard);
  return local_range_in(p, lo, lo + layout.buckets[size_t(p.bucket)].shard_size);
}

size_t shard_arena_offset(const Param& p, const FlatLayout& layout, int shard) {
  // The part's place in the shard arena: its flat position less the part's start, after the
  // shard's parts of the earlier buckets.
  const LocalRange r = shard_range(p, layout, shard);
  if (r.empty()) return 0;
  return layout.buckets[size_t(p.bucket)].shard_begin + p.flat_offset + r.begin - layout.part_begin(p.bucket, shard);
}

std::vector<std::pair<size_t, size_t>> merged_flat_runs(const std::vector<std::pair<const Param*, LocalRange>>& parts,
                                                        const std::vector<const Param*>& all) {
  std::map<const Param*, LocalRange> listed;
  for (const auto& [p, r] : parts)
    if (!r.empty()) listed[p] = r;
  std::vector<const Param*> order;
  for (const Param* p : all)
    if (p->numel() > 0) order.push_back(p);
  std::sort(order.begin(), order.end(), [](const Param* a, const Param* b) { return a->flat_offset < b->flat_offset; });
  std::vector<std::pair<size_t, size_t>> runs;
  bool open = false, at_tensor_end = false;  // the last run ends where its last tensor's elements end
  for (const Param* p : order) {
    const auto it = listed.find(p);
    if (it == listed.end()) {  // elements not listed: no run may cross them
      open = false;
      continue;
    }
    const LocalRange r = it->second;
    const size_t begin = p->flat_offset + r.begin, end = p->flat_offset + r.end;
    // Between the last run and this part lies only the previous tensor's padding when that
    // tensor was covered to its end and this one is covered from its start.
    if (open && at_tensor_end && r.begin == 0) runs.back().second = end;
    else runs.emplace_back(begin, end);
    open = true;
    at_tensor_end = r.end == p->numel();
  }
  return runs;
}

std::vector<Slab> slabs_in_range(const Param& p, LocalRange r) {
  std::vector<Slab> out;
  if (r.empty()) return out;
  const int64_t cols = p.local_cols, begin = int64_t(r.begin), last = int64_t(r.end) - 1;
  const int64_t r0 = begin / cols, c0 = begin % cols, r1 = last / cols, c1 = last % cols;
  struct Rect { int64_t row, col, rows, cols; };  // in the local tensor
  std::vector<Rect> rects;
  if (r0 == r1) {
    rects.push_back({r0, c0, 1, c1 - c0 + 1});
  } else {
    rects.push_back({r0, c0, 1, cols - c0});
    if (r1 > r0 + 1) rects.push_back({r0 + 1, 0, r1 - r0 - 1, cols});
    rects.push_back({r1, 0, 1, c1 + 1});
  }
  for (const Rect& a : rects)
    for (const Slab& s : p.slabs) {
      const int64_t row = std::max(a.row, s.local_row), row_end = std::min(a.row + a.rows, s.local_row + s.rows);
      const int64_t col = std::max(a.col, s.local_col), col_end = std::min(a.col + a.cols, s.local_col + s.cols);
      if (row >= row_end || col >= col_end) continue;
      out.push_back({s.global_row + row - s.local_row, s.global_col + col - s.local_col, row, col, row_end - row,
                     col_end - col});
    }
  return out;
}

void Param::set_masters(const float* host) {
  if (!sharded_masters) {
    value.upload(host);
    bf16_stale = true;
    return;
  }
  value.upload(host + master_range.begin);
  if (numel() == 0) return;
  // The whole tensor through the backend's cast, as refresh_bf16 rounds a master: the
  // masters outside the range exist on other dp ranks only, so the copy is made here.
  Ops& ops = *value_bf16.ops();
  Buffer<float> whole(ops, numel());
  whole.upload(host);
  ops.cast(value_bf16.data(), whole.data(), numel());
  bf16_stale = false;
}

void Param::zero_masters() {
  value.zero();
  if (!sharded_masters) {
    bf16_stale = true;
    return;
  }
  value_bf16.zero();  // bf16 zero is the all-zero bits, the rounding of fp32 zero
  bf16_stale = false;
}

void Param::download_masters(float* host) const {
  std::fill(host, host + numel(), 0.0f);
  value.download(host + master_range.begin);
}

void ParamStore::flatten(int shards, bool bf16_copies, int master_shard, const std::vector<Bucket>& buckets) {
  PPTRAIN_CHECK(!flat(), "ParamStore::flatten called twice");
  PPTRAIN_CHECK(master_shard < 0 || (bf16_copies && master_shard < shards), "ParamStore::flatten: master shard ",
                master_shard, " of ", shards, bf16_copies ? "" : " without bf16 copies");
  // The buckets' tensors, in name order within each; every parameter in exactly one.
  std::vector<Bucket> groups = buckets;
  if (groups.empty()) {
    groups.emplace_back();
    for (auto& [name, p] : params_) groups[0].names.push_back(name);
  }
  std::vector<std::vector<size_t>> numels;
  std::vector<int> stages;
  std::map<std::string, int> bucket_of;
  for (Bucket& g : groups) {
    std::sort(g.names.begin(), g.names.end());
    numels.emplace_back();
    stages.push_back(g.stage);
    for (const std::string& name : g.names) {
      const Param* p = find(name);
      PPTRAIN_CHECK(p && bucket_of.emplace(name, int(stages.size()) - 1).second, "ParamStore::flatten: parameter ",
                    name, p ? " is in two buckets" : " does not exist");
      numels.back().push_back(p->numel());
    }
  }
  PPTRAIN_CHECK(bucket_of.size() == params_.size(), "ParamStore::flatten: the buckets hold ", bucket_of.size(),
                " of the ", params_.size(), " parameters");
  layout_ = flat_layout_of(numels, shards, stages);
  master_shard_ = master_shard;
  flat_ = true;
  // The gradients hold nothing yet (zeroed before every step): dropping them first keeps the
  // peak at the unflattened masters plus the masters' and copies' arenas.
  for (auto& [name, p] : params_) p->grad.reset();
  value_arena_ = Buffer<float>(ops_, masters_sharded() ? layout_.shard_size : layout_.total());
  value_arena_.zero();
  if (bf16_copies) {
    bf16_arena_ = Buffer<bfloat16>(ops_, layout_.total());
    bf16_arena_.zero();
  }
  for (size_t b = 0; b < groups.size(); ++b) {
    size_t offset = layout_.buckets[b].begin;
    for (const std::string& name : groups[b].names) {
      Param* p = find(name);
      p->flat_offset = offset;
      p->bucket = int(b);
      const size_t n = p->numel();
      if (bf16_copies) {
        p->value_bf16 = Buffer<bfloat16>::view(ops_, bf16_arena_.data() + offset, n);
        if (n) ops_.cast(p->value_bf16.data(), p->value.data(), n);
        p->bf16_stale = false;
      }
      // The masters held: all of the tensor, at its flat position; or the part the master
      // shard owns, at its place in that shard's arena.
      const LocalRange r = masters_sharded() ? shard_range(*p, layout_, master_shard) : LocalRange{0, n};
      const size_t at = masters_sharded() ? shard_arena_offset(*p, layout_, master_shard) : offset;
      if (!r.empty()) ops_.copy(value_arena_.data() + at, p->value.data() + r.begin, r.size() * sizeof(float));
      p->value = Buffer<float>::view(ops_, value_arena_.data() + (r.empty() ? 0 : at), r.size());
      p->master_range = r;
      p->sharded_masters = masters_sharded();
      offset += round_up(n, kFlatAlign);
    }
  }
  grad_arena_ = Buffer<float>(ops_, layout_.total());
  grad_arena_.zero();
  view_arenas();
}

void ParamStore::view_arenas() {
  // A Param's masters are its master_range: at its flat position in a whole arena, or at
  // its place in the master shard's arena.
  for (auto& [name, p] : params_) {
    const LocalRange r = p->master_range;
    const size_t at = r.empty() ? 0 : masters_sharded() ? shard_arena_offset(*p, layout_, master_shard_) : p->flat_offset;
    p->value = Buffer<float>::view(ops_, value_arena_.data() + at, r.size());
    p->grad = Buffer<float>::view(ops_, grad_arena_.data() + p->flat_offset, p->numel());
  }
}

void ParamStore::swap_grad_arena(Buffer<float>& other) {
  PPTRAIN_CHECK(flat() && other.size() == grad_arena_.size(), "ParamStore::swap_grad_arena: ", other.size(),
                " elements for an arena of ", grad_arena_.size());
  std::swap(grad_arena_, other);
  view_arenas();
}

void ParamStore::swap_value_arena(Buffer<float>& other) {
  PPTRAIN_CHECK(flat() && other.size() == value_arena_.size(), "ParamStore::swap_value_arena: ", other.size(),
                " elements for an arena of ", value_arena_.size());
  std::swap(value_arena_, other);
  view_arenas();
}

Param& ParamStore::get_or_create(const ParamSpec& spec) {
  auto it = params_.find(spec.name);
  if (it != params_.end()) {
    PPTRAIN_CHECK(it->second->spec.global_shape == spec.global_shape, spec.name);
    return *it->second;
  }
  PPTRAIN_CHECK(!flat(), "parameter ", spec.name, " created after ParamStore::flatten");
  auto p = std::make_unique<Param>();
  p->spec = spec;
  shard_layout(spec, tp_, tp_rank_, *p);
  p->value = Buffer<float>(ops_, p->numel());
  p->master_range = LocalRange{0, p->numel()};
  p->grad = Buffer<float>(ops_, p->numel());
  auto init = initial_values(*p, seed_);
  p->set_masters(init.data());
  Param& ref = *p;
  params_[spec.name] = std::move(p);
  return ref;
}

Param* ParamStore::find(const std::string& name) {
  auto it = params_.find(name);
  return it == params_.end() ? nullptr : it->second.get();
}

void ParamStore::zero_grads() {
  if (flat()) return grad_arena_.zero();
  for (auto& [name, p] : params_) p->grad.zero();
}

namespace {

void round_into_bf16(Ops& ops, Param& p) {
  if (p.value_bf16.size() != p.numel()) p.value_bf16 = Buffer<bfloat16>(ops, p.numel());
  // Sharded masters: the masters held, into their place in the copy.
  if (!p.value.empty()) ops.cast(p.value_bf16.data() + p.master_range.begin, p.value.data(), p.value.size());
  p.bf16_stale = false;
}

}  // namespace

void ParamStore::refresh_bf16() {
  for (auto& [name, p] : params_) round_into_bf16(ops_, *p);
}

void ParamStore::refresh_stale_bf16() {
  for (auto& [name, p] : params_) {
    if (!p->bf16_stale && p->value_bf16.size() == p->numel()) continue;
    PPTRAIN_CHECK(!p->sharded_masters, "parameter ", name,
                  ": its bf16 copy is stale, but this rank holds only part of its fp32 masters (ZeRO-1 under "
                  "bf16), so it cannot be refreshed; whatever wrote the masters must write the copy "
                  "(Param::set_masters)");
    round_into_bf16(ops_, *p);
  }
}

}  // namespace pptrain
