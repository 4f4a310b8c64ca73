// The steps logging.op_profile times (backend/profiled_ops.h) and what is reported when
// they are done: every rank's table in the log (world rank 0 prints them in rank order)
// and, with logging.op_profile_file, each rank's JSON (rank N > 0 at PATH.rankN).
#pragma once
#include <chrono>

#include "job/job.h"
#include "pipeline/chrome_trace.h"

namespace pptrain {

class OpProfileWindow {
 public:
  // Steps first_step + 1 .. first_step + logging.op_profile: the step after the first one
  // this run makes (which allocates and warms up) and on; all the run has if it is shorter.
  OpProfileWindow(Job& job, int first_step);
  // Around each train_step call; `step` is the step it makes (1-based).
  void before(int step);
  void after(int step);
  // After the loop: reports what was profiled if the window was cut short. Every rank.
  void finish();
  // With logging.trace: the step just made, if it was profiled, as one slice per op call on
  // track kOpTrack of process `pid`. The calls' times are the backend's (device time on
  // cuda), placed so that the last one ends where the step ends in the trace
  // (`step_end_us`): the step waits for the device at its end, so that is where the device
  // time line and the host's meet.
  // With logging.kernel_profile, the step's kernels too, on track kKernelTrack, the same way
  // (named "op: kernel").
  static constexpr int kOpTrack = 3;  // 0 actions, 1 ZeRO-1, 2 transfers (runtime/executor.h)
  static constexpr int kKernelTrack = 4;
  void add_to_trace(pipeline::ChromeTrace& trace, int pid, double step_end_us);

 private:
  bool in_window(int step) const { return job_.op_profiler() && step >= first_ && step < first_ + count_; }
  void report();
  Job& job_;
  int first_, count_;
  bool reported_ = false;
  bool traced_step_ = false;  // after(): the step just made was profiled
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace pptrain
