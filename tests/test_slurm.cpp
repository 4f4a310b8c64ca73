// The Slurm scripts (slurm/*.sbatch), for real: scripts/slurm_test_cluster.sh starts a
// throwaway one-node Slurm cluster on 127.0.0.1 (munged, slurmctld, slurmd from
// Debian's packages), the test submits jobs to it, and the cluster script stops its
// daemons afterwards. Skipped, with the reason, only where Slurm cannot be installed or
// run (exit 77 of the cluster script). The scripts' argument handling is also checked
// without Slurm, with a stand-in srun that prints what it was asked to run.
#include <gtest/gtest.h>
#include <signal.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "support/mpi_programs.h"
#include "support/test_util.h"

using namespace pptrain::testing;

namespace {

const char* kScripts[] = {"train_single_node", "train_multi_node", "train_cpu"};

// Shell function for the commands run inside the cluster: `submit NAME SBATCH_ARGS...`
// submits a job with its output in $DIR/NAME.out, waits until it has ended (polling
// scontrol, which notices within 0.2 s, unlike sbatch --wait) and prints
// "job NAME: JobState=... ExitCode=..." followed by the job's output.
const char* kSubmitFunction = R"SH(
submit() {
  local name=$1; shift
  local job state
  job=$(timeout 30 sbatch --parsable -o "$DIR/$name.out" "$@") || { echo "job $name: sbatch failed"; return 1; }
  for _ in $(seq 600); do
    state=$(timeout 10 scontrol show job "$job" | grep -o 'JobState=[A-Z_]*')
    case "$state" in JobState=PENDING|JobState=RUNNING|JobState=CONFIGURING|JobState=COMPLETING|"") sleep 0.2 ;; *) break ;; esac
  done
  echo "job $name: $(timeout 10 scontrol show job "$job" | grep -oE '(JobState|ExitCode)=[^ ]*' | tr '\n' ' ')"
  echo "--- output of $name"; cat "$DIR/$name.out"; echo "--- end of $name"
}
)SH";

// Runs `commands` (bash) inside a fresh test cluster whose state lives under dir.
// $DIR is dir; submit() is defined.
CommandResult in_cluster(const TempDir& dir, const std::string& commands, int gpus = 0,
                         int timeout_s = 240) {
  std::string script = dir.file("commands.sh");
  write_file(script, "set -u\nDIR=" + dir.path() + "\n" + kSubmitFunction + commands);
  return run_command("scripts/slurm_test_cluster.sh --workdir " + dir.path() + " --gpus " +
                         std::to_string(gpus) + " -- bash " + script,
                     timeout_s);
}

// The reason the cluster script gave for skipping ("slurm_test_cluster: SKIP: ...").
std::string skip_reason(const std::string& output) {
  std::smatch m;
  if (std::regex_search(output, m, std::regex("SKIP: ([^\n]*)"))) return m[1];
  return output;
}

std::string job_state(const std::string& output, const std::string& name) {
  std::smatch m;
  if (std::regex_search(output, m, std::regex("job " + name + ": ([^\n]*)"))) return m[1];
  return "(no state for job " + name + ")";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string absolute(const std::string& path) { return std::filesystem::absolute(path).string(); }

// True once `pptrain train` is a command of the binary under test.
bool train_available() {
  CommandResult r = run_command(pptrain_bin() + " train /nonexistent/config.yaml", 30);
  return !contains(r.output, "unknown command") && std::filesystem::exists(pptrain_bin());
}

}  // namespace

// --- Without Slurm: argument handling and the srun line --------------------------------

class SbatchScript : public ::testing::TestWithParam<const char*> {
 protected:
  // Runs slurm/<script>.sbatch with bash, `srun` replaced by a stand-in that prints its
  // arguments and OMP_NUM_THREADS.
  CommandResult run_script(const std::string& env, const std::string& args) {
    std::string bin = dir_.file("bin");
    std::filesystem::create_directories(bin);
    write_file(bin + "/srun", "#!/bin/sh\necho \"OMP_NUM_THREADS=$OMP_NUM_THREADS\"\necho srun \"$@\"\n");
    std::filesystem::permissions(bin + "/srun", std::filesystem::perms::owner_all);
    return run_command("env -u CONFIG -u PPTRAIN_BIN -u SLURM_CPUS_PER_TASK PATH=" + bin +
                           ":$PATH " + env + " bash slurm/" + GetParam() + ".sbatch " + args,
                       30);
  }
  TempDir dir_;
};

