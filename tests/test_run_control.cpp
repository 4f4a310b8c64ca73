// A run that is never lost, through the pptrain executable (single process and mpirun
// pp=2, tiny models, seconds each):
//   - non-finite guard: a huge learning rate, or a NaN planted in one gradient
//     (nan_grad@RANK:TENSOR:STEP), stops the run (training.on_nonfinite: stop) with the step
//     and the tensor named on every rank, a non-zero exit, no checkpoint of the bad step and
//     the good ones kept; under skip the injected step changes nothing (parameters bitwise
//     as before it) and the run ends bitwise where a run that never saw that batch ends;
//     more than training.max_skipped in a row is an error;
//   - stop signals: SIGTERM to a single process, SIGUSR1 and SIGTERM to mpirun, SIGTERM to
//     one rank only: the line "stopped by ...", the checkpoint of the step it stopped
//     after, exit 75, and a resumed run ends bitwise where an uninterrupted run ends; a
//     second signal ends the process at once;
//   - watchdog: a rank frozen with SIGSTOP (freeze@1:STEP) makes rank 0 say what it waits
//     for (the receive from pp rank 1) and end the job within runtime.watchdog_s + 10 s;
//   - the new config keys are validated with one-line errors.
// Equalities are bitwise, which is exact by construction (test_resume_cli.cpp): the runs
// compared execute the same operations on the same bits (same binary, layout, one thread
// per rank, data order; checkpoints restore masters and moments bitwise). The learning rate
// is constant (min_lr = lr, no warmup), so a run's schedule does not depend on
// training.steps and runs of different lengths can be compared step by step.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <thread>

#include "checkpoint/checkpoint_format.h"
#include "checkpoint/checksum.h"
#include "core/config.h"
#include "core/error.h"
#include "support/dump_compare.h"
#include "support/test_util.h"
#include "train/param_dump.h"

using namespace pptrain;
using namespace pptrain::testing;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

int count_of(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t pos = text.find(part); pos != std::string::npos; pos = text.find(part, pos + 1)) ++n;
  return n;
}

// The corpus and the model every test trains: 4 blocks (2 per stage under pp=2).
class RunControl : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto r = prepare_markov_corpus(dir_->file("data"), 19, 8000);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    write_file(dir_->file("c.yaml"),
               "model: {n_layer: 4, n_head: 4, d_model: 16, seq_len: 8, vocab_size: 19}\n"
               "parallel: {microbatches: 4}\n"
               "training: {steps: 6, micro_batch_size: 2, lr: 1.0e-2, min_lr: 1.0e-2, warmup_steps: 0,"
               " eval_every: 0}\n"
               "data: {train: '" + dir_->file("data") + "/train_*.bin', shuffle: true}\n"
               "logging: {every: 1, sample_tokens: 0}\n");
  }
  static void TearDownTestSuite() { delete dir_; }

  // `pptrain train` on the test config with `overrides`, on `ranks` processes (pp=ranks).
  static std::string train(int ranks, const std::string& overrides) {
    const std::string launch = ranks > 1 ? mpirun(ranks) : std::string("OMP_NUM_THREADS=1 ");
    const std::string layout = ranks > 1 ? " parallel.pp=" + std::to_string(ranks) : "";
    return launch + pptrain_bin() + " train " + dir_->file("c.yaml") + layout + " " + overrides;
  }

  static TempDir* dir_;
};
TempDir* RunControl::dir_ = nullptr;

std::vector<std::string> dump_files(const std::string& dir, int step, int ranks) {
  std::vector<std::string> files;
  for (int rank = 0; rank < ranks; ++rank)
    files.push_back(dir + "/step" + std::to_string(step) + ".rank" + std::to_string(rank) + ".bin");
  return files;
}

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

