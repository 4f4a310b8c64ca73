// The Chrome trace writer, and the simulated time line of a schedule as a trace: one
// thread per rank, a complete ("X") event per compute action and a flow arrow from each
// SEND to the compute action that consumes the message.
#include "pipeline/chrome_trace.h"

#include <cstdio>
#include <map>

#include "core/error.h"
#include "pipeline/dependencies.h"
#include "pipeline/render.h"

namespace pptrain::pipeline {

namespace {

std::string us(double t) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3f", t);
  return buffer;
}

}  // namespace

void ChromeTrace::add(const std::string& event) { events_ += (events_.empty() ? "" : ",\n") + event; }

void ChromeTrace::process_name(int pid, const std::string& name) {
  add(cat("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": ", pid, ", \"args\": {\"name\": ",
          json_string(name), "}}"));
}

void ChromeTrace::thread_name(int pid, int tid, const std::string& name) {
  add(cat("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": ", pid, ", \"tid\": ", tid,
          ", \"args\": {\"name\": ", json_string(name), "}}"));
}

void ChromeTrace::slice(const std::string& name, const std::string& category, int pid, int tid, double ts_us,
                        double dur_us, const std::string& args) {
  add(cat("{\"name\": ", json_string(name), ", \"cat\": ", json_string(category), ", \"ph\": \"X\", \"pid\": ", pid,
          ", \"tid\": ", tid, ", \"ts\": ", us(ts_us), ", \"dur\": ", us(dur_us),
          args.empty() ? "" : cat(", \"args\": {", args, "}"), "}"));
}

void ChromeTrace::flow(const std::string& name, int id, int pid, int from_tid, double from_us, int to_tid,
                       double to_us) {
  const std::string quoted = json_string(name);
  add(cat("{\"name\": ", quoted, ", \"cat\": \"p2p\", \"ph\": \"s\", \"id\": ", id, ", \"pid\": ", pid,
          ", \"tid\": ", from_tid, ", \"ts\": ", us(from_us), "}"));
  add(cat("{\"name\": ", quoted, ", \"cat\": \"p2p\", \"ph\": \"f\", \"bp\": \"e\", \"id\": ", id, ", \"pid\": ", pid,
          ", \"tid\": ", to_tid, ", \"ts\": ", us(to_us), "}"));
}

std::string ChromeTrace::document(const std::vector<std::string>& fragments) {
  std::string out = "{\"traceEvents\": [\n";
  bool first = true;
  for (const std::string& f : fragments) {
    if (f.empty()) continue;
    out += (first ? "" : ",\n") + f;
    first = false;
  }
  return out + "\n], \"displayTimeUnit\": \"ms\"}\n";
}

std::string render_chrome_trace(const ScheduleReport& report) {
  PPTRAIN_CHECK(report.valid);
  constexpr double kMicrosecondsPerUnit = 1000;  // 1 cost unit = 1 ms
  const Schedule& s = report.schedule;
  const SimResult& sim = report.sim;
  ChromeTrace trace;
  trace.process_name(0, cat("pptrain schedule ", s.name, " pp=", s.pp, " m=", s.microbatches));
  for (int r = 0; r < s.pp; ++r) trace.thread_name(0, r, cat("rank ", r));

  // Each message as an arrow from the middle of its producer's slice to the middle of its
  // consumer's (a flow event binds to the slice that encloses it; slice edges are ambiguous).
  struct Flow {
    int sender = -1, receiver = -1;
    double sent = 0, consumed = 0;
  };
  std::map<ActionKey, Flow> flows;  // keyed by the RECV
  for (int r = 0; r < s.pp; ++r) {
    double last_compute_middle = 0;
    for (const TimedAction& t : sim.timeline[r]) {
      const Action& a = t.action;
      if (a.op == Op::SEND_F || a.op == Op::SEND_B) {
        Flow& f = flows[key_of(matching_action(a))];
        f.sender = r;
        f.sent = last_compute_middle;
        continue;
      }
      if (!is_compute(a.op)) continue;
      last_compute_middle = (t.start + t.end) / 2;
      trace.slice(to_string(a), op_name(a.op), 0, r, t.start * kMicrosecondsPerUnit,
                  (t.end - t.start) * kMicrosecondsPerUnit,
                  cat("\"stage\": ", a.stage, ", \"microbatch\": ", a.microbatch));
      if (auto msg = incoming_message(s, a)) {
        Flow& f = flows[key_of(msg->recv)];
        f.receiver = r;
        f.consumed = (t.start + t.end) / 2;
      }
    }
  }
  int id = 0;
  for (const auto& [key, f] : flows) {
    if (f.sender < 0 || f.receiver < 0) continue;
    Action recv{Op(std::get<0>(key)), std::get<1>(key), std::get<2>(key)};
    trace.flow(to_string(matching_action(recv)), id++, 0, f.sender, f.sent * kMicrosecondsPerUnit, f.receiver,
               f.consumed * kMicrosecondsPerUnit);
  }
  return ChromeTrace::document({trace.events()});
}

}  // namespace pptrain::pipeline
