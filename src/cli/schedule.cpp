// `pptrain schedule`: generate (or load), validate, lower and simulate a pipeline schedule,
// and print it as a time line, JSON figures, CSV, SVG or a Chrome trace.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>

#include "cli/commands.h"
#include "core/config.h"
#include "job/job_plan.h"
#include "parallel/mpi_comm.h"
#include "partition/cost_profile.h"
#include "partition/partition.h"
#include "partition/partitioner.h"
#include "core/error.h"
#include "core/log.h"
#include "pipeline/auto_schedule.h"
#include "pipeline/csv.h"
#include "pipeline/registry.h"
#include "pipeline/render.h"
#include "pipeline/transform.h"
#include "pipeline/validate.h"

namespace pptrain {

namespace {

const char* kScheduleUsage =
    "usage: pptrain schedule (--schedule NAME | --load FILE.csv) --pp P --microbatches M\n"
    "                        [--stages-per-rank V] [--placement loop|v]\n"
    "                        [--backward as-is|split|merged] [--cost f=1,i=1,w=1,comm=0,act_i=1,act_w=0]\n"
    "                        [--memory-limit X] [--blocking-sends]\n"
    "                        [--format text|json|csv|svg|chrome] [--out FILE]\n"
    "       pptrain schedule --config CONFIG [section.key=value ...] [--cost ...] [--format ...] [--out FILE]\n"
    "  --config            the program `pptrain train CONFIG` would run, planned as train plans\n"
    "                      it (schedule: auto and a split from parallel.profile included); the\n"
    "                      schedule, pp, microbatches and placement come from the config\n"
    "  --schedule          gpipe, 1f1b, interleaved-1f1b, looped-bfs, zb-h1, zb-h2, zbv, dualpipev,\n"
    "                      auto, or file:FILE.csv (the same as --load FILE.csv)\n"
    "                      auto: a zero-bubble program built for --cost (required) and\n"
    "                      --memory-limit, never slower in simulation than the fixed schedules\n"
    "                      of its placement that fit the limit (their program when they win);\n"
    "                      --stages-per-rank 1 (loop placement, default) or 2 (V placement)\n"
    "  --load              a program in PyTorch's CSV form (one row per rank: 0F0,0F1,...);\n"
    "                      in a PyTorch dump, UNSHARD/RESHARD/REDUCE_GRAD and its SEND/RECV are\n"
    "                      ignored (lowering re-derives them), OVERLAP_F_B cells split\n"
    "  --pp, --microbatches  pp * stages-per-rank * microbatches at most 1000000\n"
    "  --stages-per-rank   default: the schedule's own (2 for interleaved-1f1b, zbv, dualpipev);\n"
    "                      for --load, inferred from the highest stage\n"
    "  --placement         stage -> rank for --load; default: inferred from the program\n"
    "  --backward          split: every B becomes I then W; merged: every I directly followed\n"
    "                      by its W becomes B\n"
    "  --cost              times per microbatch of a rank's share of the model (a stage costs 1/v)\n"
    "                      for forward, input grad, weight grad; p2p latency; activation memory\n"
    "                      freed at I and at W; or FILE.json, a cost file of pptrain profile: the\n"
    "                      stage costs (ms, bytes) of its model's exact split for the schedule\n"
    "  --memory-limit      reject programs with more microbatches of activations in flight;\n"
    "                      for auto: the peak activations per rank to build for, in the units\n"
    "                      of act_i and act_w\n"
    "  --blocking-sends    also require the program to finish if every send blocks\n"
    "  --format            text (default): time line grid and figures; json: figures; csv: the\n"
    "                      lowered program; svg: picture; chrome: trace for Perfetto\n";

struct Options {
  std::string schedule, load, placement, backward = "as-is", cost, format = "text", out, config;
  std::vector<std::string> overrides;  // section.key=value, with --config
  int pp = 0, microbatches = 0, stages_per_rank = 0;
  double memory_limit = 0;
  bool blocking_sends = false, help = false;
};

int parse_int(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || value < 1 || value > 1000000)
    fail(flag, ": expected an integer >= 1, got '", text, "'");
  return int(value);
}

Options parse_options(const Args& args) {
  Options o;
  const std::map<std::string, std::string*> text_flags = {
      {"--schedule", &o.schedule}, {"--load", &o.load},     {"--placement", &o.placement},
      {"--backward", &o.backward}, {"--cost", &o.cost},     {"--format", &o.format},
      {"--out", &o.out},           {"--config", &o.config}};
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    bool inline_value = false;
    if (size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      inline_value = true;
    }
    if (flag == "-h" || flag == "--help") {
      o.help = true;
      continue;
    }
    if (flag == "--blocking-sends") {
      o.blocking_sends = true;
      continue;
    }
    auto takes_value = [&]() -> std::string {
      if (inline_value) return value;
      if (i + 1 >= args.size()) fail("schedule: ", flag, " needs a value");
      return args[++i];
    };
    if (auto it = text_flags.find(flag); it != text_flags.end()) {
      *it->second = takes_value();
    } else if (flag == "--pp") {
      o.pp = parse_int(flag, takes_value());
    } else if (flag == "--microbatches") {
      o.microbatches = parse_int(flag, takes_value());
    } else if (flag == "--stages-per-rank") {
      o.stages_per_rank = parse_int(flag, takes_value());
    } else if (flag == "--memory-limit") {
      std::string text = takes_value();
      char* end = nullptr;
      o.memory_limit = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || !(o.memory_limit > 0))
        fail("--memory-limit: expected a number > 0, got '", text, "'");
    } else if (flag.rfind("--", 0) != 0 && flag.find('=') != std::string::npos) {
      o.overrides.push_back(flag);
    } else {
      fail("schedule: unknown option '", args[i], "' (see pptrain schedule --help)");
    }
  }
  if (!o.config.empty()) {
    // The config says what these say for a schedule of its own; two answers would conflict.
    const std::pair<const char*, bool> from_config[] = {
        {"--schedule", !o.schedule.empty()},     {"--load", !o.load.empty()},
        {"--pp", o.pp != 0},                     {"--microbatches", o.microbatches != 0},
        {"--stages-per-rank", o.stages_per_rank != 0}, {"--placement", !o.placement.empty()},
        {"--backward", o.backward != "as-is"},   {"--memory-limit", o.memory_limit != 0},
        {"--blocking-sends", o.blocking_sends}};
    for (const auto& [flag, given] : from_config)
      if (given) fail("schedule: ", flag, " comes from the config's parallel section with --config; give one or the other");
  } else if (!o.overrides.empty()) {
    fail("schedule: '", o.overrides.front(), "': section.key=value overrides a config; give --config CONFIG");
  }
  return o;
}

