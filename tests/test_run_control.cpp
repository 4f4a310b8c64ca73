// A run that is never lost, through the pptrain executable (single process and mpirun
// pp=2, tiny models, seconds each): the non-finite guard and the new config keys. A huge
// learning rate, or a NaN planted in one gradient (nan_grad@RANK:TENSOR:STEP), stops the
// run (training.on_nonfinite: stop) with the step and the tensor named on every rank, a
// non-zero exit, no checkpoint of the bad step and the good ones kept; under skip the
// injected step changes nothing (parameters bitwise as before it) and the run ends bitwise
// where a run that never saw that batch ends; more than training.max_skipped in a row is
// an error; the new keys are validated with one-line errors. Stop signals and the
// watchdog: tests/test_run_signals.cpp.
// Equalities are bitwise, which is exact by construction (test_resume_cli.cpp): the runs
// compared execute the same operations on the same bits (same binary, layout, one thread
// per rank, data order; checkpoints restore masters and moments bitwise). The learning rate
// is constant (min_lr = lr, no warmup), so a run's schedule does not depend on
// training.steps and runs of different lengths can be compared step by step.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <regex>

#include "checkpoint/checkpoint_format.h"
#include "checkpoint/checksum.h"
#include "core/config.h"
#include "core/error.h"
#include "support/dump_compare.h"
#include "support/run_control.h"
#include "support/test_util.h"
#include "train/param_dump.h"

using namespace pptrain;
using namespace pptrain::testing;
namespace fs = std::filesystem;

namespace {

// Bitwise equality of every parameter value (not the loss, not the gradients).
Verdict compare_values_exact(const GlobalDump& got, const GlobalDump& want) {
  Verdict v;
  for (const auto& [name, w] : want.tensors) {
    Check c{name + " values", 0, 0};
    auto g = got.tensors.find(name);
    if (g == got.tensors.end() || g->second.value.size() != w.value.size()) {
      c.diff = INFINITY;
    } else {
      for (size_t i = 0; i < w.value.size(); ++i) {
        const float a = g->second.value[i], b = w.value[i];
        if (std::memcmp(&a, &b, sizeof a) != 0) c.diff = std::max(c.diff, std::isnan(a - b) ? INFINITY : double(std::fabs(a - b)));
      }
    }
    v.checks.push_back(c);
  }
  return v;
}

// Checkpoint step files in `dir`, ascending.
std::vector<int> checkpoint_steps(const std::string& dir) {
  std::vector<int> steps;
  if (!fs::exists(dir)) return steps;
  std::regex re("step_([0-9]+)\\.h5(\\.tmp)?");
  for (const auto& e : fs::directory_iterator(dir)) {
    std::smatch m;
    const std::string name = e.path().filename();
    if (std::regex_match(name, m, re)) steps.push_back(m[2].matched ? -std::stoi(m[1]) : std::stoi(m[1]));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

// Overwrites the int64 attributes that say where a checkpoint is in the run, and the
// checksum that covers them: the file then reads as written after `step` steps (its
// parameters and moments unchanged).
void set_checkpoint_step(const std::string& file, int64_t step) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0) << file;
  CheckpointMeta meta = read_meta(f, file);
  meta.step = meta.data_next_batch = meta.rng_counter = step;
  for (const char* name : {"step", "data_next_batch", "rng_counter"}) {
    hid_t a = H5Aopen(f, name, H5P_DEFAULT);
    ASSERT_GE(a, 0) << name;
    EXPECT_GE(H5Awrite(a, H5T_NATIVE_INT64, &step), 0) << name;
    H5Aclose(a);
  }
  const uint64_t sum = checksum_text(meta_text(meta));
  hid_t a = H5Aopen(f, "meta_checksum", H5P_DEFAULT);
  ASSERT_GE(a, 0) << "meta_checksum";
  EXPECT_GE(H5Awrite(a, H5T_NATIVE_UINT64, &sum), 0);
  H5Aclose(a);
  H5Fclose(f);
}

}  // namespace

