// UpdateBackup: what undoing one AdamW step exactly needs, for post-validation
// (training.post_validation): every parameter's fp32 master, its reduced gradient and both
// moments, copied before the optimistic update — 16 bytes per parameter element held by the
// rank. The gradient is part of it because the next step's pipeline overwrites the
// gradients before the step's validation arrives, and the corrected update needs them.
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
  void save();
  // Masters, gradients and moments as at the last save(). The bf16 working copies are
  // marked stale: AdamW rewrites them with the next update, and the trainer's refresh
  // before every step rounds the rest.
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
