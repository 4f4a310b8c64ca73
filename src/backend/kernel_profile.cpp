// KernelProfile (kernel_profile.h).
#include "backend/kernel_profile.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "core/json.h"

namespace pptrain {

double union_ms(std::vector<std::pair<double, double>> intervals) {
  std::sort(intervals.begin(), intervals.end());
  double total = 0, end = -1e300;
  for (auto [a, b] : intervals) {
    if (b <= end) continue;
    total += b - std::max(a, end);
    end = b;
  }
  return total;
}

void KernelProfile::add_step(const std::vector<KernelRecord>& records, const std::vector<const char*>& call_ops) {
  ++steps_;
  last_.clear();
  if (records.empty()) return;
  double origin = records.front().start_ms;
  for (const KernelRecord& r : records) origin = std::min(origin, r.start_ms);
  std::vector<std::pair<double, double>> spans;
  spans.reserve(records.size());
  for (const KernelRecord& r : records) {
    const std::string op =
        r.call >= 0 && size_t(r.call) < call_ops.size() ? call_ops[size_t(r.call)] : "(outside ops)";
    Stats& s = stats_[{op, r.name}];
    s.calls += 1;
    s.ms += r.end_ms - r.start_ms;
    spans.emplace_back(r.start_ms, r.end_ms);
    last_.push_back({op, r.name, r.start_ms - origin, r.end_ms - origin});
  }
  busy_ms_ += union_ms(std::move(spans));
}

namespace {

std::vector<std::pair<std::pair<std::string, std::string>, KernelProfile::Stats>> longest_first(
    const std::map<std::pair<std::string, std::string>, KernelProfile::Stats>& stats) {
  std::vector<std::pair<std::pair<std::string, std::string>, KernelProfile::Stats>> rows(stats.begin(), stats.end());
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  return rows;
}

}  // namespace

std::string KernelProfile::table(double step_ms) const {
  const double per = steps_ ? 1.0 / steps_ : 0, busy = busy_ms_ * per;
  char line[320];
  std::snprintf(line, sizeof line,
                "kernels of the same steps (device records): busy %.3f ms a step (%.1f%% of the step; overlapping "
                "kernels once)\n  %-30s %-56s %7s %10s %7s\n",
                busy, step_ms > 0 ? 100 * busy / step_ms : 0.0, "op", "kernel", "calls", "ms/step", "share");
  std::string out = line;
  for (const auto& [key, s] : longest_first(stats_)) {
    std::string kernel = key.second.size() > 56 ? key.second.substr(0, 53) + "..." : key.second;
    std::snprintf(line, sizeof line, "  %-30s %-56s %7.0f %10.3f %6.1f%%\n", key.first.c_str(), kernel.c_str(),
                  s.calls * per, s.ms * per, step_ms > 0 ? 100 * s.ms * per / step_ms : 0.0);
    out += line;
  }
  out.pop_back();
  return out;
}

std::string KernelProfile::json_fields(double step_ms) const {
  const double per = steps_ ? 1.0 / steps_ : 0;
  std::string out = "\"kernel_busy_ms\": " + json::number(busy_ms_ * per) + ", \"kernels\": [";
  bool first = true;
  for (const auto& [key, s] : longest_first(stats_)) {
    out += cat(first ? "" : ", ", "{\"op\": ", json::quote(key.first), ", \"kernel\": ", json::quote(key.second),
               ", \"calls_per_step\": ", json::number(s.calls * per), ", \"ms_per_step\": ", json::number(s.ms * per),
               ", \"share\": ", json::number(step_ms > 0 ? s.ms * per / step_ms : 0.0), "}");
    first = false;
  }
  return out + "]";
}

}  // namespace pptrain
