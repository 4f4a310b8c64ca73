// The automatic zero-bubble schedule (`--schedule auto`; Qi et al., "Zero Bubble Pipeline
// Parallelism", ICLR 2024, section 3): a program built for given costs (T_F, T_I, T_W,
// T_comm) and a per-rank activation memory limit instead of a fixed pattern.
//
// The paper's heuristic (auto_heuristic.h) builds candidates; in place of the paper's ILP
// the search here tries every combination of the heuristic's knobs (caps on microbatches
// in flight per rank, how far an F may delay an I, which idle gaps a W fills, whether F
// and I alternate, ...), then moves one rank's cap up or down at a time from the fastest
// while that helps. Every candidate is played by the simulator (simulate.h); the
// fastest whose peak activations fit the limit on every rank wins (ties: less memory).
// The fixed schedules of the same placement compete too (v = 1: gpipe, 1f1b, zb-h1, zb-h2;
// v = 2, V placement: zbv, dualpipev), as does running one microbatch at a time, so the
// result is never slower in simulation than the best of them that fits. When one of them
// wins, the result is its program, named "auto: <its name>".
#pragma once
#include "pipeline/ir.h"
#include "pipeline/simulate.h"

namespace pptrain::pipeline {

// The compute program (F, I, W or B per rank; not lowered: prepare_schedule() validates
// and lowers it) of the automatic schedule for pp ranks, m microbatches and 1 (loop
// placement) or 2 (V placement) stages per rank. memory_limit: peak activations per rank
// in the units of CostModel::act_input / act_weight (as SimResult::peak_activations
// reports them), 0 = none. Throws Error (one line) for a bad shape, a shape beyond
// check_size(), per-stage costs of the wrong length, or a limit below what one
// microbatch in flight needs.
Schedule auto_schedule(int pp, int microbatches, int stages_per_rank, const CostModel& cost,
                       double memory_limit);

}  // namespace pptrain::pipeline
