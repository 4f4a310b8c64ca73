// What a training config leaves to the planner, resolved at start-up, identically on
// every rank:
//   parallel.layers_per_stage: auto with parallel.profile set  the exact partition of the
//       layer chain for the config's schedule (partitioner.h) from the measured costs;
//       with no profile the closed-form FLOP balance (partition.h), as before, so runs
//       that ask for nothing measured stay reproducible from their config alone
//   parallel.schedule: auto   the automatic zero-bubble program (pipeline/auto_schedule.h)
//       for the measured costs, with its split chosen jointly (partition for a fixed
//       schedule, program for that split, partition again for the program)
// The profile is parallel.profile: a cost file of `pptrain profile`, or `measure`: timed
// here at start-up, every rank at once, each layer kind's time the mean over the ranks of
// each rank's median (a schedule: auto with no profile measures too). With
// costs, every layout (planned or given) comes with the step time they predict
// (layout_search.h), which the log and the metrics show beside the measured one.
#pragma once
#include <optional>

#include "core/config.h"
#include "parallel/mpi_comm.h"
#include "partition/cost_profile.h"
#include "partition/layout_search.h"
#include "partition/partitioner.h"
#include "partition/profile.h"
#include "pipeline/ir.h"

namespace pptrain {

struct ResolvedLayout {
  Config config;                               // layers_per_stage concrete when planned
  std::optional<pipeline::Schedule> program;   // schedule: auto: its compute program
  std::optional<LayoutChoice> prediction;      // when measured costs were used
  std::string profile_source;                  // the cost file, or "measured at start-up"
};

// Collective over `world` (every rank measures, partition/profile.h). Throws
// pptrain::Error naming the config and key (a profile of other shapes, an unreadable file).
// training.recompute: auto is chosen here, per stage, by recompute_choice.h's rule (the
// least recompute whose plan fits parallel.memory_per_rank_gib, the stages with the most
// microbatches in flight first) and written into the resolved config; a scalar or a
// per-stage list is planned and predicted with as given.
// `measure`: how a profile is taken when parallel.profile is `measure` (its token ids).
ResolvedLayout resolve_layout(const Config& cfg, MpiComm& world, const ProfileOptions& measure = {});

// The config's training.recompute per stage, as the blocks apply it (attention with fused
// attention is none).
StageRecompute stage_recompute(const Config& cfg);

// Refuses a profile measured for other shapes, backend or precision than `cfg` (one line
// naming `what` and the first key that differs). The micro-batch size may differ (times
// scale with it, layout_search.h).
void check_profile_matches(const CostProfile& p, const Config& cfg, const std::string& what);

}  // namespace pptrain
