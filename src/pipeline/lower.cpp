#include "pipeline/lower.h"

#include <limits>
#include <set>
#include <utility>
#include <vector>

#include "core/error.h"
#include "pipeline/dependencies.h"

namespace pptrain::pipeline {

namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

double unit_duration(Op op) { return op == Op::B ? 2.0 : 1.0; }

// Actions outside the program's stages or microbatches take no part in the replay (they
// are copied through for validate() to name).
bool stage_in_range(const Schedule& s, const Action& a) {
  return a.stage >= 0 && a.stage < s.num_stages() && a.microbatch >= 0 && a.microbatch < s.microbatches;
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

  constexpr double kNotDone = -1;
  KeyTable<double> done(s.num_stages(), s.microbatches, kNotDone);  // pass -> time it completed
  std::vector<size_t> next(pp, 0);    // next compute action per rank
  std::vector<double> free_at(pp, 0); // when the rank's running action ends
  // Event sets, so one event costs O(log pp) rather than a scan of every rank: idle ranks
  // whose next action has all its inputs, by (earliest start, rank); running ranks by
  // (end, rank). An idle rank whose next action waits for a pass not yet done is parked
  // under that pass and woken when it completes (its earliest start changes only then).
  std::set<std::pair<double, int>> ready, running;
  // Ranks parked under a pass, as linked lists: the first rank (or -1) per pass, and the
  // next rank parked under the same pass. A rank is parked under one pass at a time.
  KeyTable<int> parked_first(s.num_stages(), s.microbatches, -1);
  std::vector<int> parked_next(pp, -1);

  // Files idle rank r under `ready` or parks it (nothing when its list is done).
  auto file_idle = [&](int r) {
    if (next[r] >= s.program[r].size()) return;
    const Action& a = s.program[r][next[r]];
    double t = free_at[r];
    if (stage_in_range(s, a)) {
      for (const PassRef& dep : dependencies(a, s.num_stages())) {
        const double finished = done[key_of(dep)];
        if (finished == kNotDone) {
          parked_next[r] = std::exchange(parked_first[key_of(dep)], r);
          return;
        }
        t = std::max(t, finished);
      }
    }
    ready.insert({t, r});
  };
  auto complete = [&](const ActionKey& key, double t, std::vector<int>& woken) {
    done[key] = t;
    for (int r = std::exchange(parked_first[key], -1); r >= 0; r = std::exchange(parked_next[r], -1))
      woken.push_back(r);
  };
  for (int r = 0; r < pp; ++r) file_idle(r);

  // Discrete-event replay: completions at time t are handled (in rank order) before starts
  // at t, so a SEND/RECV pair lands in both lists before the compute that consumes the
  // tensor; among starts at one time the lowest rank goes first.
  for (;;) {
    const double first_completion = running.empty() ? kNever : running.begin()->first;
    const double first_start = ready.empty() ? kNever : ready.begin()->first;
    if (first_completion == kNever && first_start == kNever) break;
    if (first_completion <= first_start) {
      std::vector<int> woken;
      while (!running.empty() && running.begin()->first == first_completion) {
        const int r = running.begin()->second;
        running.erase(running.begin());
        woken.push_back(r);
        const Action& a = s.program[r][next[r]++];
        if (!stage_in_range(s, a)) continue;
        complete(pass_key(a), free_at[r], woken);
        if (a.op == Op::B) complete({int(Pass::WeightGrad), a.stage, a.microbatch}, free_at[r], woken);
        if (auto msg = outgoing_message(s, a)) {
          out.program[r].push_back(msg->send);
          int receiver = s.rank_of(msg->recv.stage);
          if (receiver >= 0 && receiver < pp) out.program[receiver].push_back(msg->recv);
        }
      }
      for (int r : woken) file_idle(r);
    } else {
      const int starter = ready.begin()->second;
      ready.erase(ready.begin());
      const Action& a = s.program[starter][next[starter]];
      out.program[starter].push_back(a);
      free_at[starter] = first_start + unit_duration(a.op);
      running.insert({free_at[starter], starter});
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
        bool sent = done[pass_key(Action{msg->send.op == Op::SEND_F ? Op::F : Op::I, msg->send.stage,
                                         msg->send.microbatch})] != kNotDone;
        if (!sent) out.program[r].push_back(msg->recv);
      }
      out.program[r].push_back(a);
      if (auto msg = outgoing_message(s, a)) out.program[r].push_back(msg->send);
    }
  }
  return out;
}

}  // namespace pptrain::pipeline
