// UpdateBackup: what undoing one AdamW step exactly needs, for post-validation
// (training.post_validation): the fp32 masters and the moments, copied before the
// optimistic update, and the reduced gradients, taken after it. The parameters are
// flattened (ParamStore::flatten), so masters and gradients are one arena each; the
// moments are an OptimizerState of the same form as the optimizer's (full, or the ZeRO-1
// shard of the rank's range): 8 bytes per arena element plus the optimizer state's bytes.
// The gradients are part of it because the next step's pipeline overwrites them before
// the step's validation arrives, and the corrected update needs them; they are taken by
// exchanging the gradient arena (layers look a parameter's gradient up at each use), so
// only the masters and moments are copied. Copies are backend to backend (Ops::copy), so
// it works on every backend.
#pragma once
#include "backend/buffer.h"
#include "model/optimizer_state.h"
#include "model/param.h"

namespace pptrain {

class UpdateBackup {
 public:
  // Allocates the copies; both arguments must outlive the backup. `params` must be flat.
  // `shard`: the optimizer's ZeRO-1 shard, or -1 for full moments.
  UpdateBackup(ParamStore& params, OptimizerState& state, int shard);
  // Before the update: copies the masters and moments.
  void save();
  // After the update: keeps the gradients it read, leaving the parameters a gradient
  // arena of stale values (the next step zeroes its gradients before using them).
  void take_gradients() { params_.swap_grad_arena(grad_); }
  // Undoes take_gradients() (before the next step's pipeline writes gradients).
  void return_gradients() { take_gradients(); }
  // Masters and moments as at the last save(), gradients as at the last take_gradients().
  // The bf16 working copies are marked stale: AdamW rewrites them with the next update,
  // and the trainer's refresh before every step rounds the rest.
  void restore();

 private:
  ParamStore& params_;
  OptimizerState& state_;
  Buffer<float> value_, grad_;  // [flat_layout().total()] each
  OptimizerState saved_state_;
};

}  // namespace pptrain
