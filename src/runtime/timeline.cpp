#include "runtime/timeline.h"

#include <algorithm>

namespace pptrain {

double Timeline::busy_us() const {
  double busy = 0;
  for (auto& e : events_)
    if (e.compute) busy += e.end_us - e.start_us;
  return busy;
}

double Timeline::span_us() const {
  double end = 0;
  for (auto& e : events_)
    if (e.compute) end = std::max(end, e.end_us);
  return end;
}

void add_to_trace(const Timeline& t, int pid, double step_offset_us, pipeline::ChromeTrace& trace) {
  for (const TimedEvent& e : t.events())
    trace.slice(e.name, e.compute ? "compute" : "comm", pid, e.track, step_offset_us + e.start_us, e.end_us - e.start_us);
}

}  // namespace pptrain
