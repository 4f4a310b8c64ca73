#include "train/metrics.h"

#include <cmath>

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

MetricsLog::MetricsLog(const std::string& path, bool enabled) : enabled_(enabled) {
  if (!enabled_ || path.empty()) return;
  file_ = std::fopen(path.c_str(), "a");
  if (!file_) fail("logging.metrics: cannot open '", path, "' for appending");
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const std::string& line) {
  if (!file_) return;
  std::fputs(line.c_str(), file_);
  std::fputc('\n', file_);
  std::fflush(file_);
}

void MetricsLog::step(const StepResult& r, int total_steps, double tokens_per_step, double mean_ms) {
  if (!enabled_) return;
  const double tok_s = tokens_per_step / (r.ms / 1000.0);
  const double eta = (total_steps - r.step) * mean_ms / 1000.0;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "step %d/%d | loss %.4f | lr %.2e | grad_norm %.4f | %.1f ms | %.0f tok/s | bubble %.3f | eta %s",
                r.step, total_steps, r.loss, r.lr, r.grad_norm, r.ms, tok_s, r.bubble,
                format_duration(eta).c_str());
  log::info(buf);
  std::snprintf(buf, sizeof buf,
                "{\"step\": %d, \"loss\": %.6f, \"lr\": %.6e, \"grad_norm\": %.6f, \"ms\": %.3f, "
                "\"tokens_per_s\": %.1f, \"bubble\": %.4f}",
                r.step, r.loss, r.lr, r.grad_norm, r.ms, tok_s, r.bubble);
  write(buf);
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
