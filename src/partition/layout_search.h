// Layout search: every (pp, tp, dp, stages per rank, micro-batch size, microbatches,
// schedule, schedule: auto included) that runs the config's global batch on N ranks,
// ranked by predicted step time.
//
// The prediction of one layout, from a profile measured at one micro_batch_size and tp = 1
// (and the larger tp degrees the profiling ranks allowed):
//   pipeline   the simulated makespan of the schedule's program with the partitioner's
//              split (partitioner.h), stage costs from the profile scaled to the layout
//              (scaled_profile below)
//   sync       the gradient all-reduces after the flush, not overlapped: the tied embedding
//              over the embedding group (when its first and last stage sit on different
//              ranks) and every gradient over dp, with the profile's all-reduce model
//   optimizer  the AdamW update of the rank's parameters (the profile's time per parameter)
// Memory per rank: parameters, gradients and moments of its stages plus the peak of the
// activations the simulator reports for its stages.
// Recompute: a layout that does not fit the memory limit without it is planned again with
// stages recomputing (recompute_choice.h), its time predicted with the measured recompute
// costs (the block's I with the forward it re-runs).
#pragma once
#include <string>
#include <vector>

#include "core/config.h"
#include "partition/cost_profile.h"
#include "partition/partitioner.h"
#include "partition/recompute_choice.h"
#include "pipeline/ir.h"

namespace pptrain {

struct LayoutChoice {
  int pp = 1, tp = 1, dp = 1, stages_per_rank = 1, micro_batch_size = 1, microbatches = 1;
  std::string schedule;
  std::vector<int> layers_per_stage;  // [pp·stages_per_rank]
  StageRecompute recompute;           // [pp·stages_per_rank] training.recompute per stage
  double pipeline_ms = 0, sync_ms = 0, optimizer_ms = 0;
  double step_ms = 0;     // the sum of the three
  double bubble = 0;      // simulated idle fraction of the pipeline phase
  double peak_bytes = 0;  // the largest rank's
};

struct LayoutSearchOptions {
  int ranks = 1;
  double memory_per_rank_bytes = 0;  // 0: no limit
  // Micro-batch sizes tried: divisors of the per-replica batch up to this many times the
  // profiled one (timings are scaled linearly in it, which is optimistic far from it).
  int max_micro_batch_factor = 4;
};

// The profile of a layout with micro-batch size `mbs` and tensor parallelism `tp`, from one
// measured at (p.micro_batch_size, p.tp). Stated model: layer times and activation bytes
// scale linearly with the micro-batch size; compute divides by tp (Megatron's split of
// every GEMM) and each block adds two all-reduces of its [N,C] output in F and two of its
// input gradient in I (the embedding one in F, the head one in I), timed with the
// all-reduce model; parameter and optimizer bytes divide by tp. Where the profile measured
// that tp (p.other_tp), its layer costs are taken as measured and only the micro-batch
// scaling applies.
CostProfile scaled_profile(const CostProfile& p, int mbs, int tp);

// The prediction of one layout: `prof` already scaled to it, `program` its schedule's
// (compute or lowered) program, `blocks_per_stage` its split, dp its replicas.
LayoutChoice predict_layout(const CostProfile& prof, const pipeline::Schedule& program,
                            const std::vector<int>& blocks_per_stage, int dp, const StageRecompute& recompute = {});

// schedule: auto with its split. A fixed zero-bubble schedule of the same placement (zb-h1,
// or zbv for 2 stages per rank) gives a first split; the program is built for its costs;
// the split is made exact for that program (partitioner.h: under `memory_limit_bytes` per
// rank, 0: none; throws Error when nothing fits); the program is built again for the
// final split: the one a run of that split with schedule: auto builds (auto_program).
struct AutoPlan {
  pipeline::Schedule program;
  std::vector<int> blocks_per_stage;
};
// The fixed program schedule: auto starts from (zb-h1, or zbv with 2 stages per rank): its
// first split, and the order in which stages take up recompute.
pipeline::Schedule auto_start_program(int pp, int microbatches, int stages_per_rank);

AutoPlan plan_auto_schedule(const CostProfile& prof, int pp, int microbatches, int stages_per_rank, int n_layer,
                            double memory_limit_bytes, const StageRecompute& recompute = {});
// The program of schedule: auto for a given split (no activation limit).
pipeline::Schedule auto_program(const CostProfile& prof, int pp, int microbatches, int stages_per_rank,
                                const std::vector<int>& blocks_per_stage, const StageRecompute& recompute = {});
// The recompute choice (recompute_choice.h) with schedule: auto's plan for each choice tried;
// the stages ordered by the microbatches in flight of the zero-bubble start program.
RecomputePlan plan_auto_recompute(const CostProfile& prof, int pp, int microbatches, int stages_per_rank,
                                  int n_layer, double memory_limit_bytes);

// Feasible layouts, fastest first (equal predictions: less memory first). Throws Error when
// none fits (naming the smallest memory per rank that would).
std::vector<LayoutChoice> search_layouts(const Config& cfg, const CostProfile& prof,
                                         const LayoutSearchOptions& opts);

// `cfg` with the layout's parallel section, micro-batch size and recompute (a per-stage
// list when a stage recomputes, else none): runnable as is with mpirun -np pp·tp·dp.
Config config_for_layout(const Config& cfg, const LayoutChoice& choice);

}  // namespace pptrain
