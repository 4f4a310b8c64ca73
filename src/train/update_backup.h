// UpdateBackup: what undoing one AdamW step exactly needs, for post-validation
// (training.post_validation): the fp32 masters and the moments as before the optimistic
// update, and the reduced gradients it read. None of it is copied. The backup holds a second
// set of buffers of the same form as the parameters' (ParamStore::flatten: one arena of
// masters, one of gradients) and the optimizer's moments (an OptimizerState: full, or the
// ZeRO-1 shard of the rank's range): 8 bytes per arena element plus the optimizer state's
// bytes. The update reads the current masters and moments and writes the new ones into the
// backup's buffers (AdamW::step_into), which are then exchanged with the current ones
// (pointers: ParamStore::swap_value_arena, OptimizerState::swap); the buffers it replaced,
// holding the old values, are the backup. A rollback exchanges them back. The gradients are
// taken the same way, by exchanging the gradient arena, because the next step's pipeline
// overwrites them before the step's validation arrives and the corrected update needs them.
// Layers look a parameter's masters and gradient up at each use, so they follow.
// The bf16 copies are not backed up: each is the rounding of its master, so restoring the
// masters restores them. Under sharded masters (ZeRO-1, bf16) the rank re-rounds its range
// at once and the trainer all-gathers the rest when no update follows (a rollback that
// drops the step); that costs one collective on a rare path instead of 2 bytes per arena
// element always.
#pragma once
#include "backend/buffer.h"
#include "model/optimizer_state.h"
#include "model/param.h"
#include "train/adamw.h"

namespace pptrain {

class UpdateBackup {
 public:
  // Allocates the second buffers; both arguments must outlive the backup. `params` must be
  // flat. `shard`: the optimizer's ZeRO-1 shard, or -1 for full moments.
  UpdateBackup(ParamStore& params, AdamW& optimizer, int shard);
  // The optimistic update (AdamW::step arguments): written out of place into the backup's
  // buffers, which then become the parameters' masters and the optimizer's moments; the
  // values before it become the backup. The bf16 copies hold the updated values.
  void update(double lr, int t, float grad_scale);
  // After the update: keeps the gradients it read, leaving the parameters a gradient
  // arena of stale values (the next step zeroes its gradients before using them).
  void take_gradients() { params_.swap_grad_arena(grad_); }
  // Undoes take_gradients() (before the next step's pipeline writes gradients).
  void return_gradients() { take_gradients(); }
  // Masters and moments as before the last update(), gradients as at the last
  // take_gradients(); once per update(). Full masters: the bf16 working copies hold the
  // updated values and are marked stale (AdamW rewrites them with the next update, the
  // trainer's refresh before every step rounds the rest). Sharded masters: the copies of
  // the range are rounded from the restored masters; the other ranges' are the
  // all-gather's (Trainer::roll_back).
  void restore();

 private:
  ParamStore& params_;
  AdamW& optimizer_;
  Buffer<float> value_, grad_;  // [value_arena_size()], [flat_layout().total()]
  OptimizerState moments_;
  bool restorable_ = false;  // an update() since the last restore()
};

}  // namespace pptrain