TEST_P(SbatchScript, LaunchesPptrainTrainWithSrunPmix) {
  std::string config = dir_.file("exp.yaml");
  write_file(config, "training: {steps: 1}\n");
  CommandResult r = run_script("SLURM_CPUS_PER_TASK=3", config + " training.steps=2 logging.every=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "OMP_NUM_THREADS=3\n")) << r.output;
  EXPECT_TRUE(contains(r.output, "srun --mpi=pmix --cpus-per-task=3 --kill-on-bad-exit=1 "
                                 "--distribution=block build/pptrain train " + config +
                                 " training.steps=2 logging.every=1\n"))
      << r.output;
}

TEST_P(SbatchScript, TakesConfigFromEnvironmentAndBinaryFromPptrainBin) {
  std::string config = dir_.file("exp.yaml");
  write_file(config, "training: {steps: 1}\n");
  CommandResult r = run_script("CONFIG=" + config + " PPTRAIN_BIN=/opt/pptrain/bin/pptrain",
                               "training.steps=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "OMP_NUM_THREADS=1\n")) << r.output;
  EXPECT_TRUE(contains(r.output, " /opt/pptrain/bin/pptrain train " + config + " training.steps=2\n"))
      << r.output;
}

TEST_P(SbatchScript, RejectsMissingConfig) {
  CommandResult r = run_script("", "");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, std::string("usage: sbatch slurm/") + GetParam() + ".sbatch CONFIG.yaml"))
      << r.output;
  EXPECT_FALSE(contains(r.output, "srun ")) << r.output;
  r = run_script("", dir_.file("nope.yaml"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "error: config '" + dir_.file("nope.yaml") + "' not found"))
      << r.output;
}

TEST_P(SbatchScript, RequestsGpusExactlyWhenMeantForGpus) {
  std::string text = read_file(std::string("slurm/") + GetParam() + ".sbatch");
  bool gpu_script = std::string(GetParam()) != "train_cpu";
  EXPECT_EQ(contains(text, "\n#SBATCH --gpus-per-task=1\n"), gpu_script) << text;
  for (const char* key : {"--nodes=", "--ntasks-per-node=", "--cpus-per-task=", "--time=", "--output="})
    EXPECT_TRUE(contains(text, std::string("\n#SBATCH ") + key)) << key;
  EXPECT_EQ(contains(text, "\n#SBATCH --nodes=2\n"), std::string(GetParam()) == "train_multi_node");
}

INSTANTIATE_TEST_SUITE_P(Scripts, SbatchScript, ::testing::ValuesIn(kScripts),
                         [](const auto& info) { return std::string(info.param); });

// slurm/llama3_8b.sbatch: while the checkpoint folder holds no checkpoint, HF_MODEL is
// imported once (one task) and training resumes from the import; then from the folder.
TEST(Llama3Sbatch, ImportsOnceThenTrainsFromTheImportThenFromItsCheckpoints) {
  TempDir dir;
  const std::string bin = dir.file("bin");
  std::filesystem::create_directories(bin);
  write_file(bin + "/srun", "#!/bin/sh\necho srun \"$@\"\n");
  std::filesystem::permissions(bin + "/srun", std::filesystem::perms::owner_all);
  auto run = [&](const std::string& env) {
    return run_command("env -u CONFIG -u PPTRAIN_BIN -u SLURM_CPUS_PER_TASK -u HF_MODEL PATH=" + bin + ":$PATH " +
                           env + " bash slurm/llama3_8b.sbatch training.steps=2",
                       30);
  };
  const std::string ck = dir.file("ck"), imported = ck + ".imported.h5";
  const std::string import = "srun --mpi=pmix --nodes=1 --ntasks=1 --kill-on-bad-exit=1 build/pptrain import-hf "
                             "/models/llama " + imported + "\n";
  const std::string train = "--distribution=block build/pptrain train configs/llama3_8b_gpu.yaml checkpoint.dir=" + ck;
  CommandResult r = run("HF_MODEL=/models/llama CKPT_DIR=" + ck + "/");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, import)) << r.output;
  EXPECT_TRUE(contains(r.output, train + " checkpoint.resume=" + imported + " training.steps=2\n")) << r.output;

  write_file(imported, "");  // imported: not again
  r = run("HF_MODEL=/models/llama CKPT_DIR=" + ck);
  EXPECT_FALSE(contains(r.output, "import-hf")) << r.output;
  EXPECT_TRUE(contains(r.output, train + " checkpoint.resume=" + imported + " training.steps=2\n")) << r.output;

  std::filesystem::create_directories(ck);
  write_file(ck + "/latest", "step_00000100.h5\n");  // a checkpoint: resume: auto takes it
  r = run("HF_MODEL=/models/llama CKPT_DIR=" + ck);
  EXPECT_FALSE(contains(r.output, "import-hf")) << r.output;
  EXPECT_TRUE(contains(r.output, train + " training.steps=2\n")) << r.output;
}

