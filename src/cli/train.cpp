// pptrain train CONFIG [section.key=value ...] [--dump DIR [--step-from REF]] [--dry-run]
// Parse, check up front (job/preflight.h: data, output paths, memory), assemble the job,
// run the training loop. Every rank parses the config, runs the checks and builds its part
// of the job; world rank 0 prints.
// --dry-run resolves the config and the layout as a run would (the planner included) and
// prints the predicted memory of every (pp, tp) rank (job/memory_report.h), then exits 0:
// no model, no data, no output folders. It runs on any number of processes, one included,
// whatever the config's world size; world rank 0 prints.
// --dump DIR writes every rank's parameters, gradients and loss after every step; with
// --step-from REF each step k > 1 starts from REF/step_<k−1>.h5 instead of the run's own
// step k − 1 (both for the tests that compare layouts step by step).
#include <cstdio>

#include "checkpoint/checkpoint_checks.h"
#include "cli/commands.h"
#include "core/config.h"
#include "core/error.h"
#include "core/faults.h"
#include "core/log.h"
#include "model/dims.h"
#include "job/job.h"
#include "job/job_plan.h"
#include "job/memory_report.h"
#include "job/preflight.h"
#include "parallel/mpi_session.h"
#include "partition/partition.h"
#include "train/run_training.h"

namespace pptrain {
namespace {

struct TrainArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string dump_dir;   // write parameter dumps after every step (tests)
  std::string step_from;  // each step k > 1 from this folder's step_<k−1>.h5 (tests)
  bool dry_run = false;
};

TrainArgs parse_args(const Args& args) {
  TrainArgs out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--dump") {
      if (i + 1 >= args.size()) fail("train: --dump needs a directory");
      out.dump_dir = args[++i];
    } else if (a == "--step-from") {
      if (i + 1 >= args.size()) fail("train: --step-from needs a checkpoint directory");
      out.step_from = args[++i];
    } else if (a == "--dry-run") {
      out.dry_run = true;
    } else if (a.rfind("--", 0) == 0) {
      fail("train: unknown option '", a, "' (expected CONFIG [section.key=value ...] [--dump DIR [--step-from REF]] [--dry-run])");
    } else if (out.config.empty() && a.find('=') == std::string::npos) {
      out.config = a;
    } else {
      out.overrides.push_back(a);
    }
  }
  if (out.config.empty()) fail("train: missing CONFIG (usage: pptrain train CONFIG [section.key=value ...])");
  if (!out.step_from.empty() && out.dump_dir.empty())
    fail("train: --step-from REF compares steps from a reference's checkpoints: it needs --dump DIR");
  return out;
}

// What parallel.zero: 1 shards under this config ("" when nothing is sharded).
std::string zero_text(const Config& cfg) {
  if (!cfg.zero_shards_moments()) return "";
  if (cfg.zero_shards_masters())
    return " | ZeRO-1: AdamW moments and fp32 masters sharded over dp, bf16 weights all-gathered";
  return " | ZeRO-1: AdamW moments sharded over dp; fp32 masters whole (the fp32 layers compute with them)";
}

// --dry-run: the plan a run of `loaded` would make and every (pp, tp) rank's predicted
// memory. The plan is collective over the processes there are (it may time layers for the
// planner on them); nothing else communicates.
int dry_run(const Config& loaded, MpiSession& mpi) {
  MpiComm processes = MpiComm::world();
  const JobPlan plan = plan_job(loaded, processes, measure_options(loaded));
  const Config& cfg = plan.config;
  if (mpi.rank() != 0) return 0;
  if (plan.prediction) log::info(prediction_line(plan));
  const ParallelConfig& par = cfg.parallel;
  log::info("dry run of ", cfg.source, ": ", cfg.world_size(), " ranks (dp ", par.dp, " pp ", par.pp, " tp ", par.tp,
            ") | schedule ", plan.schedule_name(), ", ", par.microbatches,
            " microbatches, blocks per stage ", blocks_text(blocks_per_stage(cfg)), ", recompute per stage ",
            ModelDims::recompute_per_stage_text(cfg), " | ", cfg.device, " ", cfg.training.precision, zero_text(cfg),
            " | predicted memory per rank (dp replicas hold the same):");
  for (int pp_rank = 0; pp_rank < par.pp; ++pp_rank)
    for (int tp_rank = 0; tp_rank < par.tp; ++tp_rank)
      log::info("  ", format_memory_report(predicted_memory_report(cfg, plan.schedule, pp_rank, tp_rank)));
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
  // The world's size first (a wrong -np is one line), then the plan (what the config leaves
  // to the planner: a split from measured costs, schedule: auto), then everything the config
  // and the file system can tell up front (data, output paths, memory), all before the Job
  // allocates the model from the plan.
  MpiComm world = checked_world(loaded);
  JobPlan plan = plan_job(loaded, world, measure_options(loaded));
  if (plan.prediction && mpi.rank() == 0) log::info(prediction_line(plan));
  run_preflight(plan.config, plan.schedule, world);
  Job job(std::move(plan), std::move(world), all_faults.on_rank(mpi.rank()));
  TrainingHooks hooks;
  hooks.dump_dir = args.dump_dir;
  hooks.step_from = args.step_from;
  return run_training(job, hooks);
}

}  // namespace pptrain
