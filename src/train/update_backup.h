// UpdateBackup: what undoing one AdamW step exactly needs, for post-validation
// (training.post_validation): the fp32 masters and the moments, copied before the
// optimistic update, and the reduced gradients, taken after it. The parameters are
// flattened (ParamStore::flatten), so masters and gradients are one arena each (the
// masters' the rank's range only under sharded masters); the moments are an
// OptimizerState of the same form as the optimizer's (full, or the ZeRO-1 shard of the
// rank's range): the two arenas' bytes plus the optimizer state's bytes.
// The bf16 copies are not backed up: each is the rounding of its master, so restoring the
// masters restores them. Under sharded masters the rank re-rounds its range at once and the
// trainer all-gathers the rest when no update follows (a rollback that drops the step);
// that costs one collective on a rare path instead of 2 bytes per arena element always.
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
  // Full masters: the bf16 working copies are marked stale (AdamW rewrites them with the
  // next update, the trainer's refresh before every step rounds the rest). Sharded
  // masters: the copies of the range are rounded from the restored masters; the other
  // ranges' are the all-gather's (Trainer::roll_back).
  void restore();

 private:
  ParamStore& params_;
  OptimizerState& state_;
  Buffer<float> value_, grad_;  // [value_arena_size()], [flat_layout().total()]
  OptimizerState saved_state_;
};

}  // namespace pptrain
