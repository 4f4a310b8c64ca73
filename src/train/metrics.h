// Training output: the human log line per logging.every steps and the JSON Lines
// metrics file (DESIGN.md contract: step, loss, lr, grad_norm, ms, tokens_per_s, bubble;
// also skipped and rollbacks, the counts so far of skipped steps and post-validation
// rollbacks; mem_peak_mb, the most backend memory in use on any rank since the last logged
// step, in MiB (2^20 bytes), and mem_peak_mb_ranks, that peak per world rank;
// evaluations as {step, val_loss}). Written by world rank 0 only.
#pragma once
#include <cstdio>
#include <string>

#include "train/trainer.h"

namespace pptrain {

class MetricsLog {
 public:
  // `path` empty: no file. Appends, so a resumed run continues the same file.
  MetricsLog(const std::string& path, bool enabled);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  void step(const StepResult& r, int total_steps, double tokens_per_step, double mean_ms,
            double predicted_ms = 0);
  void eval(int step, double val_loss);

 private:
  void write(const std::string& json_line);
  bool enabled_;
  std::string path_;
  FILE* file_ = nullptr;
};

// "1h02m", "3m05s", "12s"
std::string format_duration(double seconds);

}  // namespace pptrain
