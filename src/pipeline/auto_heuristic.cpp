#include "pipeline/auto_heuristic.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <set>
#include <utility>

#include "core/error.h"
#include "pipeline/generators.h"

namespace pptrain::pipeline {

double action_time(const CostModel& cost, int stages_per_rank, Op op, int stage) {
  auto pick = [&](const std::vector<double>& per_stage, double per_rank) {
    return per_stage.empty() ? per_rank / stages_per_rank : per_stage[stage];
  };
  const double i = pick(cost.stage_input_grad, cost.input_grad);
  const double w = pick(cost.stage_weight_grad, cost.weight_grad);
  switch (op) {
    case Op::F: return pick(cost.stage_forward, cost.forward);
    case Op::I: return i;
    case Op::W: return w;
    case Op::B: return i + w;
    default: return 0;
  }
}

// The one place that says how much activation memory a stage's microbatch holds; the
// simulator counts the same (simulate.cpp).
StageActivation stage_activation(const CostModel& cost, int stage) {
  if (!cost.stage_act_input.empty()) return {cost.stage_act_input[stage], cost.stage_act_weight[stage]};
  return {cost.act_input, cost.act_weight};
}

namespace {

constexpr double kUnknown = std::numeric_limits<double>::infinity();

struct RankState {
  std::vector<int> stages;          // [v] in the order a microbatch visits them
  std::vector<int> next_f, next_i;  // [v] next microbatch to run F / I on
  std::deque<Action> pending_w;     // I done, W not yet: oldest first
  double memory = 0;                // activations held, per-stage units
  double reserved = 0;              // promised to admitted microbatches' later stages
  int in_flight = 0;                // microbatches between F and I of the first stage
  int peak_in_flight = 0;
  int left = 0;                     // F and I actions not placed yet
  bool last_was_i = false;          // of its F and I actions, the last placed was an I
  bool waiting = false;             // had nothing to run at `stuck_at`
  bool parked = false;              // waiting, and no time to look again is known
  double stuck_at = 0;
  double queued_at = 0;             // its entry in the event queue, when queued
  std::vector<Action> program;
};

enum class Admission { Yes, NoMemory, Capped };

class Planner {
 public:
  Planner(int pp, int microbatches, int v, const CostModel& cost, double memory_limit,
          const HeuristicKnobs& knobs)
      : pp_(pp), m_(microbatches), v_(v), stages_(pp * v), cost_(cost), knobs_(knobs),
        placement_(v == 2 ? Placement::V : Placement::Loop),
        limit_(memory_limit > 0 ? memory_limit * v : kUnknown) {
    f_input_.assign(size_t(stages_) * m_, kUnknown);
    i_input_.assign(size_t(stages_) * m_, kUnknown);
    for (int mb = 0; mb < m_; ++mb) f_input_[index(0, mb)] = 0;  // stage 0 reads tokens
    ranks_.resize(pp);
    for (int r = 0; r < pp; ++r) {
      RankState& rank = ranks_[r];
      rank.stages = stages_of_rank(placement_, r, pp, v);
      rank.next_f.assign(v, 0);
      rank.next_i.assign(v, 0);
      rank.left = 2 * v * m_;
    }
  }

  std::optional<HeuristicRun> run() {
    for (int r = 0; r < pp_; ++r) enqueue(r, 0);
    while (!queue_.empty()) {
      const auto [t, r] = *queue_.begin();
      queue_.erase(queue_.begin());
      RankState& rank = ranks_[r];
      if (rank.left == 0 && rank.pending_w.empty()) continue;
      rank.waiting = rank.parked = false;
      if (decide(r, t)) continue;
      rank.waiting = true;
      rank.stuck_at = t;
      const double again = next_look(rank, t);
      if (again < kUnknown) enqueue(r, again);
      else rank.parked = true;
    }
    HeuristicRun out;
    out.schedule = empty_schedule("auto", pp_, m_, v_, placement_);
    for (int r = 0; r < pp_; ++r) {
      if (ranks_[r].left > 0 || !ranks_[r].pending_w.empty()) return std::nullopt;  // deadlock
      out.schedule.program[r] = std::move(ranks_[r].program);
      out.peak_in_flight.push_back(ranks_[r].peak_in_flight);
    }
    out.makespan = makespan_;
    return out;
  }