TEST(RunControlConfig, NewKeysAreValidatedWithOneLineErrors) {
  const Config d = parse_config("", "t.yaml");
  EXPECT_EQ(d.training.on_nonfinite, "stop");
  EXPECT_EQ(d.training.max_skipped, 10);
  EXPECT_EQ(d.runtime.watchdog_s, 300);
  auto error_of = [](const std::string& yaml) {
    try {
      parse_config(yaml, "t.yaml");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(error_of("training: {on_nonfinite: ignore}"),
            "t.yaml: key 'training.on_nonfinite': expected stop or skip, got 'ignore'");
  EXPECT_EQ(error_of("training: {max_skipped: 0}"), "t.yaml: key 'training.max_skipped': expected an integer in [1, 2147483647], got 0");
  EXPECT_EQ(error_of("runtime: {watchdog_s: -1}"),
            "t.yaml: key 'runtime.watchdog_s': expected a finite number of seconds >= 0 (0 disables the watchdog), "
            "got -1");
  EXPECT_NE(error_of("runtime: {watchdog_s: .nan}").find("key 'runtime.watchdog_s': expected a finite number"),
            std::string::npos);
  EXPECT_NE(error_of("runtime: {watchdog_s: .inf}").find("key 'runtime.watchdog_s': expected a finite number"),
            std::string::npos);
  EXPECT_EQ(error_of("runtime: {watchdog: 3}"), "t.yaml: unknown key 'runtime.watchdog' (known in 'runtime': watchdog_s)");
  // The new keys survive the checkpoint's round trip through YAML.
  const Config c = parse_config("training: {on_nonfinite: skip, max_skipped: 3}\nruntime: {watchdog_s: 2.5}", "t.yaml");
  const Config back = parse_config(to_yaml(c), "back");
  EXPECT_EQ(back.training.on_nonfinite, "skip");
  EXPECT_EQ(back.training.max_skipped, 3);
  EXPECT_EQ(back.runtime.watchdog_s, 2.5);
}

// A divergence: a NaN gradient at step 4, after three good checkpoints (keep_last 2).
// Config validation now refuses the learning rates that overflowed on their own (lr is
// at most 10, which this model survives), so the NaN is planted; the guard does not
// care where it came from.
TEST_F(RunControl, DivergenceStopsWithoutSavingAndKeepsTheGoodCheckpoints) {
  TempDir out;
  const std::string ck = out.file("ck");
  auto r = run_command("PPTRAIN_FAULTS=nan_grad:h.2.attn.proj.weight:4 " +
                           train(1, "training.steps=20 checkpoint.every=1 checkpoint.keep_last=2 checkpoint.dir=" + ck),
                       120);
  EXPECT_NE(r.exit_code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("error: step ([0-9]+): loss \\S+, gradient norm \\S+ \\(not finite\\); "
                                                        "first non-finite gradient: [a-z_.0-9]+; stopping without saving")))
      << r.output;
  const int bad = std::stoi(m[1]);
  ASSERT_EQ(bad, 4) << r.output;
  // The good checkpoints (keep_last of them) are the last before the bad step; none after.
  std::vector<int> want{bad - 1};
  if (bad - 2 >= 1) want.insert(want.begin(), bad - 2);
  EXPECT_EQ(checkpoint_steps(ck), want) << r.output;
  char name[32];
  std::snprintf(name, sizeof name, "step_%08d.h5", bad - 1);
  EXPECT_EQ(latest_of(ck), name);
}

TEST_F(RunControl, PlantedNanStopsEveryRankNamingTheTensor) {
  TempDir out;
  const std::string ck = out.file("ck");
  auto r = run_command("PPTRAIN_FAULTS=nan_grad@1:h.3.mlp.fc.weight:4 " +
                           train(2, "checkpoint.every=1 checkpoint.keep_last=2 checkpoint.dir=" + ck), 120);
  EXPECT_NE(r.exit_code, 0) << r.output;
  // h.3 is on pp rank 1 only; rank 0 names it too (the agreement).
  for (int rank : {0, 1})
    EXPECT_EQ(count_occurrences(r.output, "[rank " + std::to_string(rank) + "] error: step 4: loss "), 1) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "first non-finite gradient: h.3.mlp.fc.weight; stopping without saving"), 2) << r.output;
  EXPECT_EQ(checkpoint_steps(ck), (std::vector<int>{2, 3})) << r.output;
  EXPECT_EQ(latest_of(ck), "step_00000003.h5");
}

