// The exact stage partitioner: the split of the layer chain (embedding, n_layer blocks,
// head) into the schedule's stages whose simulated step time, with measured costs, is the
// smallest, under a per-rank memory limit.
//
// Why it can be exact: for a program (a fixed order of compute actions per rank) the
// simulator's makespan is the longest path through a graph fixed by the program
// (pipeline::timing_graph), whose node durations are affine in the blocks per stage n_s;
// so it is the largest of finitely many affine functions of n, one per path. A rank's
// peak memory is likewise the largest, over points fixed by the program
// (pipeline::memory_points), of sums affine in n. The best split is then the optimum of a
// small mixed-integer program: integer n_s with sum n_s = n_layer, z >= path(n) for every
// path, memory(point, n) + static(rank, n) <= limit, minimise z.
//
// How it is solved (GLPK, partition/milp.h): stating the graph itself (a start time per
// action, a row per edge: ~1500 columns for 128 blocks in 16 stages) took GLPK's branch
// and bound 4 to 11 s there, so the paths are generated instead (cutting planes): the
// master problem holds n, z and the paths found so far, a relaxation whose optimum is a
// lower bound; the longest paths at its solution (fractional or not) are added until the
// longest path at its integer optimum is no longer than that optimum. Then that split's
// simulated step is the smallest of all splits (to the solver's 1e-7 relative tolerance),
// and the simulator's number is what is reported (checked against the solver's bound).
// The search starts from a good incumbent: the balanced split (cheapest most expensive
// stage), improved by moving single blocks; paths found in a branch are kept for good
// once the search ends. 128 blocks into 16 stages (1F1B and ZB-H1 at pp=16, m=32; ZB-V at
// pp=8, v=2, m=16) take 0.1 to 0.4 s.
#pragma once
#include <string>
#include <vector>

#include "partition/cost_profile.h"
#include "pipeline/ir.h"
#include "pipeline/simulate.h"

namespace pptrain {

// training.recompute per stage ([num_stages] of none | attention | full), the block's costs
// of each stage taken from the profile's matching block (cost_profile.h: block_cost); empty:
// none on every stage. The partition is exact for a given choice; which stages recompute is
// chosen outside it (partition/recompute_choice.h).
using StageRecompute = std::vector<std::string>;

// The simulator's costs of one split ([num_stages] blocks per stage): per stage,
// F/I/W = the embedding's (stage 0) + n_s blocks' + the head's (last stage) in ms; comm =
// the profile's transfer time; activation bytes freed by I, kept until W from F and taken
// by I, and static bytes (parameters, gradients, optimizer moments), summed the same way.
pipeline::CostModel stage_cost_model(const CostProfile& prof, const std::vector<int>& blocks_per_stage,
                                     const StageRecompute& recompute = {});

struct SplitEvaluation {
  double step_ms = 0;              // the simulated makespan of one step
  std::vector<double> peak_bytes;  // [pp] peak activations + static bytes of the rank's stages
};

// Simulates `program` (a compute program, or a lowered one) with the split's costs.
SplitEvaluation evaluate_split(const CostProfile& prof, const pipeline::Schedule& program,
                               const std::vector<int>& blocks_per_stage, const StageRecompute& recompute = {});

// Throws pptrain::Error, one line naming the smallest limit that fits, when the given split
// of `program` peaks over memory_limit_bytes on some rank (evaluate_split); 0: no limit.
void require_split_fits(const CostProfile& prof, const pipeline::Schedule& program,
                        const std::vector<int>& blocks_per_stage, const StageRecompute& recompute,
                        double memory_limit_bytes);

struct Partition {
  std::vector<int> blocks_per_stage;  // [num_stages]; the first and last may be 0
  double step_ms = 0;                 // simulated, as evaluate_split
  std::vector<double> peak_bytes;     // [pp]
};

// The split of n_layer blocks into program.num_stages() stages (stage 0 and the last
// stage may hold no block, every other stage at least one) with the smallest simulated
// step time among those whose every rank's peak_bytes is at most memory_limit_bytes (0:
// no limit). Among splits of equal step time (to 1e-7 relative, the solver's tolerance)
// the first found is taken: the same inputs give the same split. Throws pptrain::Error
// when n_layer is too small for the stages, or when no split fits the limit: one line
// naming the smallest limit any split fits.
Partition partition_stages(const CostProfile& prof, const pipeline::Schedule& program, int n_layer,
                           double memory_limit_bytes, const StageRecompute& recompute = {});

// The split whose largest per-rank peak_bytes is the smallest (ties: as above).
Partition min_memory_partition(const CostProfile& prof, const pipeline::Schedule& program, int n_layer,
                               const StageRecompute& recompute = {});

}  // namespace pptrain
