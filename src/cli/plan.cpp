// pptrain plan CONFIG --ranks N [--memory-per-rank GiB] [--profile FILE] [--out BEST.yaml]
//                    [--top K] [section.key=value ...]
// Ranks the layouts that run the config's global batch on N ranks by predicted step time
// (partition/layout_search.h) and writes the best as a config runnable as is. The costs
// come from --profile (a file of `pptrain profile`, e.g. measured on the cluster's nodes)
// or are measured here, on this process's backend (a profile under mpirun also measures
// the transfers and all-reduces). The written config names the costs (parallel.profile:
// --profile, or those measured here written to BEST.yaml.profile.json).
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "backend/cuda/cuda_backend.h"
#include "cli/commands.h"
#include "core/config.h"
#include "core/error.h"
#include "job/job_plan.h"
#include "parallel/mpi_comm.h"
#include "parallel/mpi_session.h"
#include "partition/auto_layout.h"
#include "partition/cost_profile.h"
#include "partition/layout_search.h"
#include "partition/partition.h"
#include "partition/profile.h"

namespace pptrain {
namespace {

const char* kPlanUsage =
    "usage: pptrain plan CONFIG --ranks N [--memory-per-rank GiB] [--profile FILE] [--out BEST.yaml] "
    "[--top K] [section.key=value ...]";

struct PlanArgs {
  std::string config, profile, out;
  std::vector<std::string> overrides;
  int ranks = 0, top = 15;
  double memory_gib = 0;
};

double number_arg(const std::string& flag, const std::string& value, double lo, double hi) {
  char* end = nullptr;
  const double x = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || !(x >= lo && x <= hi))
    fail("plan: ", flag, ": expected a number in [", lo, ", ", hi, "], got '", value, "'");
  return x;
}

int int_arg(const std::string& flag, const std::string& value, int lo, int hi) {
  char* end = nullptr;
  const long x = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || x < lo || x > hi)
    fail("plan: ", flag, ": expected an integer in [", lo, ", ", hi, "], got '", value, "'");
  return int(x);
}

PlanArgs parse_args(const Args& args) {
  PlanArgs out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--ranks" || a == "--memory-per-rank" || a == "--profile" || a == "--out" || a == "--top") {
      if (i + 1 >= args.size()) fail("plan: ", a, " needs a value (", kPlanUsage, ")");
      const std::string& v = args[++i];
      if (a == "--ranks") out.ranks = int_arg(a, v, 1, 1 << 20);
      else if (a == "--top") out.top = int_arg(a, v, 1, 1000);
      else if (a == "--memory-per-rank") out.memory_gib = number_arg(a, v, 0, 1 << 20);
      else if (a == "--profile") out.profile = v;
      else out.out = v;
    } else if (a.rfind("--", 0) == 0) {
      fail("plan: unknown option '", a, "' (", kPlanUsage, ")");
    } else if (out.config.empty() && a.find('=') == std::string::npos) {
      out.config = a;
    } else {
      out.overrides.push_back(a);
    }
  }
  if (out.config.empty()) fail("plan: missing CONFIG (", kPlanUsage, ")");
  if (out.ranks < 1) fail("plan: --ranks N is required (", kPlanUsage, ")");
  return out;
}

void print_table(const std::vector<LayoutChoice>& layouts, const PlanArgs& args) {
  std::printf("%4s %3s %3s %3s %2s %4s %4s %-17s %10s %9s %7s %9s  %s\n", "rank", "pp", "tp", "dp", "v", "mbs",
              "m", "schedule", "step ms", "sync+opt", "bubble", "mem GiB", "blocks per stage, recompute per stage");
  const int n = std::min<int>(args.top, int(layouts.size()));
  for (int i = 0; i < n; ++i) {
    const LayoutChoice& c = layouts[i];
    std::printf("%4d %3d %3d %3d %2d %4d %4d %-17s %10.2f %9.2f %7.3f %9.3f  %s %s\n", i + 1, c.pp, c.tp, c.dp,
                c.stages_per_rank, c.micro_batch_size, c.microbatches, c.schedule.c_str(), c.step_ms,
                c.sync_ms + c.optimizer_ms, c.bubble, c.peak_bytes / double(1 << 30),
                blocks_text(c.layers_per_stage).c_str(), recompute_text(c.recompute).c_str());
  }
  if (int(layouts.size()) > n) std::printf("(%zu more; --top K shows more)\n", layouts.size() - n);
}

}  // namespace

