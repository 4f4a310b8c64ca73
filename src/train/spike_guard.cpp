#include "train/spike_guard.h"

#include <algorithm>
#include <cstdio>

namespace pptrain {

SpikeGuard::SpikeGuard(double factor, int window)
    : factor_(factor), window_(window), alpha_(2.0 / (double(window) + 1.0)) {}

std::optional<double> SpikeGuard::check(double loss) {
  if (seen_ >= window_ && loss > factor_ * mean_) return mean_;
  mean_ = seen_ == 0 ? loss : mean_ + alpha_ * (loss - mean_);
  ++seen_;
  return std::nullopt;
}

std::string SpikeGuard::state() const {
  char text[64];
  std::snprintf(text, sizeof text, "%.17g %d", mean_, seen_);
  return text;
}

void SpikeGuard::restore(const std::string& state) {
  mean_ = 0;
  seen_ = 0;
  long long seen = 0;
  if (!state.empty() && std::sscanf(state.c_str(), "%lf %lld", &mean_, &seen) == 2) seen_ = int(std::min<long long>(seen, 1 << 30));
  else mean_ = 0;
}

}  // namespace pptrain
