// ChromeTrace: the one writer of Chrome's trace-event JSON (chrome://tracing, Perfetto).
// Both traces pptrain makes go through it: the simulated schedule of `pptrain schedule
// --format chrome` (render_chrome_trace) and the measured time line of a training run
// (logging.trace: each rank writes its events, rank 0 joins them into one document).
// Times are microseconds; tracks are (pid, tid) pairs.
#pragma once
#include <string>
#include <vector>

namespace pptrain::pipeline {

class ChromeTrace {
 public:
  // Track names: a process row (pid) and a thread row inside it (pid, tid).
  void process_name(int pid, const std::string& name);
  void thread_name(int pid, int tid, const std::string& name);
  // A complete ("X") event: a slice [ts_us, ts_us + dur_us) on track (pid, tid). `args`
  // is the body of a JSON object ("\"stage\": 1") or empty.
  void slice(const std::string& name, const std::string& category, int pid, int tid, double ts_us,
             double dur_us, const std::string& args = "");
  // A flow arrow `id` from (pid, from_tid) at from_us to (pid, to_tid) at to_us; each end
  // binds to the slice that encloses it.
  void flow(const std::string& name, int id, int pid, int from_tid, double from_us, int to_tid, double to_us);

  // The events so far, comma separated: a fragment that joins with other ranks' fragments.
  const std::string& events() const { return events_; }
  // The whole document around fragments (empty fragments are skipped).
  static std::string document(const std::vector<std::string>& fragments);

 private:
  void add(const std::string& event);
  std::string events_;
};

}  // namespace pptrain::pipeline
