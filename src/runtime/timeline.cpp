#include "runtime/timeline.h"

#include <algorithm>
#include <cstdio>

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

std::string chrome_trace_events(const Timeline& t, int pid, const std::string& track_name,
                                double step_offset_us) {
  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"%s\"}}",
                pid, track_name.c_str());
  out += buf;
  for (auto& e : t.events()) {
    std::snprintf(buf, sizeof buf,
                  ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"dur\":%.3f}",
                  e.name.c_str(), e.compute ? "compute" : "comm", pid, step_offset_us + e.start_us,
                  e.end_us - e.start_us);
    out += buf;
  }
  return out;
}

}  // namespace pptrain
