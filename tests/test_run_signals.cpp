// A run that is never lost, through the pptrain executable (single process and mpirun
// pp=2, tiny models, seconds each): stop signals and the watchdog.
//   - stop signals: SIGTERM to a single process, SIGUSR1 and SIGTERM to mpirun, SIGTERM to
//     one rank only: the line "stopped by ...", the checkpoint of the step it stopped
//     after, exit 75, and a resumed run ends bitwise where an uninterrupted run ends; a
//     second signal ends the process at once; without checkpoint.dir the stop exits 1;
//   - watchdog: a rank frozen with SIGSTOP (freeze@1:STEP) makes rank 0 say what it waits
//     for (the receive from pp rank 1) and end the job within runtime.watchdog_s + 10 s; a
//     healthy run with a short watchdog completes.
// Bitwise equalities are exact by construction (tests/test_run_control.cpp says why).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "support/dump_compare.h"
#include "support/run_control.h"
#include "support/test_util.h"
#include "train/param_dump.h"

using namespace pptrain;
using namespace pptrain::testing;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

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

// The bits of /proc/PID/status's SigCgt (signals with a handler), 0 if unreadable.
uint64_t caught_signals(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("SigCgt:", 0) == 0) return std::stoull(line.substr(7), nullptr, 16);
  return 0;
}

int threads_of(pid_t pid) {
  int n = 0;
  std::error_code ec;
  for ([[maybe_unused]] const auto& t : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) ++n;
  return n;
}

// SIGTERM during start-up: the handler is in place before MPI starts (the process has one
// thread: MPI and OpenMP make more), so the signal counts; the run stops after its first
// step, saves and exits 75. It used to be installed only when the loop began: a signal in
// the first ~0.15 s killed the process with no line.
TEST_F(RunControl, SigtermDuringStartUpStopsAfterTheFirstStep) {
  TempDir out;
  Background run(train(1, "training.steps=1000000 logging.every=1000 checkpoint.dir=" + out.file("ck")),
                 out.file("out.txt"));
  const uint64_t sigterm_bit = uint64_t(1) << (SIGTERM - 1);
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (!(caught_signals(run.pid()) & sigterm_bit) && Clock::now() < deadline) {
  }
  ASSERT_TRUE(caught_signals(run.pid()) & sigterm_bit) << "no SIGTERM handler within 30 s\n" << run.output();
  kill(run.pid(), SIGSTOP);  // hold it where it was when the handler appeared
  const int threads = threads_of(run.pid());
  kill(run.pid(), SIGTERM);
  kill(run.pid(), SIGCONT);
  EXPECT_EQ(threads, 1) << "the handler was installed after start-up began its threads";
  EXPECT_EQ(run.wait(60), 75) << run.output();
  EXPECT_EQ(stopped_after(run.output(), "SIGTERM"), 1) << run.output();
}

// Two runs on one checkpoint folder: the second is refused at start-up in one line naming
// the first's host and pid (it used to die at its second save, after the first had
// removed "its" leftover .tmp). Once the first ends, the folder is free again: the lock
// is the kernel's flock, released however its holder ends (here: SIGKILL).
TEST_F(RunControl, ASecondRunOnTheSameCheckpointFolderIsRefused) {
  TempDir out;
  const std::string ck = out.file("ck");
  Background first(train(1, "training.steps=1000000 logging.every=1000 logging.metrics=" + out.file("m.jsonl") +
                                " checkpoint.dir=" + ck), out.file("first.txt"));
  ASSERT_TRUE(wait_for_step(out.file("m.jsonl"), 1)) << first.output();
  auto r = run_command(train(1, "training.steps=2 checkpoint.dir=" + ck), 60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  EXPECT_NE(r.output.find("error: checkpoint.dir " + ck + " (rank 0): is in use by another run (host " +
                          std::string(host) + " pid " + std::to_string(first.pid()) + " since "),
            std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("step 1"), std::string::npos) << "the second run trained:\n" << r.output;
  kill(first.pid(), SIGKILL);
  first.wait(30);
  r = run_command(train(1, "training.steps=2 checkpoint.dir=" + ck), 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
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
    EXPECT_EQ(count_occurrences(output, "stopped by " + signal_name), 1) << output;  // printed by world rank 0
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
// Runs `command` (a job with runtime.watchdog_s 3 and a frozen rank): it must end non-zero
// within 3 s + 10 s of being stuck and rank 0's line must match `line`.
static void expect_watchdog_ends_job(const std::string& command, const std::string& line) {
  const auto start = Clock::now();
  auto r = run_command(command, 60);
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << r.output;
  EXPECT_LT(elapsed, 3 + 10 + 5) << r.output;  // + 5 s: starting mpirun and 2 steps
  std::smatch m;
  EXPECT_TRUE(std::regex_search(r.output, m, std::regex(line))) << r.output;
}

TEST_F(RunControl, WatchdogEndsAJobWithAFrozenRank) {
  expect_watchdog_ends_job("PPTRAIN_FAULTS=freeze@1:3 " + train(2, "runtime.watchdog_s=3"),
                           "\\[rank 0\\] error: watchdog: world rank 0 made no progress for [0-9.]+ s "
                           "\\(runtime.watchdog_s 3\\) in step 3: .*waits for [0-9]+RECV_[FB][0-9]+ from pp rank 1 "
                           "tag [0-9]+");
}

// A rank frozen in the middle of a checkpoint save (the watchdog used to be paused for the
// whole save, and such a job hung forever): the other rank waits in the save's collective
// and its watchdog ends the job, the line naming the save's phase; nothing is completed.
TEST_F(RunControl, WatchdogEndsAJobWithARankFrozenMidSave) {
  TempDir out;
  expect_watchdog_ends_job("PPTRAIN_FAULTS=freeze_save@1:model_written " +
                               train(2, "runtime.watchdog_s=3 checkpoint.every=2 checkpoint.dir=" + out.file("ck")),
                           "\\[rank 0\\] error: watchdog: world rank 0 made no progress for [0-9.]+ s "
                           "\\(runtime.watchdog_s 3\\) in step 2: checkpoint save: [a-z]+ (dataset /optim/m/|the file)");
  EXPECT_FALSE(fs::exists(out.file("ck") + "/latest")) << "the interrupted save was completed";
}

// A healthy run with a short watchdog and checkpoints completes: every step and every phase
// of a save makes progress well within 2 s.
TEST_F(RunControl, WatchdogLeavesAHealthyRunAlone) {
  TempDir out;
  auto r = run_command(train(2, "runtime.watchdog_s=2 checkpoint.every=2 checkpoint.dir=" + out.file("ck")), 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("watchdog"), std::string::npos) << r.output;
}
