#include "model/param.h"

#include "core/error.h"
#include "core/rng.h"

namespace pptrain {

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
  for (const Slab& s : p.slabs)
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < s.cols; ++c) {
        float& x = v[(s.local_row + r) * p.local_cols + s.local_col + c];
        if (p.spec.init == Init::Ones) {
          x = 1.0f;
        } else {
          uint64_t g = uint64_t((s.global_row + r) * gcols + s.global_col + c);
          x = p.spec.init_std * rng.normal(g);
        }
      }
  return v;
}

Param& ParamStore::get_or_create(const ParamSpec& spec) {
  auto it = params_.find(spec.name);
  if (it != params_.end()) {
    PPTRAIN_CHECK(it->second->spec.global_shape == spec.global_shape, spec.name);
    return *it->second;
  }
  auto p = std::make_unique<Param>();
  p->spec = spec;
  shard_layout(spec, tp_, tp_rank_, *p);
  p->value = Buffer<float>(ops_, p->numel());
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
  for (auto& [name, p] : params_) p->grad.zero();
}

namespace {

void round_into_bf16(Ops& ops, Param& p) {
  if (p.value_bf16.size() != p.numel()) p.value_bf16 = Buffer<bfloat16>(ops, p.numel());
  if (p.numel()) ops.cast(p.value_bf16.data(), p.value.data(), p.numel());
  p.bf16_stale = false;
}

}  // namespace

void ParamStore::refresh_bf16() {
  for (auto& [name, p] : params_) round_into_bf16(ops_, *p);
}

void ParamStore::refresh_stale_bf16() {
  for (auto& [name, p] : params_)
    if (p->bf16_stale || p->value_bf16.size() != p->numel()) round_into_bf16(ops_, *p);
}

}  // namespace pptrain
