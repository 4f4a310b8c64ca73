#include "train/step_reduction.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "train/stop_signals.h"

namespace pptrain {

static_assert(std::size(StopSignals::kSignals) == kStopSignalCount);

std::vector<double> pack(const StepContribution& c) {
  std::vector<double> v = {c.loss_sum, c.sum_squares, c.bubble};  // [kContributionSize]
  v.insert(v.end(), c.stop_requests.begin(), c.stop_requests.end());
  v.push_back(c.mem_peak_bytes);
  return v;
}

StepTotals fold(const std::vector<double>& gathered, double tokens) {
  PPTRAIN_CHECK(!gathered.empty() && gathered.size() % kContributionSize == 0, "step reduction of ",
                gathered.size(), " values");
  const size_t ranks = gathered.size() / kContributionSize;
  double sum[kContributionSize] = {};
  // In world-rank order, from zero: one fixed sequence of additions on every rank.
  for (size_t r = 0; r < ranks; ++r)
    for (int i = 0; i < kContributionSize; ++i) sum[i] += gathered[r * kContributionSize + i];
  StepTotals t;
  t.loss = sum[0] / tokens;
  t.grad_norm = std::sqrt(sum[1]);
  t.bubble = sum[2] / double(ranks);
  for (int i = 0; i < kStopSignalCount && !t.stop_signal; ++i)
    if (sum[3 + i] > 0) t.stop_signal = StopSignals::kSignals[i];
  constexpr int kMemPeak = 3 + kStopSignalCount;
  t.mem_peak_bytes_ranks.resize(ranks);
  for (size_t r = 0; r < ranks; ++r) {
    t.mem_peak_bytes_ranks[r] = gathered[r * kContributionSize + kMemPeak];
    t.mem_peak_bytes = std::max(t.mem_peak_bytes, t.mem_peak_bytes_ranks[r]);
  }
  return t;
}

}  // namespace pptrain
