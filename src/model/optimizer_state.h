// OptimizerState: the AdamW moments of every parameter shard one rank holds, by parameter
// name: m (first moment) and v (second moment), fp32, each the shape of its parameter's
// local shard, zero at the start. The optimizer (train/adamw.h) updates them; checkpoints
// write and read them. It sits beside the parameters so that checkpoints need nothing
// from the training loop.
#pragma once
#include <map>
#include <string>

#include "backend/buffer.h"
#include "model/param.h"

namespace pptrain {

class OptimizerState {
 public:
  // Zero moments for every parameter of `params` (all its parameters must exist).
  explicit OptimizerState(ParamStore& params);
  Buffer<float>& m(const std::string& name) { return moments_.at(name).m; }
  Buffer<float>& v(const std::string& name) { return moments_.at(name).v; }
  void zero();

 private:
  struct Moments {
    Buffer<float> m, v;  // [numel of the local shard]
  };
  std::map<std::string, Moments> moments_;
};

}  // namespace pptrain
