#include "train/adamw.h"

namespace pptrain {

AdamW::AdamW(ParamStore& params, const TrainingConfig& cfg) : params_(params), cfg_(cfg), state_(params) {}

void AdamW::step(double lr, int t) {
  Ops& ops = params_.ops();
  for (auto& [name, p] : params_.all()) {
    float wd = p->spec.weight_decay ? float(cfg_.weight_decay) : 0.0f;
    ops.adamw(p->value.data(), p->grad.data(), state_.m(name).data(), state_.v(name).data(), p->numel(), float(lr),
              float(cfg_.beta1), float(cfg_.beta2), float(cfg_.eps), wd, t);
  }
}

}  // namespace pptrain
