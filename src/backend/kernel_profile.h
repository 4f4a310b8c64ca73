// The kernels of the profiled steps (logging.kernel_profile, on cuda): the KernelRecorder's
// records of each step (backend/ops.h: CUPTI's), each tied to the op call that issued it,
// added up per op and kernel (calls, device ms), with the time the device was busy with
// any of them (the union of their intervals: overlapping kernels on several streams count
// once). ProfiledOps feeds it; the table and JSON sit beside the op profile's.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "backend/ops.h"

namespace pptrain {

class KernelProfile {
 public:
  // One step: its records, and the op name of each op call (records with call -1, or a call
  // beyond the list, belong to "(outside ops)": communication, the trainer's own copies).
  void add_step(const std::vector<KernelRecord>& records, const std::vector<const char*>& call_ops);

  struct Stats {
    long long calls = 0;
    double ms = 0;
  };
  // Per (op, kernel), summed over the steps.
  const std::map<std::pair<std::string, std::string>, Stats>& stats() const { return stats_; }
  int steps() const { return steps_; }
  double busy_ms() const { return busy_ms_; }  // summed over the steps
  // The last step's records, op name attached, times in ms from its first record's start.
  struct Slice {
    std::string op, kernel;
    double start_ms, end_ms;
  };
  const std::vector<Slice>& last_step() const { return last_; }

  // Per step: the table (longest first) and the JSON fields ("kernels": [...],
  // "kernel_busy_ms") the op profile's document ends with. `step_ms`: a step's wall time.
  std::string table(double step_ms) const;
  std::string json_fields(double step_ms) const;

 private:
  std::map<std::pair<std::string, std::string>, Stats> stats_;
  std::vector<Slice> last_;
  double busy_ms_ = 0;
  int steps_ = 0;
};

// The total length of the union of [start, end) intervals (unsorted, may overlap).
double union_ms(std::vector<std::pair<double, double>> intervals);

}  // namespace pptrain
