// JobPlan: what a job will run, worked out once from the loaded config before anything is
// allocated: the layout the planner resolves (partition/auto_layout.h: a split from measured
// costs, schedule: auto's program, training.recompute: auto per stage) and the schedule
// prepared from it (generated or loaded, validated, lowered, placed on the pp ranks).
//
// Every command that asks "what would this config run?" takes its answer from plan_job:
// `train` (which then runs the preflight on the plan and hands the plan to Job, which
// prepares nothing again), `train --dry-run` (the plan's predicted memory per rank),
// `plan --out` (the written config planned back, as train will) and `schedule --config`
// (the plan's program, drawn and simulated).
#pragma once
#include <optional>
#include <string>

#include "core/config.h"
#include "parallel/mpi_comm.h"
#include "partition/layout_search.h"
#include "partition/profile.h"
#include "pipeline/ir.h"

namespace pptrain {

struct JobPlan {
  Config config;                          // resolved: concrete split, recompute per stage
  pipeline::Schedule schedule;            // prepared, as the executor runs it
  std::optional<LayoutChoice> prediction;  // with costs (parallel.profile or schedule: auto)
  std::string profile_source;             // where those costs came from

  // The schedule's name as the user knows it: the config's, or auto's program's.
  const std::string& schedule_name() const;
  double predicted_step_ms() const { return prediction ? prediction->step_ms : 0; }
};

// Collective over `processes` when the config's costs are measured at start-up
// (parallel.profile: measure, or schedule: auto with no profile): every process times
// layers with `measure` (cli/commands.h, measure_options); otherwise local. `processes` need
// not hold the config's world size (train checks that first, job/job.h's checked_world;
// --dry-run and schedule --config run on any number). Throws pptrain::Error naming the
// config and key.
JobPlan plan_job(const Config& loaded, MpiComm& processes, const ProfileOptions& measure = {});

// "planner: layers_per_stage [0,4,4] schedule zb-h1 (costs FILE): predicted step 812.3 ms
// (pipeline 790.1, sync 12.0, update 10.2; bubble 0.081; peak 1.210 GiB per rank)";
// "" without a prediction.
std::string prediction_line(const JobPlan& plan);

}  // namespace pptrain
