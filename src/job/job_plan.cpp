#include "job/job_plan.h"

#include <cstdio>
#include <utility>

#include "core/error.h"
#include "partition/auto_layout.h"
#include "partition/partition.h"
#include "pipeline/registry.h"

namespace pptrain {

const std::string& JobPlan::schedule_name() const {
  // schedule: auto names its program after what it built (e.g. "auto(zb, v=1)").
  return config.parallel.schedule == "auto" ? schedule.name : config.parallel.schedule;
}

JobPlan plan_job(const Config& loaded, MpiComm& processes, const ProfileOptions& measure) {
  ResolvedLayout layout = resolve_layout(loaded, processes, measure);
  JobPlan plan{std::move(layout.config), {}, std::move(layout.prediction), std::move(layout.profile_source)};
  // schedule: auto comes with the program the planner built; every other schedule is
  // generated (or loaded from its file) from the resolved config.
  plan.schedule = layout.program ? pipeline::prepare_schedule(std::move(*layout.program))
                                 : pipeline::prepare_schedule(plan.config);
  return plan;
}

std::string prediction_line(const JobPlan& plan) {
  if (!plan.prediction) return "";
  const LayoutChoice& p = *plan.prediction;
  char figures[256];
  std::snprintf(figures, sizeof figures,
                "predicted step %.1f ms (pipeline %.1f, sync %.1f, update %.1f; bubble %.3f; peak %.3f GiB per rank)",
                p.step_ms, p.pipeline_ms, p.sync_ms, p.optimizer_ms, p.bubble, p.peak_bytes / double(1 << 30));
  return cat("planner: layers_per_stage ", blocks_text(p.layers_per_stage), " schedule ", p.schedule, " (costs ",
             plan.profile_source, "): ", figures);
}

}  // namespace pptrain
