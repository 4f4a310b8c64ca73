#include "model/optimizer_state.h"

namespace pptrain {

OptimizerState::OptimizerState(ParamStore& params) {
  for (auto& [name, p] : params.all())
    moments_[name] = Moments{Buffer<float>(params.ops(), p->numel()), Buffer<float>(params.ops(), p->numel())};
}

void OptimizerState::zero() {
  for (auto& [name, s] : moments_) {
    s.m.zero();
    s.v.zero();
  }
}

}  // namespace pptrain
