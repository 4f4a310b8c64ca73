#include "train/update_backup.h"

#include "core/error.h"

namespace pptrain {
namespace {

ParamStore& flat(ParamStore& params) {
  PPTRAIN_CHECK(params.flat(), "post-validation needs the flattened parameters (ParamStore::flatten)");
  return params;
}

}  // namespace

UpdateBackup::UpdateBackup(ParamStore& params, AdamW& optimizer, int shard)
    : params_(flat(params)),
      optimizer_(optimizer),
      value_(params.ops(), params.value_arena_size()),
      grad_(params.ops(), params.flat_layout().total()),
      moments_(shard < 0 ? OptimizerState(params) : OptimizerState(params, shard)) {
  // The arenas' padding stays zero whichever buffer is current (ParamStore::flatten), and
  // under ZeRO-1 the elements outside the rank's range, which the update does not write, are
  // all-gathered into the new arena after it.
  value_.zero();
  grad_.zero();
}

void UpdateBackup::update(double lr, int t, float grad_scale) {
  optimizer_.step_into(value_, moments_, lr, t, grad_scale);
  params_.swap_value_arena(value_);
  optimizer_.state().swap(moments_);
  restorable_ = true;
}

void UpdateBackup::restore() {
  PPTRAIN_CHECK(restorable_, "UpdateBackup::restore without an update to undo");
  params_.swap_value_arena(value_);
  optimizer_.state().swap(moments_);
  params_.swap_grad_arena(grad_);
  // Sharded masters: the copies of the range rounded from the restored masters now (the
  // bits they had: AdamW and set_masters keep each copy the rounding of its master);
  // full masters: rounded by the refresh before the next step.
  if (params_.masters_sharded()) params_.refresh_bf16();
  else for (auto& [name, p] : params_.all()) p->bf16_stale = true;
  restorable_ = false;
}

}  // namespace pptrain
