// AdamW over the parameters one rank holds: fp32 moments m, v per parameter shard.
// Weight decay applies to matrices (ParamSpec::weight_decay), not to biases and
// layernorm gains, as in GPT-2 training.
#pragma once
#include <map>
#include <string>

#include "backend/buffer.h"
#include "core/config.h"
#include "model/param.h"

namespace pptrain {

class AdamW {
 public:
  AdamW(ParamStore& params, const TrainingConfig& cfg);
  // One update of every parameter from its accumulated gradient; `t` is the 1-based step.
  void step(double lr, int t);
  // Moments by parameter name (checkpoints read and write them).
  Buffer<float>& m(const std::string& name) { return state_.at(name).m; }
  Buffer<float>& v(const std::string& name) { return state_.at(name).v; }

 private:
  struct Moments { Buffer<float> m, v; };
  ParamStore& params_;
  TrainingConfig cfg_;
  std::map<std::string, Moments> state_;
};

}  // namespace pptrain