// --- With Slurm ---------------------------------------------------------------------------

TEST(SlurmCluster, RunsTwoRankMpiJobUnderSrunAndStopsItsDaemons) {
  TempDir dir;
  std::string collectives = mpi_test_program("comm_collectives");
  ASSERT_TRUE(std::filesystem::exists(collectives)) << collectives << " is missing";
  CommandResult r = in_cluster(
      dir, "submit mpi --ntasks=2 --cpus-per-task=1 --time=2 --wrap \"srun --mpi=pmix " +
               absolute(pptrain_bin()) + " --version && srun --mpi=pmix " + collectives + "\"\n" +
               "submit failing --ntasks=1 --time=2 --wrap 'exit 3'\n"
               "exit 5\n");  // the cluster script must pass this status on
  if (r.exit_code == 77) GTEST_SKIP() << "Slurm unavailable: " << skip_reason(r.output);
  EXPECT_EQ(r.exit_code, 5) << r.output;
  EXPECT_EQ(job_state(r.output, "mpi"), "JobState=COMPLETED ExitCode=0:0 ") << r.output;
  std::string out = read_file(dir.file("mpi.out"));
  std::regex version("pptrain [0-9]+\\.[0-9]+\\.[0-9]+\n");
  EXPECT_EQ(std::distance(std::sregex_iterator(out.begin(), out.end(), version),
                          std::sregex_iterator()), 2) << out;
  // PMIx joined the two tasks into one MPI world of 2 ranks.
  EXPECT_TRUE(contains(out, "collectives ok rank 0 of 2\n")) << out;
  EXPECT_TRUE(contains(out, "collectives ok rank 1 of 2\n")) << out;
  EXPECT_EQ(job_state(r.output, "failing"), "JobState=FAILED ExitCode=3:0 ") << r.output;

  // Every daemon it started is gone.
  std::ifstream pids(dir.file("slurm-cluster/daemon.pids"));
  int pid, n = 0;
  while (pids >> pid) {
    ++n;
    errno = 0;
    EXPECT_TRUE(kill(pid, 0) != 0 && errno == ESRCH) << "daemon " << pid << " still running";
  }
  EXPECT_EQ(n, 3) << "munged, slurmctld, slurmd";
}

TEST(SlurmCluster, SbatchScriptsLaunchTwoRanksOnGpuAndCpuNodes) {
  // The scripts' own launch path (config handling, srun --mpi=pmix, --gpus-per-task on a
  // node with 2 stand-in GPUs) with an MPI program in place of pptrain; the training
  // run itself is the next test.
  TempDir dir;
  std::string collectives = mpi_test_program("comm_collectives");
  ASSERT_TRUE(std::filesystem::exists(collectives)) << collectives << " is missing";
  write_file(dir.file("exp.yaml"), "training: {steps: 1}\n");
  std::string commands;
  for (const char* s : kScripts)
    commands += std::string("PPTRAIN_BIN=") + collectives + " submit " + s +
                " --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 --time=2 slurm/" + s +
                ".sbatch " + dir.file("exp.yaml") + "\n";
  CommandResult r = in_cluster(dir, commands, /*gpus=*/2);
  if (r.exit_code == 77) GTEST_SKIP() << "Slurm unavailable: " << skip_reason(r.output);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* s : kScripts) {
    EXPECT_EQ(job_state(r.output, s), "JobState=COMPLETED ExitCode=0:0 ") << s << "\n" << r.output;
    std::string out = read_file(dir.file(std::string(s) + ".out"));
    EXPECT_TRUE(std::regex_search(out, std::regex("pptrain job [0-9]+: 2 tasks on [^ ]+, config " +
                                                  dir.file("exp.yaml"))))
        << s << "\n" << out;
    EXPECT_TRUE(contains(out, "collectives ok rank 0 of 2\n")) << s << "\n" << out;
    EXPECT_TRUE(contains(out, "collectives ok rank 1 of 2\n")) << s << "\n" << out;
  }
}

