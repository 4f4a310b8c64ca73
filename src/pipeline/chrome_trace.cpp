// The simulated time line as a Chrome trace (JSON object format), which chrome://tracing
// and Perfetto open: one thread per rank, a complete ("X") event per compute action and a
// flow arrow from each SEND to the compute action that consumes the message.
#include <cstdio>
#include <map>

#include "core/error.h"
#include "pipeline/dependencies.h"
#include "pipeline/render.h"

namespace pptrain::pipeline {

namespace {

constexpr double kMicrosecondsPerUnit = 1000;  // 1 cost unit = 1 ms

std::string us(double t) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3f", t * kMicrosecondsPerUnit);
  return buffer;
}

}  // namespace

std::string render_chrome_trace(const ScheduleReport& report) {
  PPTRAIN_CHECK(report.valid);
  const Schedule& s = report.schedule;
  const SimResult& sim = report.sim;
  std::vector<std::string> events;
  events.push_back(cat("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, \"args\": {\"name\": ",
                       json_string(cat("pptrain schedule ", s.name, " pp=", s.pp, " m=",
                                       s.microbatches)),
                       "}}"));
  for (int r = 0; r < s.pp; ++r)
    events.push_back(cat("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": ", r,
                         ", \"args\": {\"name\": \"rank ", r, "\"}}"));

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
      events.push_back(cat("{\"name\": ", json_string(to_string(a)), ", \"cat\": \"", op_name(a.op),
                           "\", \"ph\": \"X\", \"pid\": 0, \"tid\": ", r, ", \"ts\": ", us(t.start),
                           ", \"dur\": ", us(t.end - t.start), ", \"args\": {\"stage\": ", a.stage,
                           ", \"microbatch\": ", a.microbatch, "}}"));
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
    std::string name = json_string(to_string(matching_action(recv)));
    events.push_back(cat("{\"name\": ", name, ", \"cat\": \"p2p\", \"ph\": \"s\", \"id\": ", id,
                         ", \"pid\": 0, \"tid\": ", f.sender, ", \"ts\": ",
                         us(f.sent), "}"));
    events.push_back(cat("{\"name\": ", name, ", \"cat\": \"p2p\", \"ph\": \"f\", \"bp\": \"e\", \"id\": ",
                         id, ", \"pid\": 0, \"tid\": ", f.receiver, ", \"ts\": ", us(f.consumed), "}"));
    ++id;
  }
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  for (size_t i = 0; i < events.size(); ++i) out += (i ? ",\n" : "") + events[i];
  return out + "\n]}\n";
}

}  // namespace pptrain::pipeline
