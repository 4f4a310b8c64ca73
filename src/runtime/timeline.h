// Timeline: the measured start and end of every action a rank ran in one step, and the
// time it spent blocked waiting for a receive. From it come the measured bubble
// (idle time inside the pipeline phase / its length) and the Chrome trace.
#pragma once
#include <chrono>
#include <string>
#include <vector>

#include "pipeline/chrome_trace.h"

namespace pptrain {

struct TimedEvent {
  std::string name;   // IR notation ("2F0", "1W3") or "wait 2RECV_F0", "optimizer", ...
  double start_us;    // since the start of the step
  double end_us;
  bool compute;       // counts as busy time
  int track = 0;      // 0: the rank's actions and waits, one after another; 1: collectives in
                      // flight beside them (ZeRO-1's reduce-scatters), from start to completion
};

class Timeline {
 public:
  void start_step() { events_.clear(); t0_ = std::chrono::steady_clock::now(); }
  double now_us() const {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0_).count();
  }
  void add(std::string name, double start_us, double end_us, bool compute, int track = 0) {
    events_.push_back({std::move(name), start_us, end_us, compute, track});
  }
  const std::vector<TimedEvent>& events() const { return events_; }
  // Busy (compute) time and the span from step start to the end of the last compute action.
  double busy_us() const;
  double span_us() const;

 private:
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  std::vector<TimedEvent> events_;
};

// Adds one step of a rank's time line to `trace`: one slice per event on track (pid, tid) =
// (the world rank, the event's track), shifted by `step_offset_us` (when the step began on the job's clock).
void add_to_trace(const Timeline& t, int pid, double step_offset_us, pipeline::ChromeTrace& trace);

}  // namespace pptrain
