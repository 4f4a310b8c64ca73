#include "partition/partitioner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include "core/error.h"
#include "partition/milp.h"
#include "partition/split_problem.h"
#include "pipeline/lower.h"

namespace pptrain {

using pipeline::Action;
using pipeline::Op;
using pipeline::Schedule;

namespace {

using namespace splits;

// Integer columns n_s with their bounds and sum n_s = n_layer; returns their indices.
std::vector<int> add_split(Milp& milp, const Problem& p) {
  std::vector<int> n;
  std::vector<Milp::Term> sum;
  for (int s = 0; s < p.stages; ++s) {
    n.push_back(milp.add_column(p.min_blocks[s], p.max_blocks[s], true, 0));
    sum.push_back({n.back(), 1});
  }
  milp.add_row({sum, double(p.n_layer), double(p.n_layer)});
  return n;
}

std::vector<int> read_split(const Milp& milp, const std::vector<int>& columns) {
  std::vector<int> n;
  for (int c : columns) n.push_back(int(std::lround(milp.value(c))));
  return n;
}

std::string split_text(const std::vector<int>& n) {
  std::string out = "[";
  for (size_t s = 0; s < n.size(); ++s) out += cat(s ? "," : "", n[s]);
  return out + "]";
}

std::string bytes_text(double bytes) {
  return cat(std::llround(bytes), " bytes (", pipeline::format_number(bytes / double(1 << 30)), " GiB)");
}

double max_peak(const Partition& part) { return *std::max_element(part.peak_bytes.begin(), part.peak_bytes.end()); }

// The relative agreement asked of the solver's optimum and the simulator's number.
bool agrees(double simulated, double solved) {
  return std::abs(simulated - solved) <= 1e-6 * std::abs(simulated) + 1e-12;
}

// Columns y_r = the blocks of rank r's stages, when ranks hold several stages: the step
// time depends mostly on these sums, so branching on them raises the bound far sooner
// than branching on single stages, whose blocks other stages of the rank can take over.
// Returns their columns ([pp], or none).
std::vector<int> add_rank_sums(Milp& milp, const Problem& p, const std::vector<int>& n) {
  std::vector<int> y;
  if (p.lowered.stages_per_rank == 1) return y;
  for (int r = 0; r < p.lowered.pp; ++r) {
    y.push_back(milp.add_column(0, p.n_layer, true, 0));
    Milp::Row row{{{y.back(), -1}}, 0, 0};
    for (int s = 0; s < p.stages; ++s)
      if (p.lowered.rank_of(s) == r) row.terms.push_back({n[s], 1});
    milp.add_row(row);
  }
  return y;
}

// Rounds of cutting planes before the partitioner gives up (a bug, not an input: every
// round adds a path, and a program has finitely many).
constexpr int kMaxRounds = 100000;
// The paths the branch and bound starts with: those within this fraction of the bound at
// the relaxation's optimum. The others cost time at every branch and rarely bind there
// (1%: about a fifth of them, and the fastest of 0.3%, 1%, 3% and all on the 128-block
// cases; each path left out is still added where a branch violates it).
constexpr double kTight = 0.01;

Partition min_memory(const Problem& p) {
  // Rows in units of the largest row at its largest split, so the solver's tolerances are
  // relative ones whatever the byte counts.
  double unit = 1;
  for (const MemoryRow& row : p.memory) unit = std::max(unit, bytes_at(row, p.max_blocks));
  Milp milp;
  const std::vector<int> n = add_split(milp, p);
  const int y = milp.add_column(0, Milp::kInfinity, false, 1);  // the largest peak / unit
  for (const MemoryRow& row : p.memory) {
    std::vector<Milp::Term> terms{{y, 1}};
    for (int s = 0; s < p.stages; ++s) terms.push_back({n[s], -row.per_block[s] / unit});
    milp.add_row({terms, row.base / unit, Milp::kInfinity});
  }
  PPTRAIN_CHECK(milp.minimize(), "the memory problem has no split");
  Partition best = evaluate(p, read_split(milp, n));
  PPTRAIN_CHECK(agrees(max_peak(best) / unit, milp.objective()), "simulated ", max_peak(best) / unit, " vs ",
                milp.objective());
  return best;
}

}  // namespace

pipeline::CostModel stage_cost_model(const CostProfile& prof, const std::vector<int>& blocks_per_stage,
                                     const StageRecompute& recompute) {
  pipeline::CostModel c;
  c.comm = prof.transfer_ms;
  const int stages = int(blocks_per_stage.size());
  for (int s = 0; s < stages; ++s) {
    if (blocks_per_stage[s] < 0) fail("partition: stage ", s, " has ", blocks_per_stage[s], " blocks");
    const LayerCost l = splits::stage_layers(prof, recompute, s, stages, blocks_per_stage[s]);
    c.stage_forward.push_back(l.forward_ms);
    c.stage_input_grad.push_back(l.input_grad_ms);
    c.stage_weight_grad.push_back(l.weight_grad_ms);
    c.stage_act_input.push_back(l.act_fi_bytes);
    c.stage_act_weight.push_back(l.act_iw_bytes);
    c.stage_act_from_input.push_back(l.act_from_input_bytes);
    c.stage_static_memory.push_back(l.param_bytes + l.optim_bytes);
  }
  return c;
}

SplitEvaluation evaluate_split(const CostProfile& prof, const Schedule& program,
                               const std::vector<int>& blocks_per_stage, const StageRecompute& recompute) {
  if (int(blocks_per_stage.size()) != program.num_stages())
    fail("partition: ", blocks_per_stage.size(), " stage sizes for the ", program.num_stages(),
         " stages of schedule '", program.name, "'");
  const pipeline::SimResult sim = pipeline::simulate(program, stage_cost_model(prof, blocks_per_stage, recompute));
  return {sim.makespan, sim.peak_memory};
}

Partition min_memory_partition(const CostProfile& prof, const Schedule& program, int n_layer,
                               const StageRecompute& recompute) {
  return min_memory(Problem(prof, program, n_layer, recompute));
}

// Moves one block from one stage to another while that shortens the step (steepest
// descent, each move's makespan the longest path, as the simulator's) among the splits
// `fits` accepts. Returns the makespan of the split reached; appends the critical paths of
// every split it passed through to `paths`.
template <typename Fits>
double improve_by_moves(const Problem& p, const Fits& fits, std::vector<int>& split, std::vector<PathCut>& paths) {
  auto at = [&](const std::vector<int>& n) { return critical_paths(p, std::vector<double>(n.begin(), n.end())); };
  CriticalPaths here = at(split);
  for (bool improved = true; improved;) {
    paths.insert(paths.end(), here.paths.begin(), here.paths.end());
    improved = false;
    std::vector<int> next = split;
    double next_ms = here.makespan;
    for (int from = 0; from < p.stages; ++from)
      for (int to = 0; to < p.stages; ++to) {
        if (from == to || split[from] <= p.min_blocks[from] || split[to] >= p.max_blocks[to]) continue;
        std::vector<int> trial = split;
        --trial[from];
        ++trial[to];
        if (!fits(trial)) continue;
        const double ms = at(trial).makespan;
        if (ms < next_ms) {
          next_ms = ms;
          next = trial;
          improved = true;
        }
      }
    if (improved) {
      split = next;
      here = at(split);
    }
  }
  return here.makespan;
}

// The master problem of the cutting planes: the split (integer n_s, and the rank sums),
// the makespan bound z minimised, the memory rows, and z >= path(n) for every path kept.
// Its optimum is a lower bound of the best step time: every path is one in every split.
class Master {
 public:
  Master(const Problem& p, double limit) : p_(p) {
    n_ = add_split(milp_, p);
    z_ = milp_.add_column(0, Milp::kInfinity, false, 1);
    rank_sums_ = add_rank_sums(milp_, p, n_);
    if (limit > 0)
      for (const MemoryRow& row : p.memory) {  // in units of the limit
        std::vector<Milp::Term> terms;
        for (int s = 0; s < p.stages; ++s) terms.push_back({n_[s], row.per_block[s] / limit});
        milp_.add_row({terms, -Milp::kInfinity, 1 - row.base / limit});
      }
  }