std::string latest_of(const std::string& dir) {
  std::string text = fs::exists(dir + "/latest") ? read_file(dir + "/latest") : "";
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return fs::path(text).filename();
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

// A command run in the background (its own process group, output to a file), so a test
// can signal it while it trains.
class Background {
 public:
  Background(const std::string& command, const std::string& output) : output_(output) {
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      // exec env: the command's own pid is the child's (mpirun, or pptrain itself).
      const std::string sh = "exec env " + command + " >" + output + " 2>&1 </dev/null";
      execl("/bin/sh", "sh", "-c", sh.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~Background() {
    if (running_) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  std::string output() const { return read_file(output_); }

  // The exit code (128 + signal when killed by one), or 124 after `timeout_s`.
  int wait(double timeout_s) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    int status = 0;
    while (Clock::now() < deadline) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        running_ = false;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return 124;
  }

 private:
  std::string output_;
  pid_t pid_ = -1;
  bool running_ = true;
};

// Waits until the JSON Lines metrics file reports step `step` (the run is mid-training).
bool wait_for_step(const std::string& metrics, int step, double timeout_s = 60) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  const std::string mark = "{\"step\": " + std::to_string(step) + ",";
  while (Clock::now() < deadline) {
    if (fs::exists(metrics) && read_file(metrics).find(mark) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// The pid of MPI rank `rank` among the children of `mpirun_pid` (Open MPI starts the ranks
// of a local job as its children and sets OMPI_COMM_WORLD_RANK).
pid_t rank_pid(pid_t mpirun_pid, int rank) {
  const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    std::string state;
    int ppid = -1;
    rest >> state >> ppid;
    if (ppid != mpirun_pid) continue;
    std::ifstream env(e.path() / "environ", std::ios::binary);
    std::string vars((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
    for (size_t at = 0; (at = vars.find(want, at)) != std::string::npos; ++at)
      if ((at == 0 || vars[at - 1] == '\0') && (at + want.size() == vars.size() || vars[at + want.size()] == '\0'))
        return std::stoi(name);
  }
  return -1;
}

// The step number in "stopped by SIGNAL after step N/", or -1.
int stopped_after(const std::string& output, const std::string& signal) {
  std::smatch m;
  if (!std::regex_search(output, m, std::regex("stopped by " + signal + " after step ([0-9]+)/"))) return -1;
  return std::stoi(m[1]);
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
    EXPECT_EQ(count_of(r.output, "[rank " + std::to_string(rank) + "] error: step 4: loss "), 1) << r.output;
  EXPECT_EQ(count_of(r.output, "first non-finite gradient: h.3.mlp.fc.weight; stopping without saving"), 2) << r.output;
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
    EXPECT_EQ(count_of(r.output, "[rank " + std::to_string(rank) + "] error: step 3: loss "), 1) << r.output;
  EXPECT_EQ(count_of(r.output, "first non-finite gradient: h.2.mlp.proj.weight; stopping without saving"), 4)
      << r.output;
}

TEST_F(RunControl, MoreThanMaxSkippedInARowIsAnError) {
  auto r = run_command("PPTRAIN_FAULTS=nan_grad:h.0.mlp.fc.weight:2,nan_grad:h.0.mlp.fc.weight:3 " +
                           train(1, "training.on_nonfinite=skip training.max_skipped=1"), 120);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_of(r.output, "warning: step 2: loss "), 1) << r.output;
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
    EXPECT_EQ(count_of(r.output, "step skipped"), 1) << r.output;
    EXPECT_EQ(count_of(r.output, "warning: step 3: loss "), 1) << r.output;
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

// SIGTERM mid-run: the step in flight completes, its checkpoint is written (checkpoint.every
// is 0: only at the end otherwise), exit 75; the same command with training.steps = N + 3
// resumes and ends bitwise where an uninterrupted N + 3 step run ends.
TEST_F(RunControl, SigtermSavesExitsResumableAndResumesBitExact) {
  TempDir out;
  const std::string ck = out.file("ck");
  Background run(train(1, "training.steps=1000000 logging.every=1000 logging.metrics=" + out.file("m.jsonl") +
                              " checkpoint.dir=" + ck), out.file("out.txt"));
  ASSERT_TRUE(wait_for_step(out.file("m.jsonl"), 1)) << run.output();
  kill(run.pid(), SIGTERM);
  EXPECT_EQ(run.wait(60), 75) << run.output();
  const std::string output = run.output();
  const int n = stopped_after(output, "SIGTERM");
  ASSERT_GE(n, 1) << output;
  char name[32];
  std::snprintf(name, sizeof name, "step_%08d.h5", n);
  EXPECT_NE(output.find(std::string("; checkpoint ") + ck + "/" + name + "; resume with resume: auto (exit 75)"),
            std::string::npos) << output;
  EXPECT_EQ(latest_of(ck), name);

  const std::string steps = " training.steps=" + std::to_string(n + 3);
  auto r = run_command(train(1, "checkpoint.dir=" + ck + steps + " --dump " + out.file("resumed")), 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from step " + std::to_string(n)), std::string::npos) << r.output;
  r = run_command(train(1, steps + " --dump " + out.file("straight")), 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Verdict v = compare_exact(read_param_dumps(dump_files(out.file("resumed"), n + 3, 1)),
                                  read_param_dumps(dump_files(out.file("straight"), n + 3, 1)));
  EXPECT_TRUE(v.passed()) << v.failures("resumed after SIGTERM against uninterrupted");
}

// Without checkpoint.dir there is nothing to resume from: the same stop exits 1, so a job
// script never requeues a run that would start over.
TEST_F(RunControl, SigintWithoutCheckpointDirStopsWithExit1) {
  TempDir out;
  Background run(train(1, "training.steps=1000000 logging.every=1000 logging.metrics=" + out.file("m.jsonl")),
                 out.file("out.txt"));
  ASSERT_TRUE(wait_for_step(out.file("m.jsonl"), 1)) << run.output();
  kill(run.pid(), SIGINT);
  EXPECT_EQ(run.wait(60), 1) << run.output();
  const int n = stopped_after(run.output(), "SIGINT");
  EXPECT_GE(n, 1) << run.output();
  EXPECT_NE(run.output().find("; no checkpoint (checkpoint.dir is not set), so a rerun starts over (exit 1)"),
            std::string::npos) << run.output();
}

// Two signals pending at once (the process held with SIGSTOP while they arrive): the first
// asks for a stop, the second ends the process by its default action without saving.
TEST_F(RunControl, ASecondSignalEndsTheProcessAtOnce) {
  TempDir out;
  Background run(train(1, "training.steps=1000000 logging.every=1000 logging.metrics=" + out.file("m.jsonl") +
                              " checkpoint.dir=" + out.file("ck")), out.file("out.txt"));
  ASSERT_TRUE(wait_for_step(out.file("m.jsonl"), 1)) << run.output();
  kill(run.pid(), SIGSTOP);
  kill(run.pid(), SIGTERM);
  kill(run.pid(), SIGINT);
  kill(run.pid(), SIGCONT);
  const int code = run.wait(60);
  EXPECT_TRUE(code == 128 + SIGTERM || code == 128 + SIGINT) << code << "\n" << run.output();
  EXPECT_EQ(run.output().find("stopped by"), std::string::npos) << run.output();
}

// Under mpirun, pp=2. SIGUSR1 to mpirun (forwarded to every rank; what the sbatch scripts
// ask Slurm for) and SIGTERM to one rank only both stop every rank after the same step
// with exit 75. (SIGTERM to mpirun itself: below.)
class RunControlMpiSignal : public RunControl {
 protected:
  // Returns the step the run stopped after.
  int stop_run(const std::string& signal_name, const std::function<void(pid_t)>& send, int want_exit,
               const TempDir& out) {
    Background run(train(2, "training.steps=1000000 logging.every=1000 logging.metrics=" + out.file("m.jsonl") +
                                " checkpoint.dir=" + out.file("ck")), out.file("out.txt"));
    EXPECT_TRUE(wait_for_step(out.file("m.jsonl"), 1)) << run.output();
    send(run.pid());
    const int code = run.wait(60);
    const std::string output = run.output();
    if (want_exit >= 0) EXPECT_EQ(code, want_exit) << output;
    else EXPECT_NE(code, 0) << output;
    const int n = stopped_after(output, signal_name);
    EXPECT_GE(n, 1) << output;
    EXPECT_EQ(count_of(output, "stopped by " + signal_name), 1) << output;  // printed by world rank 0
    char name[32];
    std::snprintf(name, sizeof name, "step_%08d.h5", n);
    EXPECT_EQ(latest_of(out.file("ck")), name) << output;
    return n;
  }
};

TEST_F(RunControlMpiSignal, Usr1ToMpirunStopsEveryRankResumably) {
  TempDir out;
  stop_run("SIGUSR1", [](pid_t mpirun) { kill(mpirun, SIGUSR1); }, 75, out);
}

// SIGTERM to mpirun itself: the ranks begin their stop, but Open MPI's mpirun (4.x) ends
// the job on its own about a second later, with the save done or not (on a loaded machine
// often not; the sbatch scripts ask for SIGUSR1 for this reason). What holds whatever the
// timing: the job ends, non-zero, and `latest`, if there is one, names a checkpoint that
// verifies (a save cut short never leaves a file under its final name).
TEST_F(RunControlMpiSignal, SigtermToMpirunEndsTheJobWithoutABrokenCheckpoint) {
  TempDir out;
  Background run(train(2, "training.steps=1000000 logging.every=1000 logging.metrics=" + out.file("m.jsonl") +
                              " checkpoint.dir=" + out.file("ck")), out.file("out.txt"));
  ASSERT_TRUE(wait_for_step(out.file("m.jsonl"), 1)) << run.output();
  kill(run.pid(), SIGTERM);
  const int code = run.wait(60);
  EXPECT_NE(code, 0) << run.output();
  EXPECT_NE(code, 124) << run.output();  // ended by itself, not by the test's deadline
  const std::string latest = latest_of(out.file("ck"));
  if (latest.empty()) return;
  auto v = run_command(pptrain_bin() + " inspect --verify " + out.file("ck/" + latest), 60);
  EXPECT_EQ(v.exit_code, 0) << v.output << "\n" << run.output();
}

TEST_F(RunControlMpiSignal, SigtermToOneRankStopsBothAndResumesBitExact) {
  TempDir out;
  const int n = stop_run("SIGTERM", [](pid_t mpirun) {
    const pid_t rank1 = rank_pid(mpirun, 1);
    ASSERT_GT(rank1, 0);
    kill(rank1, SIGTERM);
  }, 75, out);
  if (::testing::Test::HasFailure()) return;
  const std::string steps = " training.steps=" + std::to_string(n + 3);
  auto r = run_command(train(2, "checkpoint.dir=" + out.file("ck") + steps + " --dump " + out.file("resumed")), 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(train(2, steps + " --dump " + out.file("straight")), 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Verdict v = compare_exact(read_param_dumps(dump_files(out.file("resumed"), n + 3, 2)),
                                  read_param_dumps(dump_files(out.file("straight"), n + 3, 2)));
  EXPECT_TRUE(v.passed()) << v.failures("pp=2 resumed after SIGTERM to rank 1 against uninterrupted");
}

// Rank 1 stops itself with SIGSTOP at the start of step 3; rank 0 waits for its backward
// transfer. With runtime.watchdog_s 3 rank 0 must name what it waits for and the job must
// end non-zero within 3 s + 10 s (the watchdog looks every 0.75 s; mpirun then kills the
// stopped rank with SIGKILL).
TEST_F(RunControl, WatchdogEndsAJobWithAFrozenRank) {
  const auto start = Clock::now();
  auto r = run_command("PPTRAIN_FAULTS=freeze@1:3 " + train(2, "runtime.watchdog_s=3"), 60);
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << r.output;
  EXPECT_LT(elapsed, 3 + 10 + 5) << r.output;  // + 5 s: starting mpirun and 2 steps
  std::smatch m;
  EXPECT_TRUE(std::regex_search(r.output, m, std::regex("\\[rank 0\\] error: watchdog: world rank 0 made no progress "
                                                        "for [0-9.]+ s \\(runtime.watchdog_s 3\\) in step 3: .*"
                                                        "waits for [0-9]+RECV_[FB][0-9]+ from pp rank 1 tag [0-9]+")))
      << r.output;
}

// A healthy run with a short watchdog and checkpoints completes: every step makes progress
// well within 2 s, and the saves pause the watchdog.
TEST_F(RunControl, WatchdogLeavesAHealthyRunAlone) {
  TempDir out;
  auto r = run_command(train(2, "runtime.watchdog_s=2 checkpoint.every=2 checkpoint.dir=" + out.file("ck")), 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("watchdog"), std::string::npos) << r.output;
}
