// The planner end to end through the executable: a training run whose split or schedule
// the planner chose prints its prediction and carries it in the metrics; schedule: auto
// trains to the single-process losses; `pptrain plan` ranks layouts and writes a config
// that trains as is; a profile of other shapes and an impossible memory limit are one
// line each.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "partition/cost_profile.h"
#include "partition/layout_search.h"
#include "support/test_util.h"

using namespace pptrain::testing;
namespace fs = std::filesystem;

namespace {

std::string trainer() { return fs::absolute(pptrain_bin()).string(); }

// A tiny model over a Markov corpus in `dir`/d; `parallel` is the parallel section's body.
void write_config(const TempDir& dir, const std::string& name, const std::string& parallel,
                  const std::string& extra = "") {
  write_file(dir.file(name),
             "model: {n_layer: 4, n_head: 2, d_model: 16, seq_len: 8, vocab_size: 16}\n"
             "parallel: {" + parallel + "}\n"
             "training: {steps: 3, micro_batch_size: 2, eval_every: 0, lr: 0.01}\n"
             "data: {train: 'd/train_*.bin'}\n"
             "logging: {every: 1, metrics: 'm_" + name + ".jsonl'}\n" + extra);
}

// The "loss" of every step line of a metrics file.
std::vector<double> losses(const std::string& path) {
  std::vector<double> out;
  const std::string text = read_file(path);
  for (size_t at = text.find("\"loss\": "); at != std::string::npos; at = text.find("\"loss\": ", at + 1))
    out.push_back(std::stod(text.substr(at + 8)));
  return out;
}

// The number after `label` on the first line holding `line_mark` (NaN when absent).
double number_after(const std::string& text, const std::string& line_mark, const std::string& label) {
  const size_t line = text.find(line_mark);
  if (line == std::string::npos) return NAN;
  const size_t at = text.find(label, line);
  if (at == std::string::npos || text.find('\n', line + 1) < at) return NAN;
  return std::stod(text.substr(at + label.size()));
}

TempDir corpus_dir() {
  TempDir dir;
  EXPECT_EQ(prepare_markov_corpus(dir.file("d"), 16, 4000).exit_code, 0);
  return dir;
}

}  // namespace