TEST(SlurmCluster, TrainsTinyPipelineModelWithTheSbatchScripts) {
  if (!train_available())
    GTEST_SKIP() << "`" << pptrain_bin() << " train` is not available in this build yet";
  TempDir dir;
  // A small text corpus, byte-level tokens.
  std::ostringstream text;
  for (int i = 0; i < 300; ++i)
    text << "Line " << i << ": the pipeline sends activations forward and gradients back.\n";
  write_file(dir.file("corpus.txt"), text.str());
  CommandResult prep = run_command(pptrain_bin() + " prepare-data --text " + dir.file("corpus.txt") +
                                   " --out " + dir.file("data"), 60);
  ASSERT_EQ(prep.exit_code, 0) << prep.output;
  write_file(dir.file("tiny.yaml"),
             "model: {n_layer: 2, n_head: 2, d_model: 32, seq_len: 16, vocab_size: 256}\n"
             "parallel: {pp: 2, schedule: 1f1b, microbatches: 2}\n"
             "training: {steps: 3, micro_batch_size: 2}\n"
             "logging: {every: 1}\n"
             "data: {train: \"" + dir.file("data") + "/train_*.bin\", val: \"" + dir.file("data") +
             "/val_*.bin\"}\n");
  std::string commands = "export PPTRAIN_BIN=" + absolute(pptrain_bin()) + "\n";
  for (const char* s : {"train_cpu", "train_single_node"})
    commands += std::string("submit ") + s + " --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 "
                "--time=5 slurm/" + s + ".sbatch " + dir.file("tiny.yaml") + "\n";
  CommandResult r = in_cluster(dir, commands, /*gpus=*/2, 300);
  if (r.exit_code == 77) GTEST_SKIP() << "Slurm unavailable: " << skip_reason(r.output);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* s : {"train_cpu", "train_single_node"}) {
    EXPECT_EQ(job_state(r.output, s), "JobState=COMPLETED ExitCode=0:0 ") << s << "\n" << r.output;
    std::string out = read_file(dir.file(std::string(s) + ".out"));
    for (int step = 1; step <= 3; ++step)
      EXPECT_TRUE(std::regex_search(out, std::regex("step " + std::to_string(step) +
                                                    "/3 \\| loss [0-9]+\\.[0-9]+")))
          << s << ": no loss line for step " << step << "\n" << out;
  }
}