 private:
  size_t index(int stage, int mb) const { return size_t(stage) * m_ + mb; }
  double time_of(Op op, int stage) const { return action_time(cost_, v_, op, stage); }
  double hop(int from_stage, int to_stage) const {
    return rank_of_stage(placement_, from_stage, pp_) == rank_of_stage(placement_, to_stage, pp_)
               ? 0 : cost_.comm * knobs_.comm_margin;
  }
  bool pending_i(const RankState& rank, int c) const { return rank.next_i[c] < rank.next_f[c]; }

  // The next gradient known to come (kUnknown: none whose producer is placed).
  double next_i_arrival(const RankState& rank) const {
    double next = kUnknown;
    for (int c = 0; c < v_; ++c)
      if (pending_i(rank, c)) next = std::min(next, i_input_[index(rank.stages[c], rank.next_i[c])]);
    return next;
  }
  // The next input of an F that may run, known to come after t (those already here are
  // no gap to fill).
  double next_f_arrival(int r, double t) const {
    const RankState& rank = ranks_[r];
    double next = kUnknown;
    for (int c = 0; c < v_; ++c) {
      if (rank.next_f[c] >= m_ || admission(r, c) != Admission::Yes) continue;
      const double at = f_input_[index(rank.stages[c], rank.next_f[c])];
      if (at > t) next = std::min(next, at);
    }
    return next;
  }

  // Whether rank r may run the F of its chunk c now, as far as memory and its cap go. A
  // microbatch enters at chunk 0 and needs room then for its later chunks too: all of it
  // promised (reserve_second_stage) or at least one more F of a later chunk free.
  Admission admission(int r, int c) const {
    const RankState& rank = ranks_[r];
    const StageActivation a = stage_activation(cost_, rank.stages[c]);
    const double need = a.input + a.weight, slack = 1e-9 * std::max(1.0, limit_ == kUnknown ? 1.0 : limit_);
    if (c > 0) {
      const double promised = knobs_.reserve_second_stage ? need : 0;
      return rank.memory + rank.reserved - promised + need <= limit_ + slack ? Admission::Yes
                                                                            : Admission::NoMemory;
    }
    if (!knobs_.max_in_flight.empty() && rank.in_flight >= knobs_.max_in_flight[r])
      return Admission::Capped;
    double later = 0;
    for (int k = 1; k < v_; ++k) {
      const StageActivation b = stage_activation(cost_, rank.stages[k]);
      later += b.input + b.weight;
    }
    return rank.memory + rank.reserved + need + later <= limit_ + slack ? Admission::Yes
                                                                        : Admission::NoMemory;
  }

  bool decide(int r, double t) {
    RankState& rank = ranks_[r];
    // 1. An arrived gradient: I first, later chunks (longer way back) before earlier ones.
    int ready_i = -1;
    for (int c = v_ - 1; c >= 0 && ready_i < 0; --c)
      if (pending_i(rank, c) && i_input_[index(rank.stages[c], rank.next_i[c])] <= t) ready_i = c;
    const bool f_turn = knobs_.alternate && rank.last_was_i;
    if (ready_i >= 0 && !f_turn) {
      place(r, Op::I, ready_i, t);
      return true;
    }
    // 2. An arrived input: F, if memory allows and it does not hold up the next I.
    const double next_i = ready_i >= 0 ? t : next_i_arrival(rank);
    bool memory_bound = false;
    for (int c = v_ - 1; c >= 0; --c) {
      if (rank.next_f[c] >= m_ || f_input_[index(rank.stages[c], rank.next_f[c])] > t) continue;
      const Admission admit = admission(r, c);
      memory_bound |= admit == Admission::NoMemory;
      if (admit != Admission::Yes) continue;
      const double f = time_of(Op::F, rank.stages[c]);
      if (!f_turn && t + f > next_i + knobs_.f_delay * f) continue;
      place(r, Op::F, c, t);
      return true;
    }
    if (ready_i >= 0) {
      place(r, Op::I, ready_i, t);
      return true;
    }
    // 3. A deferred W: to fill a gap, to free memory an F waits for, or at the end.
    if (rank.pending_w.empty()) return false;
    const int w_stage = rank.pending_w.front().stage;
    const bool frees_memory = memory_bound && stage_activation(cost_, w_stage).weight > 0;
    const double gap = std::min(next_i, next_f_arrival(r, t)) - t;
    if (rank.left == 0 || frees_memory || gap >= knobs_.w_fill * time_of(Op::W, w_stage)) {
      place_w(r, t);
      return true;
    }
    return false;
  }