  Milp& milp() { return milp_; }
  const std::set<PathCut>& kept() const { return kept_; }

  Milp::Row row_of(const PathCut& path) const {
    Milp::Row row{{{z_, 1}}, path.base, Milp::kInfinity};
    for (int s = 0; s < p_.stages; ++s) row.terms.push_back({n_[s], -path.per_block[s]});
    return row;
  }
  // Keeps the paths the master lacks; returns their number.
  int keep(const std::vector<PathCut>& paths) {
    int added = 0;
    for (const PathCut& path : paths)
      if (kept_.insert(path).second) {
        milp_.add_row(row_of(path));
        ++added;
      }
    return added;
  }

  // The split and z of a point of the master (every column), and its last optimum.
  std::vector<double> split_at(const std::vector<double>& point) const {
    std::vector<double> n;
    for (int c : n_) n.push_back(point[c]);
    return n;
  }
  double z_at(const std::vector<double>& point) const { return point[z_]; }
  std::vector<double> optimum() const {
    std::vector<double> point(milp_.columns());
    for (int c = 0; c < milp_.columns(); ++c) point[c] = milp_.value(c);
    return point;
  }
  // The master's point of a split: z the longest kept path.
  std::vector<double> point_of(const std::vector<int>& split) const {
    std::vector<double> point(milp_.columns(), 0);
    for (int s = 0; s < p_.stages; ++s) {
      point[n_[s]] = split[s];
      if (!rank_sums_.empty()) point[rank_sums_[p_.lowered.rank_of(s)]] += split[s];
    }
    for (const PathCut& path : kept_) point[z_] = std::max(point[z_], cut_value(path, split));
    return point;
  }