int cmd_plan(const Args& raw_args, MpiSession& mpi) {
  const PlanArgs args = parse_args(raw_args);
  const Config cfg = load_config(args.config, args.overrides, build_features());
  CostProfile profile;
  if (!args.profile.empty()) {
    profile = read_cost_profile(args.profile);
  } else {
    // Layers are timed at tp = 1; the search scales them to each tp (layout_search.h).
    Config one = cfg;
    one.parallel.tp = 1;
    MpiComm world = MpiComm::world();
    std::unique_ptr<Ops> ops = cfg.device == "cuda" ? make_cuda_ops(cfg) : make_cpu_ops();
    profile = profile_costs(one, *ops, world, profile_options(cfg));
  }
  check_profile_matches(profile, cfg, args.profile.empty() ? "the measured profile" : args.profile);
  // Layouts of every tp are scaled from the layers at tp = 1 (and those measured beside it);
  // a profile of one job's tp holds its all-reduces in every time and cannot be unscaled.
  if (profile.tp != 1)
    fail(args.profile, ": tp: the planner needs layers timed at tp 1, this profile is of tp ", profile.tp,
         " (take one with parallel.tp=1 on the ranks to plan for)");
  if (mpi.rank() != 0) return 0;
  LayoutSearchOptions opts;
  opts.ranks = args.ranks;
  opts.memory_per_rank_bytes = args.memory_gib * double(1 << 30);
  const std::vector<LayoutChoice> layouts = search_layouts(cfg, profile, opts);
  std::printf("plan: %s on %d ranks, global batch %lld sequences of %d tokens; %s%s\n", cfg.source.c_str(),
              args.ranks, (long long)cfg.global_batch_sequences(), cfg.model.seq_len,
              profile.allreduce_measured ? "measured all-reduce" : "stated all-reduce model (one-rank profile)",
              args.memory_gib > 0 ? "" : "; no memory limit");
  print_table(layouts, args);
  if (!args.out.empty()) {
    Config best = config_for_layout(cfg, layouts.front());
    // The run reads the same costs: schedule: auto builds its program from them, and the
    // log prints the prediction beside each measured step. Costs measured here are
    // written beside the config.
    std::string costs = args.profile;
    if (costs.empty()) {
      costs = args.out + ".profile.json";
      write_cost_profile(profile, costs);
    }
    best.parallel.profile = costs;  // as given: relative to where the run starts, like data paths
    best.parallel.memory_per_rank_gib = args.memory_gib;  // the run checks its split against it too
    // Planned back as `train` will plan it (job/job_plan.h), so a config that would not
    // start is never written. Its costs are a file now: nothing is measured, and only this
    // process plans.
    MpiComm self(MPI_COMM_SELF, "self", false);
    const JobPlan check = plan_job(best, self);
    std::printf("planned as train will run it: schedule %s, blocks per stage %s, predicted step %.2f ms\n",
                check.schedule_name().c_str(), blocks_text(blocks_per_stage(check.config)).c_str(),
                check.predicted_step_ms());
    std::ofstream f(args.out);
    f << "# pptrain plan " << cfg.source << " --ranks " << args.ranks << ": predicted step "
      << layouts.front().step_ms << " ms\n"
      << to_yaml(best);
    if (!f) fail("plan: --out ", args.out, ": cannot write");
    std::printf("wrote %s (mpirun -np %d pptrain train %s)\n", args.out.c_str(), args.ranks, args.out.c_str());
  }
  return 0;
}

}  // namespace pptrain
