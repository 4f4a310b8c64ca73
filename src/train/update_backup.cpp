#include "train/update_backup.h"

#include "core/error.h"

namespace pptrain {
namespace {

ParamStore& flat(ParamStore& params) {
  PPTRAIN_CHECK(params.flat(), "post-validation needs the flattened parameters (ParamStore::flatten)");
  return params;
}

}  // namespace

UpdateBackup::UpdateBackup(ParamStore& params, OptimizerState& state, int shard)
    : params_(flat(params)),
      state_(state),
      value_(params.ops(), params.value_arena_size()),
      grad_(params.ops(), params.flat_layout().total()),
      saved_state_(shard < 0 ? OptimizerState(params) : OptimizerState(params, shard)) {
  grad_.zero();
}

void UpdateBackup::save() {
  Ops& ops = params_.ops();
  ops.copy(value_.data(), params_.value_arena(), value_.size() * sizeof(float));
  saved_state_.copy_from(state_, ops);
}

void UpdateBackup::restore() {
  Ops& ops = params_.ops();
  ops.copy(params_.value_arena(), value_.data(), value_.size() * sizeof(float));
  // Sharded masters: the copies of the range rounded from the restored masters now (the
  // bits they had: AdamW and set_masters keep each copy the rounding of its master);
  // full masters: rounded by the refresh before the next step.
  if (params_.masters_sharded()) params_.refresh_bf16();
  else for (auto& [name, p] : params_.all()) p->bf16_stale = true;
  params_.swap_grad_arena(grad_);
  state_.copy_from(saved_state_, ops);
}

}  // namespace pptrain
