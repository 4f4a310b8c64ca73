#include "train/adamw.h"

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
    ops.adamw(p->value.data() + r.begin, working, p->grad.data() + r.begin, state_->m(name).data(),
              state_->v(name).data(), r.size(), grad_scale, float(lr), float(cfg_.beta1), float(cfg_.beta2),
              float(cfg_.eps), wd, t);
    if (has_copy && r.size() == p->numel()) p->bf16_stale = false;
  }
}

}  // namespace pptrain
