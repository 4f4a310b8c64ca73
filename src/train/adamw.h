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
  // One update of every parameter from its accumulated gradient times `grad_scale` (the
  // clip factor, 1 when not clipping; the gradients themselves are left as they are); `t`
  // is the 1-based step. A parameter with a bf16 working copy gets it rewritten from the
  // updated master in the same pass, and its bf16_stale cleared.
  void step(double lr, int t, float grad_scale = 1.0f);
  // The moments (checkpoints write and read them).
  OptimizerState& state() { return state_; }

 private:
  ParamStore& params_;
  TrainingConfig cfg_;
  OptimizerState state_;
};

}  // namespace pptrain
