// Hand-made layer costs for the planner's tests (partition/cost_profile.h's LayerCost):
// what the partitioner and recompute-choice tests build their chains from.
#pragma once
#include "partition/cost_profile.h"

namespace pptrain::testing {

// One layer kind: F, I and W in ms; bytes kept F->I and I->W per microbatch; parameter
// and optimizer bytes.
inline LayerCost layer(double f, double i, double w, double act_fi, double act_iw, double param, double optim) {
  LayerCost l;
  l.forward_ms = f;
  l.input_grad_ms = i;
  l.weight_grad_ms = w;
  l.act_fi_bytes = act_fi;
  l.act_iw_bytes = act_iw;
  l.param_bytes = param;
  l.optim_bytes = optim;
  return l;
}

}  // namespace pptrain::testing
