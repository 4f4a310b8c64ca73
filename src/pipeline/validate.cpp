#include "pipeline/validate.h"

#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "pipeline/dependencies.h"

namespace pptrain::pipeline {

namespace {

struct Where {
  int rank;      // -1: no such action
  int position;
};
// Every action of the program -> where it is (built once its stages and microbatches are
// known to be in range).
using Index = KeyTable<Where>;

std::string at(int rank, int position, const Action& a) {
  return cat("rank ", rank, ", position ", position, ", action ", to_string(a));
}
std::string at(const Where& w, const Action& a) { return at(w.rank, w.position, a); }

const Where* find(const Index& index, const Action& a) {
  const Where& w = index[key_of(a)];
  return w.rank < 0 ? nullptr : &w;
}

// The action that completes `dep` (an F, or the I or B of a backward), if present.
std::optional<Action> provider(const Index& index, const PassRef& dep) {
  Action f{Op::F, dep.stage, dep.microbatch}, i{Op::I, dep.stage, dep.microbatch},
      b{Op::B, dep.stage, dep.microbatch};
  if (dep.pass == Pass::Forward) return find(index, f) ? std::optional(f) : std::nullopt;
  if (find(index, i)) return i;
  if (find(index, b)) return b;
  return std::nullopt;
}

void check_shape(const Schedule& s) {
  if (s.pp < 1) fail("schedule '", s.name, "': pp must be >= 1 (got ", s.pp, ")");
  if (s.microbatches < 1)
    fail("schedule '", s.name, "': microbatches must be >= 1 (got ", s.microbatches, ")");
  if (s.stages_per_rank < 1)
    fail("schedule '", s.name, "': stages per rank must be >= 1 (got ", s.stages_per_rank, ")");
  if (s.placement == Placement::V && s.stages_per_rank != 2)
    fail("schedule '", s.name, "': V placement needs exactly 2 stages per rank (got ",
         s.stages_per_rank, ")");
  if (int(s.program.size()) != s.pp)
    fail("schedule '", s.name, "': ", s.program.size(), " rank lists, expected one per rank (pp=",
         s.pp, ")");
}

// Why a SEND/RECV at this stage is meaningless, or "" when it carries a real edge.
std::string pointless_message(const Schedule& s, const Action& a) {
  const int last = s.num_stages() - 1, r = s.rank_of(a.stage);
  switch (a.op) {
    case Op::SEND_F:
      if (a.stage == last) return "the last stage sends nothing forward";
      if (s.rank_of(a.stage + 1) == r) return cat("stage ", a.stage + 1, " is on the same rank");
      break;
    case Op::RECV_F:
      if (a.stage == 0) return "stage 0 receives no activations";
      if (s.rank_of(a.stage - 1) == r) return cat("stage ", a.stage - 1, " is on the same rank");
      break;
    case Op::SEND_B:
      if (a.stage == 0) return "stage 0 sends no gradient back";
      if (s.rank_of(a.stage - 1) == r) return cat("stage ", a.stage - 1, " is on the same rank");
      break;
    case Op::RECV_B:
      if (a.stage == last) return "the last stage receives no gradient";
      if (s.rank_of(a.stage + 1) == r) return cat("stage ", a.stage + 1, " is on the same rank");
      break;
    default:
      break;
  }
  return "";
}

Index check_actions(const Schedule& s) {
  const int stages = s.num_stages();
  Index index(stages, s.microbatches, Where{-1, -1});
  for (int r = 0; r < s.pp; ++r) {
    for (int i = 0; i < int(s.program[r].size()); ++i) {
      const Action& a = s.program[r][i];
      if (a.stage < 0 || a.stage >= stages)
        fail(at(r, i, a), ": stage ", a.stage, " does not exist (stages 0..", stages - 1, ")");
      if (a.microbatch < 0 || a.microbatch >= s.microbatches)
        fail(at(r, i, a), ": microbatch ", a.microbatch, " does not exist (microbatches 0..",
             s.microbatches - 1, ")");
      if (s.rank_of(a.stage) != r)
        fail(at(r, i, a), ": stage ", a.stage, " lives on rank ", s.rank_of(a.stage), " (",
             placement_name(s.placement), " placement)");
      std::string why = pointless_message(s, a);
      if (!why.empty()) fail(at(r, i, a), ": no message to exchange (", why, ")");
      Where& slot = index[key_of(a)];
      if (slot.rank >= 0) fail(at(r, i, a), ": duplicate (also at position ", slot.position, ")");
      slot = Where{r, i};
    }
  }
  return index;
}

void check_complete(const Schedule& s, const Index& index) {
  for (int stage = 0; stage < s.num_stages(); ++stage) {
    const int r = s.rank_of(stage);
    for (int mb = 0; mb < s.microbatches; ++mb) {
      Action f{Op::F, stage, mb}, b{Op::B, stage, mb}, i{Op::I, stage, mb}, w{Op::W, stage, mb};
      const Where *at_f = find(index, f), *at_b = find(index, b), *at_i = find(index, i),
                  *at_w = find(index, w);
      if (!at_f) fail("rank ", r, ": missing ", to_string(f), " (stage ", stage, " microbatch ", mb,
                      " never runs forward)");
      if (at_b && (at_i || at_w))
        fail(at(*at_b, b), ": stage ", stage, " microbatch ", mb, " also has ",
             to_string(at_i ? i : w), " at position ", (at_i ? at_i : at_w)->position,
             " (a backward is either B or I and W)");
      if (!at_b && !at_i && !at_w)
        fail("rank ", r, ": missing ", to_string(b), " (or ", to_string(i), " and ", to_string(w),
             "): stage ", stage, " microbatch ", mb, " never runs backward");
      if (at_i && !at_w) fail(at(*at_i, i), ": its weight gradient ", to_string(w), " is missing");
      if (at_w && !at_i) fail(at(*at_w, w), ": its input gradient ", to_string(i), " is missing");
    }
  }
}

void check_order(const Schedule& s, const Index& index, bool lowered) {
  for (int r = 0; r < s.pp; ++r) {
    for (int pos = 0; pos < int(s.program[r].size()); ++pos) {
      const Action& a = s.program[r][pos];
      if (!is_compute(a.op)) continue;
      if (a.op == Op::W) {
        Action i{Op::I, a.stage, a.microbatch};
        const Where* at_i = find(index, i);
        if (at_i && at_i->position > pos)
          fail(at(r, pos, a), ": W before its I (", to_string(i), " at position ", at_i->position,
               ")");
        continue;
      }
      for (const PassRef& dep : dependencies(a, s.num_stages())) {
        if (s.rank_of(dep.stage) != r) continue;
        auto before = provider(index, dep);
        const Where* w = before ? find(index, *before) : nullptr;
        if (w && w->position > pos)
          fail(at(r, pos, a), ": runs before its dependency ", to_string(*before), " (position ",
               w->position, ")");
      }
      if (!lowered) continue;
      if (auto msg = incoming_message(s, a)) {
        const Where* w = find(index, msg->recv);
        if (w && w->position > pos)
          fail(at(r, pos, a), ": runs before its dependency ", to_string(msg->recv), " (position ",
               w->position, ")");
      }
      if (auto msg = outgoing_message(s, a)) {
        const Where* w = find(index, msg->send);
        if (w && w->position < pos)
          fail(at(*w, msg->send), ": runs before its dependency ", to_string(a), " (position ",
               pos, ")");
      }
    }
  }
}

void check_messages(const Schedule& s, const Index& index) {
  for (int stage = 0; stage + 1 < s.num_stages(); ++stage) {
    const int low = s.rank_of(stage), high = s.rank_of(stage + 1);
    if (low == high) continue;
    for (int mb = 0; mb < s.microbatches; ++mb) {
      // Activations stage -> stage+1, then the gradient stage+1 -> stage.
      Action f{Op::F, stage + 1, mb};
      auto grad_consumer = provider(index, {Pass::InputGrad, stage, mb});
      const Message edges[2] = {{{Op::SEND_F, stage, mb}, {Op::RECV_F, stage + 1, mb}},
                                {{Op::SEND_B, stage + 1, mb}, {Op::RECV_B, stage, mb}}};
      const Action consumers[2] = {f, grad_consumer.value_or(Action{Op::B, stage, mb})};
      for (int e = 0; e < 2; ++e) {
        const Message& m = edges[e];
        const int sender = s.rank_of(m.send.stage), receiver = s.rank_of(m.recv.stage);
        const Where *at_send = find(index, m.send), *at_recv = find(index, m.recv);
        if (at_send && !at_recv)
          fail(at(*at_send, m.send), ": unmatched, rank ", receiver, " has no ", to_string(m.recv));
        if (at_recv && !at_send)
          fail(at(*at_recv, m.recv), ": unmatched, rank ", sender, " has no ", to_string(m.send));
        if (!at_send && !at_recv) {
          const Where* c = find(index, consumers[e]);
          fail(c ? at(*c, consumers[e]) : cat("rank ", receiver), ": its input from rank ", sender,
               " is never exchanged (no ", to_string(m.send), " on rank ", sender, ", no ",
               to_string(m.recv), " here)");
        }
      }
    }
  }
}

void check_deadlock(const Schedule& s, const Index& index, bool lowered, bool blocking_sends) {
  std::vector<size_t> pos(s.pp, 0);
  // Compute passes (compute programs) or sends (lowered) that have happened.
  KeyTable<uint8_t> done(s.num_stages(), s.microbatches, 0);
  auto head = [&](int r) -> const Action* {
    return pos[r] < s.program[r].size() ? &s.program[r][pos[r]] : nullptr;
  };
  // Advances rank r by one action if it can go; returns false when it has to wait.
  auto step = [&](int r) -> bool {
    const Action& a = *head(r);
    if (is_compute(a.op)) {
      if (!lowered)
        for (const PassRef& dep : dependencies(a, s.num_stages()))
          if (!done[key_of(dep)]) return false;
      done[pass_key(a)] = true;
      if (a.op == Op::B) done[{int(Pass::WeightGrad), a.stage, a.microbatch}] = true;
      ++pos[r];
      return true;
    }
    const Action peer_action = matching_action(a);
    const int peer = s.rank_of(peer_action.stage);
    const bool send = a.op == Op::SEND_F || a.op == Op::SEND_B;
    if (blocking_sends) {  // rendezvous: both ends move together
      const Action* other = head(peer);
      if (!other || !(*other == peer_action)) return false;
      ++pos[r];
      ++pos[peer];
      return true;
    }
    if (send) {
      done[key_of(a)] = true;
    } else if (!done[key_of(peer_action)]) {
      return false;
    }
    ++pos[r];
    return true;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < s.pp; ++r)
      while (head(r) && step(r)) progress = true;
  }
  for (int r = 0; r < s.pp; ++r) {
    const Action* a = head(r);
    if (!a) continue;
    Action awaited = matching_action(*a);
    if (is_compute(a->op)) {
      for (const PassRef& dep : dependencies(*a, s.num_stages()))
        if (!done[key_of(dep)]) awaited = provider(index, dep).value_or(*a);
    }
    const int peer = s.rank_of(awaited.stage);
    const Action* stuck = head(peer);
    std::string peer_state = stuck ? cat("rank ", peer, " is stuck at position ", pos[peer],
                                         ", action ", to_string(*stuck))
                                   : cat("rank ", peer, " has finished");
    const bool send = a->op == Op::SEND_F || a->op == Op::SEND_B;
    fail("deadlock: ", at(r, int(pos[r]), *a), " waits forever for ", to_string(awaited),
         send ? " to be posted" : "", " on rank ", peer, " (", peer_state, ")");
  }
}

std::vector<double> in_flight_walk(const Schedule& s, double limit) {
  std::vector<double> peaks(s.pp, 0.0);
  const int v = std::max(1, s.stages_per_rank);
  for (int r = 0; r < s.pp; ++r) {
    int stage_microbatches = 0;  // counted whole, divided by v once: exact
    for (int i = 0; i < int(s.program[r].size()); ++i) {
      const Action& a = s.program[r][i];
      if (a.op == Op::F) ++stage_microbatches;
      if (a.op == Op::I || a.op == Op::B) --stage_microbatches;
      const double current = double(stage_microbatches) / v;
      peaks[r] = std::max(peaks[r], current);
      if (limit > 0 && current > limit + 1e-9)
        fail(at(r, i, a), ": ", format_number(current),
             " microbatches of activations in flight, above the limit ", format_number(limit));
    }
  }
  return peaks;
}

}  // namespace

void validate(const Schedule& schedule, const ValidateOptions& opts) {
  check_shape(schedule);
  Index index = check_actions(schedule);
  check_complete(schedule, index);
  const bool lowered = has_communication(schedule.program);
  check_order(schedule, index, lowered);
  if (lowered) check_messages(schedule, index);
  check_deadlock(schedule, index, lowered, opts.blocking_sends);
  in_flight_walk(schedule, opts.max_in_flight);
}

std::vector<double> peak_in_flight(const Schedule& schedule) {
  return in_flight_walk(schedule, 0);
}

}  // namespace pptrain::pipeline