// The schedule spec of prepare_schedule: a generator's name or "file:PATH".
std::string spec_of(const Options& o) {
  if (o.schedule.empty() == o.load.empty())
    fail("schedule: give either --schedule NAME or --load FILE.csv");
  if (o.pp == 0) fail("schedule: --pp is required");
  if (o.microbatches == 0) fail("schedule: --microbatches is required");
  return o.schedule.empty() ? "file:" + o.load : o.schedule;
}

// `--schedule auto`: the program built for the given costs and activation memory limit.
pipeline::Schedule build_auto(const Options& o, const pipeline::CostModel& cost) {
  if (o.cost.empty())
    fail("schedule: --schedule auto needs --cost (the times and activation sizes to build for)");
  if (!o.placement.empty())
    fail("schedule: --placement is for --load; auto places 1 stage per rank in a loop, 2 in a V");
  return pipeline::auto_schedule(o.pp, o.microbatches, o.stages_per_rank == 0 ? 1 : o.stages_per_rank,
                                 cost, o.memory_limit);
}

void write_output(const std::string& text, const std::string& path) {
  if (path.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return;
  }
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) fail("--out '", path, "': cannot write");
}

// Prints the report in o.format; an invalid one as JSON (exit 1) or as the error.
int emit(const pipeline::ScheduleReport& report, const Options& o) {
  using namespace pipeline;
  if (!report.valid) {
    if (o.format != "json") throw Error(report.error);
    write_output(render_json(report), o.out);
    log::error(report.error);
    return 1;
  }
  if (o.format == "text") write_output(render_text(report), o.out);
  if (o.format == "json") write_output(render_json(report), o.out);
  if (o.format == "csv") write_output(program_to_csv(report.schedule.program), o.out);
  if (o.format == "svg") write_output(render_svg(report), o.out);
  if (o.format == "chrome") write_output(render_chrome_trace(report), o.out);
  return 0;
}

