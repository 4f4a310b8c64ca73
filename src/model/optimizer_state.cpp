#include "model/optimizer_state.h"

#include <algorithm>

#include "core/error.h"

namespace pptrain {

OptimizerState::OptimizerState(ParamStore& params) {
  for (auto& [name, p] : params.all()) {
    const size_t n = p->numel();
    moments_[name] = Moments{Buffer<float>(params.ops(), n), Buffer<float>(params.ops(), n), LocalRange{0, n}};
    numel_[name] = n;
    bytes_ += 2 * n * sizeof(float);
  }
  zero();
}

OptimizerState::OptimizerState(ParamStore& params, int shard) : sharded_(true) {
  PPTRAIN_CHECK(params.flat(), "a sharded optimizer state needs the flattened parameters (ParamStore::flatten)");
  const FlatLayout& layout = params.flat_layout();
  PPTRAIN_CHECK(shard >= 0 && shard < layout.shards, "optimizer shard ", shard, " of ", layout.shards);
  Ops& ops = params.ops();
  m_arena_ = Buffer<float>(ops, layout.shard_size);
  v_arena_ = Buffer<float>(ops, layout.shard_size);
  bytes_ = 2 * layout.shard_size * sizeof(float);
  for (auto& [name, p] : params.all()) {
    // The part the shard owns, at its place in the shard's arena (model/param.h).
    const LocalRange r = shard_range(*p, layout, shard);
    const size_t at = shard_arena_offset(*p, layout, shard);
    moments_[name] = Moments{Buffer<float>::view(ops, m_arena_.data() + at, r.size()),
                             Buffer<float>::view(ops, v_arena_.data() + at, r.size()), r};
    numel_[name] = p->numel();
  }
  zero();
}

void OptimizerState::zero() {
  if (sharded_) {
    m_arena_.zero();
    v_arena_.zero();
    return;
  }
  for (auto& [name, s] : moments_) {
    s.m.zero();
    s.v.zero();
  }
}

void OptimizerState::swap(OptimizerState& other) {
  bool same_form = sharded_ == other.sharded_ && bytes_ == other.bytes_ && numel_ == other.numel_;
  for (auto& [name, s] : moments_) {
    const auto it = other.moments_.find(name);
    same_form = same_form && it != other.moments_.end() && it->second.range.begin == s.range.begin &&
                it->second.range.end == s.range.end;
  }
  PPTRAIN_CHECK(same_form, "OptimizerState::swap: states of different forms");
  // Buffers are exchanged, never copied: a ZeRO-1 state's views keep pointing into the arenas
  // they were made from, which move with them.
  for (auto& [name, s] : moments_) {
    Moments& o = other.moments_.at(name);
    std::swap(s.m, o.m);
    std::swap(s.v, o.v);
  }
  std::swap(m_arena_, other.m_arena_);
  std::swap(v_arena_, other.v_arena_);
}

void OptimizerState::download_local(const std::string& name, const Buffer<float>& moment, float* host) const {
  const LocalRange r = range(name);
  std::fill(host, host + numel_.at(name), 0.0f);
  moment.download(host + r.begin);
}

void OptimizerState::upload_local(const std::string& name, Buffer<float>& moment, const float* host) const {
  moment.upload(host + range(name).begin);
}

}  // namespace pptrain
