// training.recompute: auto, and `pptrain plan`'s recompute: which stages recompute so that
// every rank's peak (parameters, gradients, moments and the simulated activations) fits a
// per-rank memory limit, at the least cost.
//
// The rule: with no limit, or when the split without recompute fits, none everywhere (the
// recompute only adds time: one more forward per block under full). Otherwise stages
// switch to recompute one at a time, those with the most microbatches in flight first (a
// stage's activations are multiplied by them: under 1F1B the first stage holds p
// microbatches, the last one), each trying the cheaper mode first (attention, where the
// attention is naive and so keeps probabilities to drop; then full), until the exact
// partition (partitioner.h) for that choice fits the limit. The partition stays exact for
// each choice tried; the choice itself is this greedy loop outside it (not a joint
// optimum: a choice with fewer recomputing stages elsewhere could be faster).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "partition/cost_profile.h"
#include "partition/partitioner.h"
#include "pipeline/ir.h"

namespace pptrain {

// One plan of the program and split for a given recompute choice.
struct RecomputePlan {
  StageRecompute recompute;  // [num_stages]
  pipeline::Schedule program;  // the compute program planned (schedule: auto builds its own)
  Partition partition;
};

// Plans the program and split for a recompute choice under the limit; throws
// pptrain::Error when no split fits (the partitioner's line, naming the smallest limit).
using PlanForRecompute = std::function<RecomputePlan(const StageRecompute&)>;

// The stages of `program` from most to fewest microbatches in flight at once (taken by F,
// not yet freed by W, at any moment of the program); ties in stage order.
std::vector<int> stages_by_microbatches_in_flight(const pipeline::Schedule& program);

// The rule above. `order`: stages_by_microbatches_in_flight of the program the choice is
// made for; `naive_attention`: whether `attention` drops anything (profile.attention).
// With memory_limit_bytes 0 only the none plan is made. Throws pptrain::Error when even
// every stage under full does not fit: one line naming the smallest limit that would.
RecomputePlan choose_recompute(const PlanForRecompute& plan, const std::vector<int>& order, bool naive_attention,
                               double memory_limit_bytes);

// The same for a fixed program (a generated schedule), planned with partition_stages.
RecomputePlan choose_recompute(const CostProfile& prof, const pipeline::Schedule& program, int n_layer,
                               double memory_limit_bytes);

// Whether any stage recomputes.
bool any_recompute(const StageRecompute& recompute);

// "[full, full, none, none]".
std::string recompute_text(const StageRecompute& recompute);

}  // namespace pptrain
