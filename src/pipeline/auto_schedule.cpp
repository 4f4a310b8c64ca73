#include "pipeline/auto_schedule.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "core/error.h"
#include "pipeline/auto_heuristic.h"
#include "pipeline/generators.h"
#include "pipeline/registry.h"
#include "pipeline/transform.h"

namespace pptrain::pipeline {

namespace {

constexpr double kNone = std::numeric_limits<double>::infinity();

// The search's cost, in simulations of the whole program (lowering included); one
// heuristic run costs about a fifth of one. Small shapes get every candidate; the number
// shrinks with the size so that the largest shape check_size() admits (10^6 stage-
// microbatches: some seconds per simulation) adds a few simulations to the fixed ones.
constexpr double kSearchWork = 2e6;  // stage-microbatches simulated in all
constexpr double kMaxSimulations = 96, kMinSimulations = 2, kRunCost = 0.2;

// Every microbatch alone: its F's down all stages, then its I and W back up; the least
// memory any program needs (one microbatch's activations on every rank).
Schedule one_at_a_time(int pp, int m, int v) {
  const Placement placement = v == 2 ? Placement::V : Placement::Loop;
  Schedule s = empty_schedule("auto: one microbatch at a time", pp, m, v, placement);
  for (int mb = 0; mb < m; ++mb) {
    for (int stage = 0; stage < pp * v; ++stage)
      s.program[rank_of_stage(placement, stage, pp)].push_back({Op::F, stage, mb});
    for (int stage = pp * v - 1; stage >= 0; --stage) {
      auto& actions = s.program[rank_of_stage(placement, stage, pp)];
      actions.push_back({Op::I, stage, mb});
      actions.push_back({Op::W, stage, mb});
    }
  }
  return s;
}

double max_of(const std::vector<double>& xs) { return *std::max_element(xs.begin(), xs.end()); }

// The fastest program that fits the limit among those offered; on equal time the one with
// less memory, then the heuristic's (offered with wins_ties) or else the first offered.
class Best {
 public:
  Best(const CostModel& cost, double limit, double budget) : cost_(cost), limit_(limit), budget_(budget) {}

  // What the search may still spend, in simulations.
  bool exhausted() const { return budget_ <= 0; }
  void spend(double simulations) { budget_ -= simulations; }
  double makespan() const { return makespan_; }
  const Schedule& schedule() const { return *best_; }

  // Simulates s and keeps it if it fits and wins; returns its makespan.
  double offer(const Schedule& s, bool wins_ties) { return offer(s, simulate(s, cost_), wins_ties); }
  double offer(const Schedule& s, const SimResult& sim, bool wins_ties) {
    const double peak = max_of(sim.peak_activations);
    if (limit_ > 0 && peak > limit_ * (1 + 1e-9)) return sim.makespan;
    const double slack = 1e-9 * std::max(1.0, sim.makespan), peak_slack = 1e-9 * std::max(1.0, peak);
    const bool faster = sim.makespan < makespan_ - slack, as_fast = sim.makespan <= makespan_ + slack;
    const bool less_memory = peak < peak_ - peak_slack, as_much = peak <= peak_ + peak_slack;
    if (!best_ || faster || (as_fast && (less_memory || (as_much && wins_ties)))) {
      best_ = s;
      makespan_ = sim.makespan;
      peak_ = peak;
    }
    return sim.makespan;
  }

