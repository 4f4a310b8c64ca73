// pptrain train CONFIG [section.key=value ...] [--dump DIR] [--dry-run]
// Parse, check up front (job/preflight.h: data, output paths, memory), assemble the job,
// run the training loop. Every rank parses the config, runs the checks and builds its part
// of the job; world rank 0 prints.
// --dry-run resolves the config and the layout as a run would (the planner included) and
// prints the predicted memory of every (pp, tp) rank (job/memory_report.h), then exits 0:
// no model, no data, no output folders. It runs on any number of processes, one included,
// whatever the config's world size; world rank 0 prints.
#include <cstdio>

#include "checkpoint/checkpoint_checks.h"
#include "cli/commands.h"
#include "core/config.h"
#include "core/error.h"
#include "core/faults.h"
#include "core/log.h"
#include "model/dims.h"
#include "job/job.h"
#include "job/memory_report.h"
#include "job/preflight.h"
#include "parallel/mpi_session.h"
#include "partition/auto_layout.h"
#include "partition/partition.h"
#include "pipeline/registry.h"
#include "train/run_training.h"

namespace pptrain {
namespace {

struct TrainArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string dump_dir;  // write parameter dumps after every step (tests)
  bool dry_run = false;
};

TrainArgs parse_args(const Args& args) {
  TrainArgs out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--dump") {
      if (i + 1 >= args.size()) fail("train: --dump needs a directory");
      out.dump_dir = args[++i];
    } else if (a == "--dry-run") {
      out.dry_run = true;
    } else if (a.rfind("--", 0) == 0) {
      fail("train: unknown option '", a, "' (expected CONFIG [section.key=value ...] [--dump DIR] [--dry-run])");
    } else if (out.config.empty() && a.find('=') == std::string::npos) {
      out.config = a;
    } else {
      out.overrides.push_back(a);
    }
  }
  if (out.config.empty()) fail("train: missing CONFIG (usage: pptrain train CONFIG [section.key=value ...])");
  return out;
}

// "planner: layers_per_stage [0,4,4] schedule zb-h1 (costs: FILE): predicted step 812.3 ms
// (pipeline 790.1, sync 12.0, update 10.2; bubble 0.081; peak 1.21 GiB per rank)"
void log_prediction(const ResolvedLayout& layout) {
  const LayoutChoice& p = *layout.prediction;
  char figures[256];
  std::snprintf(figures, sizeof figures,
                "predicted step %.1f ms (pipeline %.1f, sync %.1f, update %.1f; bubble %.3f; peak %.3f GiB per rank)",
                p.step_ms, p.pipeline_ms, p.sync_ms, p.optimizer_ms, p.bubble, p.peak_bytes / double(1 << 30));
  log::info("planner: layers_per_stage ", blocks_text(p.layers_per_stage), " schedule ", p.schedule, " (costs ",
            layout.profile_source, "): ", figures);
}

// What parallel.zero: 1 shards under this config ("" when nothing is sharded).
std::string zero_text(const Config& cfg) {
  if (!cfg.zero_shards_moments()) return "";
  if (cfg.zero_shards_masters())
    return " | ZeRO-1: AdamW moments and fp32 masters sharded over dp, bf16 weights all-gathered";
  return " | ZeRO-1: AdamW moments sharded over dp; fp32 masters whole (the fp32 layers compute with them)";
}

// The profile options of a start-up measurement (parallel.profile: measure): timed on the
// job's data; nothing is read otherwise.
ProfileOptions measure_options(const Config& cfg) {
  return cfg.parallel.profile == "measure" ? profile_options(cfg) : ProfileOptions{};
}

// --dry-run: the layout a run of `loaded` would resolve and every (pp, tp) rank's
// predicted memory. resolve_layout is collective over the processes there are (it may
// time layers for the planner on them); nothing else communicates.
int dry_run(const Config& loaded, MpiSession& mpi) {
  MpiComm processes = MpiComm::world();
  const ResolvedLayout layout = resolve_layout(loaded, processes, measure_options(loaded));
  const Config& cfg = layout.config;
  const pipeline::Schedule schedule =
      layout.program ? pipeline::prepare_schedule(*layout.program) : pipeline::prepare_schedule(cfg);
  if (mpi.rank() != 0) return 0;
  if (layout.prediction) log_prediction(layout);
  const ParallelConfig& par = cfg.parallel;
  log::info("dry run of ", cfg.source, ": ", cfg.world_size(), " ranks (dp ", par.dp, " pp ", par.pp, " tp ", par.tp,
            ") | schedule ", layout.program ? layout.program->name : par.schedule, ", ", par.microbatches,
            " microbatches, blocks per stage ", blocks_text(blocks_per_stage(cfg)), ", recompute per stage ",
            ModelDims::recompute_per_stage_text(cfg), " | ", cfg.device, " ", cfg.training.precision, zero_text(cfg),
            " | predicted memory per rank (dp replicas hold the same):");
  for (int pp_rank = 0; pp_rank < par.pp; ++pp_rank)
    for (int tp_rank = 0; tp_rank < par.tp; ++tp_rank)
      log::info("  ", format_memory_report(predicted_memory_report(cfg, schedule, pp_rank, tp_rank)));
  return 0;
}

}  // namespace

int cmd_train(const Args& raw_args, MpiSession& mpi) {
  const TrainArgs args = parse_args(raw_args);
  // Planted faults (tests of the tests): parsed once, announced, handed to where they act.
  const Faults all_faults = Faults::from_env();
  const Config loaded = load_config(args.config, args.overrides, build_features());
  {
    std::vector<std::string> tensors;
    for (const auto& [name, shape] : checkpoint_tensors(loaded.model, loaded.source)) tensors.push_back(name);
    all_faults.check_tensor_names(tensors);
  }
  if (args.dry_run) return dry_run(loaded, mpi);
  all_faults.announce(mpi.rank());
  JobPlan plan;
  Config cfg = loaded;
  // Everything the config and the file system can tell up front (data, output paths,
  // memory) is checked before the Job allocates the model; what the config leaves to the
  // planner (a split from measured costs, schedule: auto) is resolved first.
  {
    MpiComm world = checked_world(loaded);
    ResolvedLayout layout = resolve_layout(loaded, world, measure_options(loaded));
    cfg = layout.config;
    plan.program = layout.program;
    if (layout.prediction) {
      plan.predicted_step_ms = layout.prediction->step_ms;
      if (mpi.rank() == 0) log_prediction(layout);
    }
    run_preflight(cfg, plan.program ? pipeline::prepare_schedule(*plan.program) : pipeline::prepare_schedule(cfg),
                  world);
  }
  Job job(cfg, all_faults.on_rank(mpi.rank()), nullptr, plan);
  TrainingHooks hooks;
  hooks.dump_dir = args.dump_dir;
  return run_training(job, hooks);
}

}  // namespace pptrain