  void place(int r, Op op, int c, double t) {
    RankState& rank = ranks_[r];
    const int stage = rank.stages[c];
    const int mb = op == Op::F ? rank.next_f[c]++ : rank.next_i[c]++;
    const double end = t + time_of(op, stage);
    const StageActivation a = stage_activation(cost_, stage);
    rank.program.push_back({op, stage, mb});
    rank.last_was_i = op == Op::I;
    --rank.left;
    if (op == Op::F) {
      rank.memory += a.input + a.weight;
      if (c == 0) {
        rank.peak_in_flight = std::max(rank.peak_in_flight, ++rank.in_flight);
        if (knobs_.reserve_second_stage)
          for (int k = 1; k < v_; ++k) {
            const StageActivation b = stage_activation(cost_, rank.stages[k]);
            rank.reserved += b.input + b.weight;
          }
      } else if (knobs_.reserve_second_stage) {
        rank.reserved -= a.input + a.weight;
      }
      if (stage + 1 < stages_) deliver(f_input_, stage + 1, mb, end + hop(stage, stage + 1));
      else i_input_[index(stage, mb)] = end;  // the loss: its own F feeds its I
    } else {
      rank.memory -= a.input;
      if (c == 0) --rank.in_flight;
      rank.pending_w.push_back({Op::W, stage, mb});
      if (stage > 0) deliver(i_input_, stage - 1, mb, end + hop(stage, stage - 1));
    }
    enqueue(r, end);
  }

  void place_w(int r, double t) {
    RankState& rank = ranks_[r];
    const Action w = rank.pending_w.front();
    rank.pending_w.pop_front();
    rank.memory -= stage_activation(cost_, w.stage).weight;
    rank.program.push_back(w);
    enqueue(r, t + time_of(Op::W, w.stage));
  }

  // Records an input's arrival and has a waiting receiver look again by then.
  void deliver(std::vector<double>& table, int stage, int mb, double at) {
    table[index(stage, mb)] = at;
    const int r = rank_of_stage(placement_, stage, pp_);
    RankState& rank = ranks_[r];
    if (!rank.waiting) return;  // busy: it decides when its action ends
    const double when = std::max(rank.stuck_at, at);
    if (rank.parked || when < rank.queued_at) {
      if (!rank.parked) queue_.erase({rank.queued_at, r});
      rank.parked = false;
      enqueue(r, when);
    }
  }

  // When a stuck rank should look again: the next known arrival of an input it waits for;
  // kUnknown: only a delivery can help.
  double next_look(const RankState& rank, double t) const {
    double next = kUnknown;
    auto consider = [&](double at) {
      if (at > t) next = std::min(next, at);
    };
    for (int c = 0; c < v_; ++c) {
      if (rank.next_f[c] < m_) consider(f_input_[index(rank.stages[c], rank.next_f[c])]);
      if (pending_i(rank, c)) consider(i_input_[index(rank.stages[c], rank.next_i[c])]);
    }
    return next;
  }

  void enqueue(int r, double at) {
    makespan_ = std::max(makespan_, at);
    ranks_[r].queued_at = at;
    queue_.insert({at, r});
  }

  const int pp_, m_, v_, stages_;
  const CostModel& cost_;
  const HeuristicKnobs& knobs_;
  const Placement placement_;
  const double limit_;  // per-stage units (the reported limit x v); kUnknown = none
  std::vector<RankState> ranks_;
  // When each input is (to be) there, [stage * m + mb], kUnknown until its producer is
  // placed: the activations F(stage, mb) reads, the gradient I(stage, mb) reads (for the
  // last stage, the end of its own F).
  std::vector<double> f_input_, i_input_;
  std::set<std::pair<double, int>> queue_;  // (time the rank decides next, rank)
  double makespan_ = 0;
};

}  // namespace

std::optional<HeuristicRun> run_heuristic(int pp, int microbatches, int stages_per_rank,
                                          const CostModel& cost, double memory_limit,
                                          const HeuristicKnobs& knobs) {
  PPTRAIN_CHECK(pp >= 1 && microbatches >= 1 && (stages_per_rank == 1 || stages_per_rank == 2));
  PPTRAIN_CHECK(knobs.max_in_flight.empty() || int(knobs.max_in_flight.size()) == pp);
  return Planner(pp, microbatches, stages_per_rank, cost, memory_limit, knobs).run();
}

}  // namespace pptrain::pipeline
