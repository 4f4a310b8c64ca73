// Learning rate: linear warmup to lr over warmup_steps, then cosine decay to min_lr at
// the last step (as in GPT-2/llm.c). `step` is 0-based.
#pragma once
#include <cmath>

namespace pptrain {

inline double learning_rate(int step, int total_steps, int warmup_steps, double lr, double min_lr) {
  if (step < warmup_steps) return lr * double(step + 1) / double(warmup_steps);
  if (total_steps <= warmup_steps) return lr;
  double progress = double(step - warmup_steps) / double(std::max(1, total_steps - warmup_steps));
  progress = std::min(1.0, std::max(0.0, progress));
  return min_lr + 0.5 * (1.0 + std::cos(M_PI * progress)) * (lr - min_lr);
}

}  // namespace pptrain
