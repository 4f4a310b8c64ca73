#include "runtime/watchdog.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "core/log.h"

namespace pptrain {

void Progress::set_activity(std::string what) {
  std::lock_guard<std::mutex> lock(mutex_);
  activity_ = std::move(what);
}

std::string Progress::activity() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return activity_;
}

Watchdog::Watchdog(Progress& progress, double seconds, int world_rank)
    : progress_(progress), seconds_(seconds), world_rank_(world_rank) {
  if (seconds_ > 0) thread_ = std::thread([this] { watch(); });
}

Watchdog::~Watchdog() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Watchdog::watch() {
  using Clock = std::chrono::steady_clock;
  // Looking 4 times per period (at most once a second) ends a hang at most a quarter
  // period late.
  const auto poll = std::chrono::duration<double>(std::min(1.0, seconds_ / 4));
  uint64_t seen = progress_.count();
  auto last_progress = Clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, poll, [this] { return stop_; })) {
    const uint64_t now_count = progress_.count();
    const auto now = Clock::now();
    if (now_count != seen) {
      seen = now_count;
      last_progress = now;
      continue;
    }
    const double idle_s = std::chrono::duration<double>(now - last_progress).count();
    if (idle_s >= seconds_) expire(idle_s);
  }
}

void Watchdog::expire(double idle_s) const {
  char idle[32];
  std::snprintf(idle, sizeof idle, "%.1f", idle_s);
  log::error("watchdog: world rank ", world_rank_, " made no progress for ", idle, " s (runtime.watchdog_s ",
             seconds_, ") in step ", progress_.step(), ": ", progress_.activity());
  log::error("watchdog: ending the job (exit ", kExitWatchdog, "); a rank it waits for is frozen, dead or "
             "lost a message");
  // _Exit: no destructors, no atexit handlers; the main thread is blocked in the middle of
  // a wait that owns the state they would touch.
  std::_Exit(kExitWatchdog);
}

}  // namespace pptrain
