#include "train/spike_guard.h"

namespace pptrain {

SpikeGuard::SpikeGuard(double factor, int window)
    : factor_(factor), window_(window), alpha_(2.0 / (double(window) + 1.0)) {}

std::optional<double> SpikeGuard::check(double loss) {
  if (seen_ >= window_ && loss > factor_ * mean_) return mean_;
  mean_ = seen_ == 0 ? loss : mean_ + alpha_ * (loss - mean_);
  ++seen_;
  return std::nullopt;
}

}  // namespace pptrain
