// The list-scheduling heuristic of the zero-bubble paper (Qi et al., "Zero Bubble Pipeline
// Parallelism", ICLR 2024, section 3.1): one compute program (F, I, W per rank) from the
// costs, a memory limit and a few knobs. auto_schedule.h searches over the knobs and keeps
// the fastest program; this file builds one.
//
// The ranks are played forward in time together, the rank that is free earliest deciding
// first, so what has arrived at a rank when it decides is exact. A free rank runs:
//   1. an I whose gradient has arrived (it unblocks the ranks before it), unless the last
//      was an I too and `alternate` asks for an F in between;
//   2. else an F whose input has arrived, if the rank's memory holds one more microbatch
//      (and its cap on microbatches in flight allows) and the F does not delay the I the
//      rank expects next by more than `f_delay` x T_F. Before its first I a rank thus runs
//      as many warm-up F's as memory and the timing of the stages after it allow;
//   3. else a pending W (oldest first), to fill what would be idle time when the gap to the
//      next expected input is at least `w_fill` x T_W, or to free memory an F needs; W's
//      are otherwise deferred, and flushed once the rank has no F or I left.
// What a rank expects to arrive is what producers already placed will send: a producer
// not placed yet starts no earlier than now.
#pragma once
#include <optional>
#include <vector>

#include "pipeline/ir.h"
#include "pipeline/simulate.h"

namespace pptrain::pipeline {

struct HeuristicKnobs {
  // [pp] microbatches a rank may hold between the F of its first stage and the I of that
  // stage; empty = as many as the memory limit allows.
  std::vector<int> max_in_flight;
  double f_delay = 0;  // an F may delay the next expected I by at most f_delay x T_F
  double w_fill = 0;   // a W fills an idle gap expected to last at least w_fill x T_W
  // After an I, an F that may run goes before the next I (the paper's steady state of one
  // F, one B): new microbatches keep entering while gradients flow back.
  bool alternate = false;
  // V placement: admit a microbatch only with memory for both of its stages on the rank
  // (never deadlocks); false: with room for one more second-stage F (may deadlock; the
  // run then returns nothing).
  bool reserve_second_stage = true;
  // Messages are planned as taking comm_margin x T_comm: lowering (lower.h) places each
  // receive by a unit-cost replay, and one posted after its send starts the transfer late.
  double comm_margin = 1;
};

struct HeuristicRun {
  Schedule schedule;                // compute program, name "auto"
  std::vector<int> peak_in_flight;  // [pp] microbatches between first-stage F and I
  // When the last action ends as the heuristic played it. simulate() can differ when
  // messages cost time: it starts a message when its receive is posted, where lowering
  // put it, if that is after the send.
  double makespan = 0;
};

// One program for pp ranks, m microbatches, v stages per rank (1: loop placement, 2: V
// placement), peak activations per rank <= memory_limit (CostModel units, as reported by
// simulate(); 0 = none). nullopt when the knobs make the ranks wait for each other forever.
std::optional<HeuristicRun> run_heuristic(int pp, int microbatches, int stages_per_rank,
                                          const CostModel& cost, double memory_limit,
                                          const HeuristicKnobs& knobs);

// Time of one action of `stage` and the activation memory it adds (F) or frees (I, W), in
// the simulator's terms (simulate.h): a stage costs 1/v of the per-rank costs unless the
// per-stage lists are given; memory is counted per stage and reported divided by v.
double action_time(const CostModel& cost, int stages_per_rank, Op op, int stage);
struct StageActivation {
  double input = 0;   // freed by I
  double weight = 0;  // freed by W
};
StageActivation stage_activation(const CostModel& cost, int stage);

}  // namespace pptrain::pipeline