TEST(Planner, AMeasuredSplitPrintsItsPredictionAndTheMetricsCarryIt) {
  TempDir dir = corpus_dir();
  write_config(dir, "c.yaml", "pp: 2, microbatches: 4, schedule: zb-h1, profile: measure");
  CommandResult r = run_command("cd " + dir.path() + " && " + mpirun(2) + trainer() + " train c.yaml", 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("planner: layers_per_stage ["), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(costs measured at start-up): predicted step "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" ms (predicted "), std::string::npos) << r.output;
  EXPECT_NE(read_file(dir.file("m_c.yaml.jsonl")).find("\"predicted_ms\": "), std::string::npos);
  // Under tp the start-up profile times the layers at the job's tp (its shards, its
  // all-reduces) and predicts from them.
  write_config(dir, "tp.yaml", "tp: 2, microbatches: 4, profile: measure, profile_repeats: 2");
  r = run_command("cd " + dir.path() + " && " + mpirun(2) + trainer() + " train tp.yaml training.steps=1", 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(costs measured at start-up): predicted step "), std::string::npos) << r.output;
}

TEST(Planner, AutoScheduleTrainsToTheSingleProcessLosses) {
  TempDir dir = corpus_dir();
  write_config(dir, "one.yaml", "pp: 1, microbatches: 4");
  write_config(dir, "auto.yaml", "pp: 2, microbatches: 4, schedule: auto");
  CommandResult one = run_command("cd " + dir.path() + " && " + trainer() + " train one.yaml", 60);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  CommandResult r = run_command("cd " + dir.path() + " && " + mpirun(2) + trainer() + " train auto.yaml", 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(" schedule auto"), std::string::npos) << r.output;
  const std::vector<double> a = losses(dir.file("m_one.yaml.jsonl")), b = losses(dir.file("m_auto.yaml.jsonl"));
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  // The same arithmetic per microbatch; only the order of the gradient sums differs (4
  // microbatches, 2 ranks), a few fp32 roundings of relative 2^-24 per step, amplified
  // by three AdamW steps at lr 0.01 on O(1) weights: far below 1e-4 relative. The loss is
  // printed with 4 decimals in the log but 6+ significant digits in the metrics.
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(a[i], b[i], 1e-4 * std::fabs(a[i])) << "step " << i + 1;
}

TEST(Planner, PlanRanksLayoutsAndWritesAConfigThatTrains) {
  TempDir dir = corpus_dir();
  write_config(dir, "c.yaml", "microbatches: 4");
  CommandResult prof = run_command("cd " + dir.path() + " && " + trainer() + " profile c.yaml --out p.json", 60);
  ASSERT_EQ(prof.exit_code, 0) << prof.output;
  CommandResult plan = run_command(
      "cd " + dir.path() + " && " + trainer() + " plan c.yaml --ranks 2 --profile p.json --out best.yaml", 60);
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_NE(plan.output.find("blocks per stage"), std::string::npos) << plan.output;
  EXPECT_NE(plan.output.find("wrote best.yaml"), std::string::npos) << plan.output;
  EXPECT_NE(plan.output.find(" auto "), std::string::npos) << plan.output;  // the automatic schedule is a candidate
  ASSERT_TRUE(fs::exists(dir.file("best.yaml")));
  // The config names the costs, so the run prints its prediction beside each step.
  EXPECT_NE(read_file(dir.file("best.yaml")).find("profile: \"p.json\""), std::string::npos);
  CommandResult r = run_command("cd " + dir.path() + " && " + mpirun(2) + trainer() + " train best.yaml", 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(" ms (predicted "), std::string::npos) << r.output;
  // The written config was planned back before it was written (job/job_plan.h, the one
  // place train plans too): the plan's check, the ranking's best row and the run's own
  // prediction are one figure, printed to 2, 2 and 1 decimals.
  const double checked = number_after(plan.output, "planned as train will run it: ", "predicted step ");
  const double trained = number_after(r.output, "planner: layers_per_stage ", "predicted step ");
  std::istringstream best_row(plan.output.substr(plan.output.find("\n   1 ") + 1));
  std::string column;
  for (int i = 0; i < 9; ++i) best_row >> column;  // rank pp tp dp v mbs m schedule "step ms"
  EXPECT_NEAR(checked, std::stod(column), 0.005 + 0.005) << plan.output;
  EXPECT_NEAR(checked, trained, 0.05 + 0.005) << plan.output << r.output;
  // Planned from costs measured by the plan itself: written beside the config.
  CommandResult measured =
      run_command("cd " + dir.path() + " && " + trainer() + " plan c.yaml --ranks 2 --out own.yaml --top 3", 60);
  ASSERT_EQ(measured.exit_code, 0) << measured.output;
  EXPECT_NE(read_file(dir.file("own.yaml")).find("profile: \"own.yaml.profile.json\""), std::string::npos);
  EXPECT_NO_THROW(read_file(dir.file("own.yaml.profile.json")));
}

// A memory limit under which no layout of 2 ranks fits without recompute: the plan's best
// layout recomputes on some stage, --out writes the per-stage list, and that config trains.
TEST(Planner, ALimitThatNeedsRecomputeWritesAPerStageListThatTrains) {
  TempDir dir = corpus_dir();
  write_config(dir, "c.yaml", "microbatches: 4");
  CommandResult prof = run_command("cd " + dir.path() + " && " + trainer() + " profile c.yaml --out p.json", 60);
  ASSERT_EQ(prof.exit_code, 0) << prof.output;
  // The limit: lowered from the least peak of the layouts without a limit until the best
  // layout the search finds recomputes (the search as `pptrain plan` runs it).
  const pptrain::Config cfg = pptrain::load_config(dir.file("c.yaml"));
  const pptrain::CostProfile p = pptrain::read_cost_profile(dir.file("p.json"));
  pptrain::LayoutSearchOptions opts;
  opts.ranks = 2;
  double least = INFINITY;
  for (const pptrain::LayoutChoice& c : pptrain::search_layouts(cfg, p, opts)) least = std::min(least, c.peak_bytes);
  double limit = 0;
  for (double f = 0.99; f > 0.3 && limit == 0; f -= 0.01) {
    opts.memory_per_rank_bytes = least * f;
    try {
      if (pptrain::any_recompute(pptrain::search_layouts(cfg, p, opts).front().recompute))
        limit = opts.memory_per_rank_bytes;
    } catch (const pptrain::Error&) {
      break;  // nothing fits any more
    }
  }
  ASSERT_GT(limit, 0) << "no limit makes the best layout recompute";
  char gib[64];
  std::snprintf(gib, sizeof gib, "%.17g", limit / double(1 << 30));
  CommandResult plan = run_command("cd " + dir.path() + " && " + trainer() +
                                       " plan c.yaml --ranks 2 --profile p.json --out best.yaml --memory-per-rank " +
                                       gib,
                                   60);
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_NE(plan.output.find("full"), std::string::npos) << plan.output;  // the table's recompute column
  const std::string best = read_file(dir.file("best.yaml"));
  EXPECT_NE(best.find("recompute: ["), std::string::npos) << best;
  CommandResult r = run_command("cd " + dir.path() + " && " + mpirun(2) + trainer() + " train best.yaml", 150);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("recompute per stage ["), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" ms (predicted "), std::string::npos) << r.output;
  EXPECT_NE(best.find("memory_per_rank_gib: "), std::string::npos) << best;
  // training.recompute: auto at start-up makes the plan's choice for the plan's layout.
  const size_t list_at = best.find("recompute: [");
  const std::string list = best.substr(list_at + 11, best.find(']', list_at) - list_at - 10);
  CommandResult chosen = run_command("cd " + dir.path() + " && " + trainer() +
                                         " train best.yaml --dry-run training.recompute=auto", 60);
  EXPECT_EQ(chosen.exit_code, 0) << chosen.output;
  EXPECT_NE(chosen.output.find("recompute per stage " + list), std::string::npos) << list << "\n" << chosen.output;
  // Without a limit auto has nothing to choose by: one line.
  CommandResult unlimited = run_command("cd " + dir.path() + " && " + trainer() +
                                            " train c.yaml --dry-run training.recompute=auto parallel.profile=p.json", 60);
  EXPECT_NE(unlimited.exit_code, 0);
  EXPECT_NE(unlimited.output.find("key 'training.recompute': auto needs parallel.profile"), std::string::npos)
      << unlimited.output;
  // A limit below what every stage under full needs names the smallest that fits.
  CommandResult tiny = run_command("cd " + dir.path() + " && " + trainer() +
                                       " train best.yaml --dry-run training.recompute=auto "
                                       "parallel.memory_per_rank_gib=0.000001", 60);
  EXPECT_NE(tiny.exit_code, 0);
  EXPECT_NE(tiny.output.find("key 'training.recompute': auto: "), std::string::npos) << tiny.output;
  EXPECT_NE(tiny.output.find("the smallest limit that fits is "), std::string::npos) << tiny.output;
}

TEST(Planner, AProfileOfOtherShapesAndAnImpossibleLimitAreOneLineEach) {
  TempDir dir = corpus_dir();
  write_config(dir, "c.yaml", "microbatches: 4");
  write_config(dir, "wide.yaml", "microbatches: 4");
  ASSERT_EQ(run_command("cd " + dir.path() + " && " + trainer() + " profile c.yaml --out p.json", 60).exit_code, 0);
  CommandResult other = run_command("cd " + dir.path() + " && " + trainer() +
                                        " plan wide.yaml model.d_model=32 --ranks 2 --profile p.json",
                                    60);
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.output.find("p.json: profile of d_model 16 does not apply to wide.yaml (d_model 32)"),
            std::string::npos)
      << other.output;
  CommandResult tiny = run_command(
      "cd " + dir.path() + " && " + trainer() + " plan c.yaml --ranks 2 --profile p.json --memory-per-rank 0.000001",
      60);
  EXPECT_NE(tiny.exit_code, 0);
  EXPECT_NE(tiny.output.find("GiB per rank; the smallest that would is "), std::string::npos) << tiny.output;
  CommandResult trained = run_command("cd " + dir.path() + " && " + trainer() +
                                          " train wide.yaml model.d_model=32 parallel.profile=p.json",
                                      60);
  EXPECT_NE(trained.exit_code, 0);
  EXPECT_NE(trained.output.find("does not apply to wide.yaml"), std::string::npos) << trained.output;
}

