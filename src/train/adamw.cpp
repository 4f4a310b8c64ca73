#include "train/adamw.h"

#include "core/error.h"

namespace pptrain {

AdamW::AdamW(ParamStore& params, const TrainingConfig& cfg)
    : params_(params), cfg_(cfg), state_(std::make_unique<OptimizerState>(params)) {}

AdamW::AdamW(ParamStore& params, const TrainingConfig& cfg, int shard)
    : params_(params), cfg_(cfg), state_(std::make_unique<OptimizerState>(params, shard)) {}

void AdamW::step(double lr, int t, float grad_scale) {
  Ops& ops = params_.ops();
  for (auto& [name, p] : params_.all()) {
    const LocalRange r = state_->range(name);
    if (r.empty()) continue;
    float wd = p->spec.weight_decay ? float(cfg_.weight_decay) : 0.0f;
    // The bf16 copy, where the model has one (bf16 precision, allocated by the first refresh).
    const bool has_copy = p->numel() > 0 && p->value_bf16.size() == p->numel();
    View working = has_copy ? View(p->value_bf16.data() + r.begin) : View(nullptr);
    // The masters hold the local elements master_range (all, or under sharded masters the
    // same range as the moments): index them relative to it.
    PPTRAIN_CHECK(r.begin >= p->master_range.begin && r.end <= p->master_range.end, "AdamW: ", name,
                  ": moments of elements [", r.begin, ", ", r.end, ") but masters of [", p->master_range.begin, ", ",
                  p->master_range.end, ")");
    ops.adamw(p->value.data() + (r.begin - p->master_range.begin), working, p->grad.data() + r.begin, state_->m(name).data(),
              state_->v(name).data(), r.size(), grad_scale, float(lr), float(cfg_.beta1), float(cfg_.beta2),
              float(cfg_.eps), wd, t);
    if (has_copy && r.size() == p->numel()) p->bf16_stale = false;
  }
}

}  // namespace pptrain