// --config: the schedule of the config's job plan (job/job_plan.h), as train runs it,
// simulated with --cost (a cost file: the stages' costs of the plan's own split). Planning
// may time layers on every process (parallel.profile: measure); the first one prints.
int config_schedule(const Options& o) {
  using namespace pipeline;
  const Config loaded = load_config(o.config, o.overrides, build_features());
  MpiComm processes = MpiComm::world();
  const JobPlan plan = plan_job(loaded, processes, measure_options(loaded));
  if (processes.rank() != 0) return 0;
  ScheduleReport report;
  const bool profiled = o.cost.size() > 5 && o.cost.compare(o.cost.size() - 5, 5, ".json") == 0;
  report.cost = profiled ? stage_cost_model(read_cost_profile(o.cost), blocks_per_stage(plan.config))
                         : parse_cost(o.cost);
  report.schedule = plan.schedule;
  report.sim = simulate(plan.schedule, report.cost);
  report.peak_in_flight = peak_in_flight(plan.schedule);
  report.valid = true;
  std::fprintf(stderr, "%s: schedule %s, pp %d, %d microbatches, blocks per stage %s%s\n", loaded.source.c_str(),
               plan.schedule_name().c_str(), plan.config.parallel.pp, plan.config.parallel.microbatches,
               blocks_text(blocks_per_stage(plan.config)).c_str(),
               profiled ? cat("; costs from ", o.cost).c_str() : "");
  return emit(report, o);
}

}  // namespace

int cmd_schedule(const Args& args) {
  using namespace pipeline;
  Options o = parse_options(args);
  if (o.help) {
    std::fputs(kScheduleUsage, stdout);
    return 0;
  }
  const std::string formats[] = {"text", "json", "csv", "svg", "chrome"};
  if (std::find(std::begin(formats), std::end(formats), o.format) == std::end(formats))
    fail("--format '", o.format, "' is not one of: text, json, csv, svg, chrome");
  if (!o.config.empty()) return config_schedule(o);

  ScheduleReport report;
  // A cost file of `pptrain profile` (*.json): the stages' costs of the exact split of its
  // model for this schedule (for auto: the split for its placement's fixed zero-bubble
  // schedule), printed on stderr.
  const bool profiled = o.cost.size() > 5 && o.cost.compare(o.cost.size() - 5, 5, ".json") == 0;
  if (profiled) {
    const CostProfile prof = read_cost_profile(o.cost);
    const int v = o.stages_per_rank == 0 ? default_stages_per_rank(spec_of(o) == "auto" ? "zb-h1" : spec_of(o))
                                         : o.stages_per_rank;
    const std::string fixed = spec_of(o) == "auto" ? (v == 2 ? "zbv" : "zb-h1") : spec_of(o);
    const Partition part =
        partition_stages(prof, load_or_generate(fixed, o.pp, o.microbatches, v), prof.n_layer, 0);
    report.cost = stage_cost_model(prof, part.blocks_per_stage);
    std::fprintf(stderr, "costs from %s: blocks per stage %s (the exact partition for %s), times in ms\n",
                 o.cost.c_str(), blocks_text(part.blocks_per_stage).c_str(), fixed.c_str());
  } else {
    report.cost = parse_cost(o.cost);
  }
  PrepareOptions prepare;
  prepare.backward = parse_backward_form(o.backward);
  prepare.max_in_flight = o.memory_limit;
  prepare.blocking_sends = o.blocking_sends;
  if (!o.placement.empty()) prepare.placement = parse_placement(o.placement);
  const std::string spec = spec_of(o);
  Schedule s;
  if (spec == "auto") {
    s = build_auto(o, report.cost);
    prepare.max_in_flight = 0;  // the limit counts activation units: built in, and shown below
  } else {
    s = load_or_generate(spec, o.pp, o.microbatches, o.stages_per_rank, prepare);
  }
  try {
    s = prepare_schedule(s, prepare);
    report.sim = simulate(s, report.cost);
    report.peak_in_flight = peak_in_flight(s);
    report.valid = true;
  } catch (const Error& e) {
    report.error = e.what();
  }
  report.schedule = s;
  return emit(report, o);
}

}  // namespace pptrain
