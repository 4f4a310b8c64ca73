#include "train/adamw.h"

namespace pptrain {

AdamW::AdamW(ParamStore& params, const TrainingConfig& cfg) : params_(params), cfg_(cfg) {
  for (auto& [name, p] : params.all())
    state_[name] = Moments{Buffer<float>(params.ops(), p->numel()), Buffer<float>(params.ops(), p->numel())};
}

void AdamW::step(double lr, int t) {
  Ops& ops = params_.ops();
  for (auto& [name, p] : params_.all()) {
    Moments& s = state_.at(name);
    float wd = p->spec.weight_decay ? float(cfg_.weight_decay) : 0.0f;
    ops.adamw(p->value.data(), p->grad.data(), s.m.data(), s.v.data(), p->numel(), float(lr),
              float(cfg_.beta1), float(cfg_.beta2), float(cfg_.eps), wd, t);
  }
}

}  // namespace pptrain
