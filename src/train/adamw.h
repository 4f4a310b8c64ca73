// AdamW over the parameters one rank holds, with the fp32 moments of OptimizerState.
// Weight decay applies to matrices (ParamSpec::weight_decay), not to biases and
// layernorm gains, as in GPT-2 training.
#pragma once
#include "core/config.h"
#include "model/optimizer_state.h"
#include "model/param.h"

namespace pptrain {

class AdamW {
 public:
  AdamW(ParamStore& params, const TrainingConfig& cfg);
  // One update of every parameter from its accumulated gradient; `t` is the 1-based step.
  void step(double lr, int t);
  // The moments (checkpoints write and read them).
  OptimizerState& state() { return state_; }

 private:
  ParamStore& params_;
  TrainingConfig cfg_;
  OptimizerState state_;
};

}  // namespace pptrain
