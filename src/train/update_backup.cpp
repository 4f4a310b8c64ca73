#include "train/update_backup.h"

#include <utility>

namespace pptrain {

UpdateBackup::UpdateBackup(ParamStore& params, OptimizerState& state) : params_(params), state_(state) {
  Ops& ops = params.ops();
  for (const auto& [name, p] : params.all()) {
    const size_t n = p->numel();
    saved_.emplace(name, Saved{Buffer<float>(ops, n), Buffer<float>(ops, n), Buffer<float>(ops, n),
                               Buffer<float>(ops, n)});
  }
}

namespace {
void copy(Ops& ops, Buffer<float>& to, const Buffer<float>& from) {
  if (!to.empty()) ops.copy(to.data(), from.data(), to.size() * sizeof(float));
}
}  // namespace

void UpdateBackup::save() {
  Ops& ops = params_.ops();
  for (auto& [name, s] : saved_) {
    Param& p = *params_.all().at(name);
    copy(ops, s.value, p.value);
    copy(ops, s.m, state_.m(name));
    copy(ops, s.v, state_.v(name));
  }
}

void UpdateBackup::take_gradients() {
  for (auto& [name, s] : saved_) std::swap(s.grad, params_.all().at(name)->grad);
}

void UpdateBackup::restore() {
  Ops& ops = params_.ops();
  for (auto& [name, s] : saved_) {
    Param& p = *params_.all().at(name);
    copy(ops, p.value, s.value);
    p.bf16_stale = true;
    std::swap(p.grad, s.grad);
    copy(ops, state_.m(name), s.m);
    copy(ops, state_.v(name), s.v);
  }
}

}  // namespace pptrain
