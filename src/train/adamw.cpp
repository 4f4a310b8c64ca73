#include "train/adamw.h"

#include <vector>

#include "core/error.h"

namespace pptrain {

AdamW::AdamW(ParamStore& params, const TrainingConfig& cfg)
    : params_(params), cfg_(cfg), state_(std::make_unique<OptimizerState>(params)) {}

AdamW::AdamW(ParamStore& params, const TrainingConfig& cfg, int shard)
    : params_(params), cfg_(cfg), state_(std::make_unique<OptimizerState>(params, shard)) {}

void AdamW::step(double lr, int t, float grad_scale) { update(nullptr, *state_, lr, t, grad_scale); }

void AdamW::step_into(Buffer<float>& values, OptimizerState& moments, double lr, int t, float grad_scale) {
  PPTRAIN_CHECK(params_.flat() && values.size() == params_.value_arena_size() &&
                    values.data() != params_.value_arena(),
                "AdamW::step_into: needs a second arena of the flattened parameters' form");
  PPTRAIN_CHECK(&moments != state_.get() && moments.sharded() == state_->sharded() &&
                    moments.bytes() == state_->bytes(),
                "AdamW::step_into: needs a second optimizer state of the same form");
  update(values.data(), moments, lr, t, grad_scale);
}

void AdamW::update(float* values, OptimizerState& moments, double lr, int t, float grad_scale) {
  Ops& ops = params_.ops();
  OptimizerState& state = *state_;
  // Every tensor in one op (a few launches on GPUs instead of one per tensor).
  std::vector<AdamwTensor> tensors;
  std::vector<Param*> refreshed;  // whose whole bf16 copy the update rewrites
  for (auto& [name, p] : params_.all()) {
    const LocalRange r = state.range(name);
    if (r.empty()) continue;
    float wd = p->spec.weight_decay ? float(cfg_.weight_decay) : 0.0f;
    // The bf16 copy, where the model has one (bf16 precision, allocated by the first refresh).
    const bool has_copy = p->numel() > 0 && p->value_bf16.size() == p->numel();
    View working = has_copy ? View(p->value_bf16.data() + r.begin) : View(nullptr);
    // The masters hold the local elements master_range (all, or under sharded masters the
    // same range as the moments): index them relative to it. Out of place (`values`: an
    // arena of the masters arena's size) the update goes to the same position there.
    PPTRAIN_CHECK(r.begin >= p->master_range.begin && r.end <= p->master_range.end, "AdamW: ", name,
                  ": moments of elements [", r.begin, ", ", r.end, ") but masters of [", p->master_range.begin, ", ",
                  p->master_range.end, ")");
    float* p_in = p->value.data() + (r.begin - p->master_range.begin);
    float* p_out = values ? values + (p_in - params_.value_arena()) : p_in;
    tensors.push_back({p_out, moments.m(name).data(), moments.v(name).data(), working, p_in,
                       p->grad.data() + r.begin, state.m(name).data(), state.v(name).data(), r.size(), wd});
    if (has_copy && r.size() == p->numel()) refreshed.push_back(p.get());
  }
  ops.adamw_multi(tensors, grad_scale, float(lr), float(cfg_.beta1), float(cfg_.beta2), float(cfg_.eps), t);
  for (Param* p : refreshed) p->bf16_stale = false;
}

}  // namespace pptrain