 private:
  const CostModel& cost_;
  const double limit_;
  double budget_;
  std::optional<Schedule> best_;
  double makespan_ = kNone, peak_ = kNone;
};

// The heuristic's fastest run so far, to search around.
struct Incumbent {
  HeuristicKnobs knobs;
  std::vector<int> peak_in_flight;
  double makespan = kNone;
};

// Runs the heuristic and simulates its program unless it cannot win: played by the
// heuristic with messages taking T_comm, a program is never slower than in the simulator,
// where a message may also wait for its receive to be posted (equal without comm cost).
// The incumbent is the fastest run, by simulation where simulated, else as played.
void offer_run(int pp, int m, int v, const CostModel& cost, double limit, const HeuristicKnobs& knobs,
               Best& best, Incumbent& incumbent) {
  best.spend(kRunCost);
  std::optional<HeuristicRun> run = run_heuristic(pp, m, v, cost, limit, knobs);
  if (!run) return;  // these knobs deadlock
  double makespan = run->makespan;
  if (knobs.comm_margin != 1 || makespan <= best.makespan() * (1 + 1e-9)) {
    best.spend(1);
    makespan = best.offer(run->schedule, true);
  }
  if (makespan < incumbent.makespan) incumbent = {knobs, run->peak_in_flight, makespan};
}

// Caps on microbatches in flight per rank as in the fixed schedules: none (memory only),
// ZB-H2's 2(p - r) - 1, 1F1B's p - r (with a V placement, a rank's first stage is on the
// way down, so the same counts apply to it).
std::vector<std::vector<int>> cap_families(int pp) {
  std::vector<int> one_f_one_b(pp), zb_h2(pp);
  for (int r = 0; r < pp; ++r) {
    one_f_one_b[r] = pp - r;
    zb_h2[r] = 2 * (pp - r) - 1;
  }
  return {{}, zb_h2, one_f_one_b};
}

// Every combination of the knobs, the paper's plain heuristic first (a large shape has
// room for a few candidates only); then, from the fastest, one rank's cap one lower or
// higher than what that run held, while that helps.
void search(int pp, int m, int v, const CostModel& cost, double limit, Best& best) {
  Incumbent incumbent;
  const std::vector<double> margins = cost.comm > 0 ? std::vector<double>{1, 2} : std::vector<double>{1};
  const std::vector<bool> reserves = v == 2 ? std::vector<bool>{true, false} : std::vector<bool>{true};
  for (double margin : margins)
    for (const std::vector<int>& caps : cap_families(pp))
      for (bool reserve : reserves)
        for (double f_delay : {0.0, 1.0})
          for (bool alternate : {false, true})
            for (double w_fill : {0.0, 1.0}) {
              if (best.exhausted()) return;
              const HeuristicKnobs knobs{caps, f_delay, w_fill, alternate, reserve, margin};
              offer_run(pp, m, v, cost, limit, knobs, best, incumbent);
            }
  if (incumbent.makespan == kNone) return;
  std::vector<int> caps = incumbent.peak_in_flight;
  for (bool improved = true; improved;) {
    improved = false;
    for (int r = 0; r < pp && !improved; ++r)
      for (int step : {-1, 1}) {
        if (best.exhausted()) return;
        if (caps[r] + step < 1) continue;
        HeuristicKnobs knobs = incumbent.knobs;
        knobs.max_in_flight = caps;
        knobs.max_in_flight[r] += step;
        const double before = incumbent.makespan;
        offer_run(pp, m, v, cost, limit, knobs, best, incumbent);
        if (incumbent.makespan < before - 1e-9 * std::max(1.0, before)) {
          caps = knobs.max_in_flight;
          improved = true;
          break;
        }
      }
  }
}

}  // namespace

Schedule auto_schedule(int pp, int microbatches, int stages_per_rank, const CostModel& cost,
                       double memory_limit) {
  const int v = stages_per_rank, m = microbatches;
  if (pp < 1) fail("auto: pp must be >= 1 (got ", pp, ")");
  if (m < 1) fail("auto: microbatches must be >= 1 (got ", m, ")");
  if (v != 1 && v != 2)
    fail("auto: builds 1 stage per rank (loop placement) or 2 (V placement), got ", v);
  if (!(memory_limit >= 0) || !std::isfinite(memory_limit))
    fail("auto: the memory limit must be a number >= 0 (0 = none), got ", memory_limit);
  check_size("auto", pp, v, m);
  for (const auto* list : {&cost.stage_forward, &cost.stage_input_grad, &cost.stage_weight_grad})
    if (!list->empty() && int(list->size()) != pp * v)
      fail("auto: cost model: ", list->size(), " per-stage costs for ", pp * v, " stages");

  const Schedule alone = one_at_a_time(pp, m, v);
  const SimResult alone_sim = simulate(alone, cost);
  const double least = max_of(alone_sim.peak_activations);
  if (memory_limit > 0 && least > memory_limit * (1 + 1e-9))
    fail("auto: memory limit ", format_number(memory_limit),
         " is below what one microbatch in flight needs (", format_number(least),
         " per rank, in the units of act_i and act_w)");

  const double size = double(pp) * v * m;
  Best best(cost, memory_limit, std::clamp(kSearchWork / size, kMinSimulations, kMaxSimulations));
  // The least-memory program and the fixed schedules of this placement first: the
  // heuristic's programs must beat them (or tie with no more memory) to be chosen, and
  // one that cannot is not simulated.
  best.offer(alone, alone_sim, false);
  const Placement placement = v == 2 ? Placement::V : Placement::Loop;
  std::vector<Program> offered;  // looped-bfs with 1 stage per rank is gpipe
  for (const std::string& name : schedule_names()) {
    Schedule fixed;
    try {
      fixed = runtime_form(generate_schedule(name, pp, m, v));
    } catch (const Error&) {
      continue;  // a shape it does not run
    }
    if (fixed.placement != placement ||
        std::find(offered.begin(), offered.end(), fixed.program) != offered.end())
      continue;
    offered.push_back(fixed.program);
    fixed.name = "auto: " + name;
    best.offer(fixed, false);
  }
  search(pp, m, v, cost, memory_limit, best);
  return best.schedule();
}

}  // namespace pptrain::pipeline