 private:
  const Problem& p_;
  Milp milp_;
  std::vector<int> n_, rank_sums_;
  int z_ = 0;
  std::set<PathCut> kept_;
};

void require_split_fits(const CostProfile& prof, const Schedule& program, const std::vector<int>& blocks_per_stage,
                        const StageRecompute& recompute, double memory_limit_bytes) {
  if (memory_limit_bytes <= 0) return;
  const SplitEvaluation e = evaluate_split(prof, program, blocks_per_stage, recompute);
  const double peak = *std::max_element(e.peak_bytes.begin(), e.peak_bytes.end());
  if (peak > memory_limit_bytes)
    fail("split ", split_text(blocks_per_stage), " of schedule '", program.name, "' peaks at ", bytes_text(peak),
         " per rank, over the memory limit ", bytes_text(memory_limit_bytes), "; the smallest limit that fits is ",
         bytes_text(std::ceil(peak)));
}

Partition partition_stages(const CostProfile& prof, const Schedule& program, int n_layer,
                           double memory_limit_bytes, const StageRecompute& recompute) {
  const Problem p(prof, program, n_layer, recompute);
  const double limit = memory_limit_bytes;
  auto infeasible = [&]() {
    const Partition least = min_memory(p);
    fail("memory limit ", bytes_text(limit), " per rank: no split of ", n_layer, " blocks into the ", p.stages,
         " stages of schedule '", program.name, "' fits; the smallest limit that fits is ",
         bytes_text(std::ceil(max_peak(least))), ", split ", split_text(least.blocks_per_stage));
  };
  auto fits_rows = [&](const std::vector<int>& n) {
    return limit <= 0 ||
           std::none_of(p.memory.begin(), p.memory.end(), [&](const MemoryRow& r) { return bytes_at(r, n) > limit; });
  };
  std::vector<PathCut> paths;  // the critical paths of the splits tried before the master

  // The incumbent: the balanced split, improved by moving one block at a time.
  std::vector<int> best = balanced_split(p);
  double best_ms = std::numeric_limits<double>::infinity();
  if (fits_rows(best)) best_ms = improve_by_moves(p, fits_rows, best, paths);
  else paths = critical_paths(p, std::vector<double>(best.begin(), best.end())).paths;

  // Cutting planes on the relaxation: cheap rounds that find the paths that matter near
  // the optimum.
  Master relaxed(p, limit);
  relaxed.keep(paths);
  for (int round = 0;; ++round) {
    PPTRAIN_CHECK(round < kMaxRounds, "no convergence");
    if (!relaxed.milp().minimize_relaxation()) infeasible();
    if (relaxed.keep(critical_paths(p, relaxed.split_at(relaxed.optimum())).paths) == 0) break;
  }
  // The branch and bound's master holds the paths tight at the relaxation's optimum (within
  // a few percent) and the incumbent's: the others cost time at every branch and rarely
  // bind; those a branch's relaxation violates are added there (lazily), and once the
  // search ends kept for good. It runs again until its optimum is the makespan of its
  // split (bound and simulation meet).
  Master master(p, limit);
  {
    const std::vector<double> lp = relaxed.optimum();
    const std::vector<double> at = relaxed.split_at(lp);
    std::vector<PathCut> tight;
    for (const PathCut& path : relaxed.kept())
      if (cut_value(path, at) >= relaxed.z_at(lp) * (1 - kTight)) tight.push_back(path);
    master.keep(tight);
    if (best_ms < std::numeric_limits<double>::infinity())
      master.keep(critical_paths(p, std::vector<double>(best.begin(), best.end())).paths);
  }
  std::vector<PathCut> found;
  const Milp::LazyRows lazy = [&](const std::vector<double>& point) {
    std::vector<Milp::Row> rows;
    const std::vector<double> at = master.split_at(point);
    for (const PathCut& path : critical_paths(p, at).paths)
      if (cut_value(path, at) > master.z_at(point) + 1e-7 * (1 + master.z_at(point))) {
        rows.push_back(master.row_of(path));
        found.push_back(path);
      }
    return rows;
  };
  double bound = 0;
  for (int round = 0;; ++round) {
    PPTRAIN_CHECK(round < kMaxRounds, "no convergence");
    found.clear();
    const std::vector<double> incumbent =
        best_ms < std::numeric_limits<double>::infinity() ? master.point_of(best) : std::vector<double>{};
    if (!master.milp().minimize(incumbent, lazy)) infeasible();
    bound = master.milp().objective();
    master.keep(found);
    std::vector<double> at = master.split_at(master.optimum());
    for (double& x : at) x = std::round(x);
    const CriticalPaths critical = critical_paths(p, at);
    if (critical.makespan < best_ms) {
      best_ms = critical.makespan;
      best.assign(at.begin(), at.end());
    }
    if (best_ms <= bound + 1e-7 * (1 + bound) || master.keep(critical.paths) == 0) break;
  }

  Partition part = evaluate(p, best);
  PPTRAIN_CHECK(agrees(part.step_ms, bound), "split ", split_text(part.blocks_per_stage), ": simulated ",
                part.step_ms, " ms, solver ", bound, " ms");
  PPTRAIN_CHECK(limit <= 0 || max_peak(part) <= limit * (1 + 1e-6), "split ", split_text(part.blocks_per_stage),
                " peaks at ", max_peak(part), " bytes over the limit ", limit);
  return part;
}

}  // namespace pptrain
