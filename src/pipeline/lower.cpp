#include "pipeline/lower.h"

#include <limits>
#include <map>

#include "core/error.h"
#include "pipeline/dependencies.h"

namespace pptrain::pipeline {

namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

double unit_duration(Op op) { return op == Op::B ? 2.0 : 1.0; }

bool stage_in_range(const Schedule& s, const Action& a) {
  return a.stage >= 0 && a.stage < s.num_stages();
}

}  // namespace

Schedule lower(const Schedule& compute_only) {
  const Schedule& s = compute_only;
  for (size_t r = 0; r < s.program.size(); ++r)
    for (size_t i = 0; i < s.program[r].size(); ++i)
      if (is_communication(s.program[r][i].op))
        fail("lower: rank ", r, ", position ", i, ", action ", to_string(s.program[r][i]),
             ": the program already has communication");

  const int pp = int(s.program.size());
  Schedule out = s;
  for (auto& actions : out.program) actions.clear();

  std::map<ActionKey, double> done;   // pass -> time it completed
  std::vector<size_t> next(pp, 0);    // next compute action per rank
  std::vector<double> free_at(pp, 0); // when the rank's running action ends
  std::vector<bool> running(pp, false);

  // The time rank r could start its next action, or kNever while an input is missing.
  auto earliest_start = [&](int r) {
    const Action& a = s.program[r][next[r]];
    double t = free_at[r];
    if (!stage_in_range(s, a)) return t;
    for (const PassRef& dep : dependencies(a, s.num_stages())) {
      auto it = done.find(key_of(dep));
      if (it == done.end()) return kNever;
      t = std::max(t, it->second);
    }
    return t;
  };

  // Discrete-event replay: completions at time t are handled before starts at t, so a
  // SEND/RECV pair lands in both lists before the compute that consumes the tensor.
  for (;;) {
    double first_completion = kNever, first_start = kNever;
    int starter = -1;
    for (int r = 0; r < pp; ++r) {
      if (running[r]) {
        first_completion = std::min(first_completion, free_at[r]);
      } else if (next[r] < s.program[r].size()) {
        double t = earliest_start(r);
        if (t < first_start) first_start = t, starter = r;
      }
    }
    if (first_completion == kNever && first_start == kNever) break;
    if (first_completion <= first_start) {
      for (int r = 0; r < pp; ++r) {
        if (!running[r] || free_at[r] != first_completion) continue;
        running[r] = false;
        const Action& a = s.program[r][next[r]++];
        if (!stage_in_range(s, a)) continue;
        done[pass_key(a)] = free_at[r];
        if (a.op == Op::B) done[{int(Pass::WeightGrad), a.stage, a.microbatch}] = free_at[r];
        if (auto msg = outgoing_message(s, a)) {
          out.program[r].push_back(msg->send);
          int receiver = s.rank_of(msg->recv.stage);
          if (receiver >= 0 && receiver < pp) out.program[receiver].push_back(msg->recv);
        }
      }
    } else {
      const Action& a = s.program[starter][next[starter]];
      out.program[starter].push_back(a);
      running[starter] = true;
      free_at[starter] = first_start + unit_duration(a.op);
    }
  }

  // Whatever could not run (the compute program cannot finish): RECV right before the
  // consumer, SEND right after the producer, for validate() to diagnose.
  for (int r = 0; r < pp; ++r) {
    for (; next[r] < s.program[r].size(); ++next[r]) {
      const Action& a = s.program[r][next[r]];
      if (!stage_in_range(s, a)) {
        out.program[r].push_back(a);
        continue;
      }
      if (auto msg = incoming_message(s, a)) {
        bool sent = done.count(pass_key(Action{msg->send.op == Op::SEND_F ? Op::F : Op::I,
                                                msg->send.stage, msg->send.microbatch}));
        if (!sent) out.program[r].push_back(msg->recv);
      }
      out.program[r].push_back(a);
      if (auto msg = outgoing_message(s, a)) out.program[r].push_back(msg->send);
    }
  }
  return out;
}

}  // namespace pptrain::pipeline