// A job stopped early: SIGUSR1 to its tasks (what --signal=USR1@180 sends before the time
// limit; here at once with `scancel --signal=USR1`, as Slurm checks time limits only every
// few tens of seconds) makes pptrain save and exit 75, the script requeues the job, and its
// next run resumes from the checkpoint and ends with the loss and gradient norm of an
// uninterrupted run, to the last printed digit (bitwise equal runs: the same binary,
// layout, one thread per rank and data; test_run_control.cpp). Slurm holds a requeued job
// back for a while (its BeginTime); once the first run's processes are gone (node idle, no
// slurmstepd of the job left, for 3 polls in a row: a step launched beside the old one's
// remains fails) the test lets it start at once with `scontrol update StartTime=now`.
TEST(SlurmCluster, SignalledJobSavesRequeuesAndResumesToTheUninterruptedLoss) {
  if (!train_available())
    GTEST_SKIP() << "`" << pptrain_bin() << " train` is not available in this build yet";
  TempDir dir;
  CommandResult prep = prepare_markov_corpus(dir.file("data"), 19, 8000);
  ASSERT_EQ(prep.exit_code, 0) << prep.output;
  // Constant LR (min_lr = lr): the run's arithmetic does not depend on where it stopped.
  // 1500 steps of this model take seconds; the signal comes after step 1.
  const std::string config = dir.file("c.yaml");
  write_file(config,
             "model: {n_layer: 4, n_head: 4, d_model: 16, seq_len: 8, vocab_size: 19}\n"
             "parallel: {pp: 2, microbatches: 4}\n"
             "training: {steps: 1500, micro_batch_size: 2, lr: 1.0e-2, min_lr: 1.0e-2, warmup_steps: 0,"
             " eval_every: 0}\n"
             "data: {train: '" + dir.file("data") + "/train_*.bin', shuffle: true}\n"
             "logging: {every: 1500, sample_tokens: 0}\n");
  const std::string commands =
      "export PPTRAIN_BIN=" + absolute(pptrain_bin()) + "\n"
      "job=$(timeout 30 sbatch --parsable -o $DIR/job.out --nodes=1 --ntasks-per-node=2 --cpus-per-task=1 "
      "--time=5 slurm/train_cpu.sbatch " + config + " checkpoint.dir=$DIR/ck logging.metrics=$DIR/m.jsonl) || exit 1\n"
      "for _ in $(seq 300); do grep -q '\"step\": 1,' $DIR/m.jsonl 2>/dev/null && break; sleep 0.1; done\n"
      "timeout 10 scancel --signal=USR1 $job\n"
      "settled=0\n"
      "for _ in $(seq 600); do\n"
      "  st=$(timeout 10 scontrol show job $job | grep -oE '(JobState|Restarts)=[^ ]*' | tr '\\n' ' ')\n"
      "  case \"$st\" in *COMPLETED*|*FAILED*|*CANCELLED*|*TIMEOUT*) break ;; esac\n"
      "  case \"$st\" in *PENDING*Restarts=1*)\n"
      "    if timeout 10 scontrol show node | grep -q 'State=IDLE ' && ! pgrep -f \"slurmstepd: .$job\" >/dev/null;\n"
      "    then settled=$((settled + 1)); else settled=0; fi\n"
      "    [ $settled -ge 3 ] && timeout 10 scontrol update JobId=$job StartTime=now ;;\n"
      "  esac\n"
      "  sleep 0.2\n"
      "done\n"
      "echo \"job requeued: $(timeout 10 scontrol show job $job | grep -oE '(JobState|Restarts|ExitCode)=[^ ]*' | tr '\\n' ' ')\"\n"
      // Why, when the requeued run did not complete (its batch script printed nothing, once,
      // under the suite's load): the daemons' logs go with the test's folder otherwise.
      "case \"$(timeout 10 scontrol show job $job)\" in *JobState=COMPLETED*) ;; *)\n"
      "  echo '--- the requeued run did not complete; the daemons said:'\n"
      "  tail -n 40 $DIR/slurm-cluster/slurmctld.log $DIR/slurm-cluster/slurmd.log ;; esac\n";
  CommandResult r = in_cluster(dir, commands, 0, 180);
  if (r.exit_code == 77) GTEST_SKIP() << "Slurm unavailable: " << skip_reason(r.output);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string out = read_file(dir.file("job.out"));
  EXPECT_TRUE(contains(r.output, "job requeued: JobState=COMPLETED Restarts=1 ExitCode=0:0 ")) << r.output << out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("stopped by SIGUSR1 after step ([0-9]+)/1500; checkpoint ")))
      << out;
  const std::string stopped = m[1];
  EXPECT_TRUE(contains(out, "stopped early with a checkpoint (exit 75), requeued (restart 0)")) << out;
  EXPECT_TRUE(contains(out, "resumed from step " + stopped + "\n")) << out;

  r = run_command(mpirun(2) + pptrain_bin() + " train " + config + " logging.metrics=" + dir.file("straight.jsonl"), 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto last_step_line = [](const std::string& jsonl) {
    std::string last;
    std::istringstream in(jsonl);
    for (std::string line; std::getline(in, line);)
      if (contains(line, "{\"step\": 1500,")) last = line;
    return last;
  };
  // The fields of the last step that the arithmetic decides (not the timings).
  auto numbers = [](const std::string& line) {
    std::smatch loss, norm;
    std::regex_search(line, loss, std::regex("\"loss\": [^,]+"));
    std::regex_search(line, norm, std::regex("\"grad_norm\": [^,]+"));
    return loss.str() + ", " + norm.str();
  };
  const std::string resumed = last_step_line(read_file(dir.file("m.jsonl")));
  const std::string straight = last_step_line(read_file(dir.file("straight.jsonl")));
  ASSERT_FALSE(resumed.empty()) << read_file(dir.file("m.jsonl"));
  ASSERT_FALSE(straight.empty()) << r.output;
  EXPECT_EQ(numbers(resumed), numbers(straight));
}
