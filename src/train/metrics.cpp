#include "train/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/log.h"

namespace pptrain {

std::string format_duration(double s) {
  char buf[32];
  long t = long(std::lround(std::max(0.0, s)));
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
  else if (t >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

namespace {
double mebibytes(double bytes) { return bytes / double(1 << 20); }

// JSON has no NaN or infinity: a skipped step's non-finite loss or norm is written null.
std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6f", v);
  return buf;
}
}  // namespace

MetricsLog::MetricsLog(const std::string& path, bool enabled) : enabled_(enabled), path_(path) {
  if (!enabled_ || path.empty()) return;
  file_ = std::fopen(path.c_str(), "a");
  if (!file_) fail("logging.metrics: cannot open '", path, "' for appending");
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const std::string& line) {
  if (!file_) return;
  // Every line reaches the file or the run stops: a metrics file that silently ends (a full
  // disk, /dev/full) would pass for a shorter run.
  errno = 0;
  const bool written = std::fputs(line.c_str(), file_) >= 0 && std::fputc('\n', file_) != EOF &&
                       std::fflush(file_) == 0;
  if (!written)
    fail("logging.metrics: cannot write '", path_, "': ", errno ? std::strerror(errno) : "write error",
         " (the metrics would end here; free space or give another path, then resume)");
}

void MetricsLog::step(const StepResult& r, int total_steps, double tokens_per_step, double mean_ms,
                      double predicted_ms) {
  if (!enabled_) return;
  const double tok_s = tokens_per_step / (r.ms / 1000.0);
  const double eta = (total_steps - r.step) * mean_ms / 1000.0;
  char buf[512];
  // Skipped steps (training.on_nonfinite: skip) and post-validation rollbacks
  // (training.post_validation) show only once there are any.
  std::string counts;
  if (r.skipped_total > 0) counts += cat(" | skipped ", r.skipped_total);
  if (r.rollbacks_total > 0) counts += cat(" | rollbacks ", r.rollbacks_total);
  // The planner's prediction (partition/auto_layout.h) beside the measurement, when made.
  char predicted[48] = "", predicted_json[48] = "";
  if (predicted_ms > 0) {
    std::snprintf(predicted, sizeof predicted, " (predicted %.1f)", predicted_ms);
    std::snprintf(predicted_json, sizeof predicted_json, ", \"predicted_ms\": %.3f", predicted_ms);
  }
  std::snprintf(buf, sizeof buf,
                "step %d/%d | loss %.4f | lr %.2e | grad_norm %.4f | %.1f ms%s | %.0f tok/s | bubble %.3f | "
                "mem_peak %.1f MiB%s | eta %s",
                r.step, total_steps, r.loss, r.lr, r.grad_norm, r.ms, predicted, tok_s, r.bubble,
                mebibytes(r.mem_peak_bytes), counts.c_str(), format_duration(eta).c_str());
  log::info(buf);
  std::snprintf(buf, sizeof buf,
                "{\"step\": %d, \"loss\": %s, \"lr\": %.6e, \"grad_norm\": %s, \"ms\": %.3f, "
                "\"tokens_per_s\": %.1f, \"bubble\": %.4f, \"skipped\": %d, \"rollbacks\": %d%s, "
                "\"mem_peak_mb\": %.3f",
                r.step, json_number(r.loss).c_str(), r.lr, json_number(r.grad_norm).c_str(), r.ms, tok_s, r.bubble,
                r.skipped_total, r.rollbacks_total, predicted_json, mebibytes(r.mem_peak_bytes));
  // One value per world rank: as long as the world is wide, so not in the fixed buffer.
  std::string line = buf;
  line += ", \"mem_peak_mb_ranks\": [";
  for (size_t i = 0; i < r.mem_peak_bytes_ranks.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.3f", i ? ", " : "", mebibytes(r.mem_peak_bytes_ranks[i]));
    line += buf;
  }
  line += "]}";
  write(line);
}

void MetricsLog::eval(int step, double val_loss) {
  if (!enabled_) return;
  char buf[160];
  std::snprintf(buf, sizeof buf, "step %d | val_loss %.4f", step, val_loss);
  log::info(buf);
  std::snprintf(buf, sizeof buf, "{\"step\": %d, \"val_loss\": %.6f}", step, val_loss);
  write(buf);
}

}  // namespace pptrain
