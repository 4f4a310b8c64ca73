// UpdateBackup: what undoing one AdamW step exactly needs, for post-validation
// (training.post_validation): every parameter's fp32 master and both moments, copied
// before the optimistic update, and its reduced gradient, taken after it — 16 bytes per
// parameter element held by the rank. The gradient is part of it because the next step's
// pipeline overwrites the gradients before the step's validation arrives, and the
// corrected update needs them; it is taken by exchanging buffers (layers look a
// parameter's gradient up at each use), so only the masters and moments are copied.
// Copies are backend to backend (Ops::copy), so it works on every backend.
#pragma once
#include <map>
#include <string>

#include "backend/buffer.h"
#include "model/optimizer_state.h"
#include "model/param.h"

namespace pptrain {

class UpdateBackup {
 public:
  // Allocates the copies; both arguments must outlive the backup.
  UpdateBackup(ParamStore& params, OptimizerState& state);
  // Before the update: copies the masters and moments.
  void save();
  // After the update: keeps the gradients it read, leaving each parameter a gradient
  // buffer of stale values (the next step zeroes its gradients before using them).
  void take_gradients();
  // Undoes take_gradients() (before the next step's pipeline writes gradients).
  void return_gradients() { take_gradients(); }
  // Masters and moments as at the last save(), gradients as at the last take_gradients().
  // The bf16 working copies are marked stale: AdamW rewrites them with the next update,
  // and the trainer's refresh before every step rounds the rest.
  void restore();

 private:
  struct Saved {
    Buffer<float> value, grad, m, v;  // [numel of the local shard] each
  };
  ParamStore& params_;
  OptimizerState& state_;
  std::map<std::string, Saved> saved_;
};

}  // namespace pptrain