// `schedule --config` draws the program `train` runs for the config, from the same plan:
// a named schedule is the generator's program for the config's pp and microbatches; auto
// is the program built from the config's costs; the options a config answers are refused
// beside it, and overrides without a config.
TEST(Planner, ScheduleOfAConfigIsTheProgramTrainRuns) {
  TempDir dir = corpus_dir();
  write_config(dir, "c.yaml", "pp: 2, microbatches: 4, schedule: zb-h1");
  const std::string cd = "cd " + dir.path() + " && " + trainer();
  CommandResult of_config = run_command(cd + " schedule --config c.yaml --format csv", 60);
  ASSERT_EQ(of_config.exit_code, 0) << of_config.output;
  CommandResult named = run_command(cd + " schedule --schedule zb-h1 --pp 2 --microbatches 4 --format csv", 60);
  ASSERT_EQ(named.exit_code, 0) << named.output;
  const std::string program = named.output;
  EXPECT_NE(of_config.output.find(program), std::string::npos) << of_config.output << "\nvs\n" << program;
  // Overrides apply as in train: 1F1B is another program than ZB-H1's.
  CommandResult other = run_command(cd + " schedule --config c.yaml parallel.schedule=1f1b --format csv", 60);
  ASSERT_EQ(other.exit_code, 0) << other.output;
  EXPECT_EQ(other.output.find(program), std::string::npos) << other.output;
  // schedule: auto from a cost file: the planner's split and program, as the run logs them.
  ASSERT_EQ(run_command(cd + " profile c.yaml parallel.pp=1 --out p.json", 60).exit_code, 0);
  CommandResult a = run_command(cd + " schedule --config c.yaml parallel.schedule=auto parallel.profile=p.json", 60);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_NE(a.output.find("c.yaml: schedule auto"), std::string::npos) << a.output;
  EXPECT_NE(a.output.find("makespan"), std::string::npos) << a.output;
  CommandResult bad = run_command(cd + " schedule --config c.yaml --pp 4 2>&1", 60);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("schedule: --pp comes from the config's parallel section with --config"),
            std::string::npos) << bad.output;
  bad = run_command(cd + " schedule --schedule 1f1b --pp 2 --microbatches 4 parallel.pp=2 2>&1", 60);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("overrides a config; give --config CONFIG"), std::string::npos) << bad.output;
}