// pp=2 x tp=2: the NaN in one tp shard on world rank 3 (pp rank 1, tp rank 1) is named by
// all four ranks (the agreement spans the tp group too).
TEST_F(RunControl, PlantedNanInOneTensorParallelShardIsNamedOnEveryRank) {
  auto r = run_command("PPTRAIN_FAULTS=nan_grad@3:h.2.mlp.proj.weight:3 " +
                           mpirun(4) + pptrain_bin() + " train " + dir_->file("c.yaml") + " parallel.pp=2 parallel.tp=2",
                       120);
  EXPECT_NE(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_EQ(count_occurrences(r.output, "[rank " + std::to_string(rank) + "] error: step 3: loss "), 1) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "first non-finite gradient: h.2.mlp.proj.weight; stopping without saving"), 4)
      << r.output;
}

TEST_F(RunControl, MoreThanMaxSkippedInARowIsAnError) {
  auto r = run_command("PPTRAIN_FAULTS=nan_grad:h.0.mlp.fc.weight:2,nan_grad:h.0.mlp.fc.weight:3 " +
                           train(1, "training.on_nonfinite=skip training.max_skipped=1"), 120);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_occurrences(r.output, "warning: step 2: loss "), 1) << r.output;
  EXPECT_NE(r.output.find("error: step 3: loss "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2 non-finite steps in a row, more than training.max_skipped 1; stopping without saving"),
            std::string::npos) << r.output;
}

// Skip: a NaN planted in one gradient at step 3. The step changes no parameter (bitwise),
// exactly one step is skipped, and the run ends (step 6) bitwise where a run ends that
// trained steps 1-2, never saw batch 3 (its checkpoint relabelled as written after step 3)
// and trained steps 4-6: the skipped step consumed its batch and nothing else.
class RunControlSkip : public RunControl {
 protected:
  void check(int ranks, const std::string& fault) {
    TempDir out;
    auto r = run_command("PPTRAIN_FAULTS=" + fault + " " +
                             train(ranks, "training.on_nonfinite=skip logging.metrics=" + out.file("m.jsonl") +
                                              " --dump " + out.file("skip")), 120);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(count_occurrences(r.output, "step skipped"), 1) << r.output;
    EXPECT_EQ(count_occurrences(r.output, "warning: step 3: loss "), 1) << r.output;
    const std::vector<double> skipped = json_values(read_file(out.file("m.jsonl")), "skipped");
    ASSERT_EQ(skipped.size(), 6u);
    EXPECT_EQ(skipped, (std::vector<double>{0, 0, 1, 1, 1, 1}));

    const GlobalDump before = read_param_dumps(dump_files(out.file("skip"), 2, ranks));
    const GlobalDump after = read_param_dumps(dump_files(out.file("skip"), 3, ranks));
    const Verdict unchanged = compare_values_exact(after, before);
    EXPECT_TRUE(unchanged.passed()) << unchanged.failures("skipped step 3 against step 2");

    // The reference: 2 steps, its checkpoint relabelled as step 3, resumed to step 6.
    const std::string ck = out.file("ck");
    r = run_command(train(ranks, "training.steps=2 checkpoint.dir=" + ck), 120);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    set_checkpoint_step(ck + "/step_00000002.h5", 3);
    r = run_command(train(ranks, "checkpoint.dir=" + ck + " --dump " + out.file("ref")), 120);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("resumed from step 3"), std::string::npos) << r.output;
    const Verdict v = compare_exact(read_param_dumps(dump_files(out.file("skip"), 6, ranks)),
                                    read_param_dumps(dump_files(out.file("ref"), 6, ranks)));
    EXPECT_TRUE(v.passed()) << v.failures("skip run against the run without batch 3");
  }
};

TEST_F(RunControlSkip, SingleProcessSkipsExactlyTheInjectedStep) { check(1, "nan_grad:h.0.mlp.fc.weight:3"); }

TEST_F(RunControlSkip, PipelineSkipsExactlyTheInjectedStep) { check(2, "nan_grad@1:h.3.attn.qkv.weight:3"); }
