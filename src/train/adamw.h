// AdamW over the parameters one rank holds, with the fp32 moments of OptimizerState.
// Weight decay applies to matrices (ParamSpec::weight_decay), not to biases and
// layernorm gains, as in GPT-2 training.
//
// Full state: every element of every parameter is updated. ZeRO-1 (a sharded state,
// parallel.zero: 1): only the elements of the rank's 1/dp range of the flattened parameters
// (OptimizerState::range), from the gradients the reduce-scatter summed there; the trainer
// then all-gathers what the layers compute with: under bf16 the bf16 copies (the masters
// are sharded too, each rank holding its range's: Param::master_range), under fp32 the
// masters themselves.
#pragma once
#include <memory>

#include "core/config.h"
#include "model/optimizer_state.h"
#include "model/param.h"

namespace pptrain {

class AdamW {
 public:
  // Full moments for every parameter.
  AdamW(ParamStore& params, const TrainingConfig& cfg);
  // ZeRO-1: moments for shard `shard` of the flattened `params` only.
  AdamW(ParamStore& params, const TrainingConfig& cfg, int shard);
  // One update of every parameter element whose moments this rank holds, from its
  // accumulated gradient times `grad_scale` (the clip factor, 1 when not clipping; the
  // gradients themselves are left as they are); `t` is the 1-based step. The bf16 working
  // copy, where a parameter has one, gets the updated elements rewritten in the same pass;
  // bf16_stale is cleared when that is the whole parameter.
  void step(double lr, int t, float grad_scale = 1.0f);
  // The same update out of place: reads the current masters and moments and writes the
  // updated ones into `values` (an arena of the flattened parameters' form,
  // [flat_layout().total()]; only the elements this rank updates are written) and `moments`
  // (a state of state()'s form), leaving the current ones as they were; the bf16 copies get
  // the updated values as with step(). The same bits as step().
  void step_into(Buffer<float>& values, OptimizerState& moments, double lr, int t, float grad_scale);
  // The moments (checkpoints write and read them).
  OptimizerState& state() { return *state_; }

 private:
  // The update from the current masters and moments into `values` (nullptr: in place) and
  // `moments`.
  void update(float* values, OptimizerState& moments, double lr, int t, float grad_scale);

  ParamStore& params_;
  TrainingConfig cfg_;
  std::unique_ptr<OptimizerState> state_;
};

}  // namespace pptrain
