// Progress and Watchdog: a rank that stops making progress (a peer frozen or dead without
// its process ending, a lost message, a hung file system) would otherwise hang the job
// until the scheduler's time limit. Every place where a rank may wait reports through a
// Progress: the executor after each action and each completed receive, the trainer after
// each collective, data read and evaluation batch. Before a wait that can block on another
// rank, it also says what it waits for (one line: step, action, peer ranks, tags). A
// Watchdog thread per rank looks at the counter; when it has not moved for
// runtime.watchdog_s seconds, it prints that line and ends the process with
// kExitWatchdog (_Exit from the watchdog thread: the main thread is blocked and cannot
// be asked; mpirun and srun then end the other ranks, within seconds, as for any rank
// that dies). A checkpoint save reports each collective phase (create, write each dataset,
// flush, close, rename; CheckpointManager::set_progress), so a save that makes no progress
// for runtime.watchdog_s (a rank frozen mid-save, a stuck network file system) ends the job
// the same way, the line naming the phase. runtime.watchdog_s must then exceed the time of
// the longest one phase: writing the largest dataset.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace pptrain {

inline constexpr int kExitWatchdog = 1;

class Progress {
 public:
  // One unit of progress: an action, a collective, a transfer, a batch completed.
  void tick() { count_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  // What this rank does or waits for now, e.g. "step 4: action 2F1 waits for RECV_F ...".
  void set_activity(std::string what);
  std::string activity() const;
  void set_step(int step) { step_.store(step, std::memory_order_relaxed); }
  int step() const { return step_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> count_{0};
  std::atomic<int> step_{0};
  mutable std::mutex mutex_;
  std::string activity_;  // guarded by mutex_
};

class Watchdog {
 public:
  // `seconds` <= 0: no thread, nothing watched. `world_rank` names this rank in the message.
  Watchdog(Progress& progress, double seconds, int world_rank);
  ~Watchdog();  // stops and joins the thread
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  void watch();
  [[noreturn]] void expire(double idle_s) const;

  Progress& progress_;
  const double seconds_;
  const int world_rank_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;  // guarded by mutex_
  std::thread thread_;
};

}  // namespace pptrain
