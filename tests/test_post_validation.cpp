// Post-validation (training.post_validation: true, train/trainer.h) gives the same bits as
// synchronous training, through real runs (tests/mpi/checkpoint_train and the pptrain
// executable, under mpirun with a timeout; tiny models, seconds each):
//   - no rollback (grad_clip far above every norm): every loss and every final parameter
//     bitwise equal to the synchronous run, single process, pp=2 zb-h2, pp=2 zbv and
//     pp=2 x dp=2, and no rollback reported;
//   - rollbacks through clipping (grad_clip between the norms, so some steps clip and some
//     do not): bitwise equal again, with one rollback line per clipped step and the
//     metrics' `rollbacks` counting them; single process, pp=2 zbv and pp=2 x dp=2 under
//     ZeRO-1;
//   - a planted non-finite gradient (nan_grad): under on_nonfinite: skip bitwise equal to
//     the synchronous skip run; under stop, exit non-zero with the synchronous run's error
//     line on every rank;
//   - a checkpoint and resume under post-validation ends where the uninterrupted run ends;
//   - a stop signal: the run stops after a settled step with its checkpoint (exit 75), and
//     a resumed run ends bitwise where an uninterrupted synchronous run ends;
//   - the emulated cuda backend in bf16 (pptrain-emu, pp=2 zbv, with rollbacks): the final
//     checkpoints (masters and both moments) are bitwise those of the synchronous run.
// Equalities are bitwise, exact by construction: both modes fold the same step reduction
// (train/step_reduction.h) and apply AdamW to the same bits (a rollback restores masters,
// gradients and moments bitwise and applies the synchronous update), on the same binary,
// layout, data and one thread per rank.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cmath>
#include <cstring>
#include <csignal>
#include <filesystem>
#include <map>
#include <regex>

#include "core/config.h"
#include "core/error.h"
#include "support/checkpoint_util.h"
#include "support/dump_compare.h"
#include "support/mpi_programs.h"
#include "support/markov_model.h"
#include "support/test_util.h"
#include "train/param_dump.h"
#include "train/step_reduction.h"
#include "train/stop_signals.h"

using namespace pptrain;
using namespace pptrain::testing;
namespace fs = std::filesystem;

namespace {

int count_of(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t pos = text.find(part); pos != std::string::npos; pos = text.find(part, pos + 1)) ++n;
  return n;
}

// The float datasets of a checkpoint file (/model/..., /optim/m/..., /optim/v/...).
std::vector<std::string> datasets_of(const std::string& file) {
  std::vector<std::string> names;
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return names;
  H5Ovisit(f, H5_INDEX_NAME, H5_ITER_INC,
           [](hid_t, const char* name, const H5O_info_t* info, void* out) -> herr_t {
             if (info->type == H5O_TYPE_DATASET) static_cast<std::vector<std::string>*>(out)->push_back(name);
             return 0;
           },
           &names);
  H5Fclose(f);
  return names;
}

// Bitwise equality of every dataset of two checkpoint files; "" or what differs.
std::string compare_checkpoints(const std::string& got, const std::string& want) {
  const std::vector<std::string> names = datasets_of(want);
  if (names.empty() || names != datasets_of(got)) return "the files hold different datasets (or none)";
  for (const std::string& name : names) {
    const std::vector<float> a = read_h5_floats(got, "/" + name), b = read_h5_floats(want, "/" + name);
    if (a.size() != b.size() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0)
      return name + " differs";
  }
  return "";
}

const char* const kPp2ZbH2 = "parallel.pp=2 parallel.schedule=zb-h2";
const char* const kPp2Zbv = "parallel.pp=2 parallel.schedule=zbv parallel.stages_per_rank=2";
const char* const kPp2Dp2 = "parallel.pp=2 parallel.dp=2 parallel.schedule=zb-h2";

struct TrainRun {
  CommandResult result;
  std::map<int, std::string> losses;  // step -> loss as printed (%.17g)
  std::map<int, double> norms;        // step -> grad_norm of the log line (%.4f)
};

class PostValidation : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    // 4 blocks: one per stage under zbv. Warmup and a cosine decay make the LR depend on
    // the step. Its gradient norms fall from about 2.9 to about 1.1 (grad_clip 1.5 clips
    // some steps, not all).
    MarkovModel m;
    m.parallel = "microbatches: 4";
    m.training = "steps: 6, min_lr: 1.0e-3, warmup_steps: 2, grad_clip: 1.5";
    auto r = write_markov_model(*dir_, m);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { delete dir_; }

  static int ranks_of(const std::string& layout) {
    if (layout.find("parallel.dp=2") != std::string::npos) return 4;
    return layout.find("parallel.pp=2") != std::string::npos ? 2 : 1;
  }

  // checkpoint_train on the test config with `layout` and `args`; `env` before mpirun.
  static TrainRun train(const std::string& layout, const std::string& args, const std::string& env = "") {
    const std::string program = mpi_test_program("checkpoint_train");
    TrainRun run;
    if (!fs::exists(program)) {
      run.result = {-1, program + " is missing: build it with make (mk/mpi_tests.mk)"};
      return run;
    }
    const int ranks = ranks_of(layout);
    const std::string launcher = ranks > 1 ? mpirun(ranks) : std::string("OMP_NUM_THREADS=1 ");
    run.result = run_command(env + " " + launcher + program + " " + dir_->file("model.yaml") + " " + layout + " " +
                                 args, 120);
    static const std::regex step(R"(step (\d+) loss (\S+))"), line(R"(step (\d+)/\d+ \| loss \S+ \| lr \S+ \| grad_norm (\S+))");
    const std::string& out = run.result.output;
    for (std::sregex_iterator it(out.begin(), out.end(), step), end; it != end; ++it)
      run.losses[std::stoi((*it)[1])] = (*it)[2];
    for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it)
      run.norms[std::stoi((*it)[1])] = std::stod((*it)[2]);
    return run;
  }

  static GlobalDump final_dump(const std::string& dir, int ranks) {
    std::vector<std::string> paths;
    for (int r = 0; r < ranks; ++r) paths.push_back(dir + "/final.rank" + std::to_string(r) + ".bin");
    return read_param_dumps(paths);
  }

  // Every loss as printed (%.17g round-trips a double: equal text is equal bits) of 6
  // steps and every final parameter of `got` equal to `want`'s.
  static void expect_same_bits(const TrainRun& got, const TrainRun& want, const std::string& got_dump,
                               const std::string& want_dump, int ranks, const std::string& what) {
    EXPECT_EQ(want.losses.size(), 6u) << want.result.output;
    EXPECT_EQ(got.losses, want.losses) << what << "\n" << got.result.output;
    const GlobalDump got_final = final_dump(got_dump, ranks), want_final = final_dump(want_dump, ranks);
    const Verdict v = compare_exact(got_final, want_final);
    EXPECT_TRUE(v.passed()) << v.failures(what);
    // The last step's gradients too: where the synchronous step leaves them.
    for (const auto& [name, want_tensor] : want_final.tensors) {
      const auto it = got_final.tensors.find(name);
      ASSERT_NE(it, got_final.tensors.end()) << what << ": " << name;
      const std::vector<float>& a = it->second.grad;
      const std::vector<float>& b = want_tensor.grad;
      EXPECT_TRUE(a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0)
          << what << ": the gradient of " << name << " differs";
    }
  }

  // Synchronous and post-validation runs of `layout` with `args`; returns both.
  static std::pair<TrainRun, TrainRun> both(const std::string& layout, const std::string& args,
                                            const std::string& tag, const std::string& env = "") {
    TrainRun sync = train(layout, args + " --dump-final " + dir_->file(tag + "_sync"), env);
    TrainRun pv = train(layout, args + " training.post_validation=true --dump-final " + dir_->file(tag + "_pv") +
                                    " logging.metrics=" + dir_->file(tag + "_pv.jsonl"), env);
    EXPECT_EQ(sync.result.exit_code, 0) << sync.result.output;
    EXPECT_EQ(pv.result.exit_code, 0) << pv.result.output;
    return {sync, pv};
  }

  void check_without_rollback(const std::string& layout, const std::string& tag) {
    auto [sync, pv] = both(layout, "training.grad_clip=1000", tag);
    if (HasFailure()) return;
    expect_same_bits(pv, sync, dir_->file(tag + "_pv"), dir_->file(tag + "_sync"), ranks_of(layout), tag);
    EXPECT_EQ(count_of(pv.result.output, "rolled back"), 0) << pv.result.output;
  }

  void check_with_rollbacks(const std::string& layout, const std::string& tag) {
    auto [sync, pv] = both(layout, "", tag);
    if (HasFailure()) return;
    expect_same_bits(pv, sync, dir_->file(tag + "_pv"), dir_->file(tag + "_sync"), ranks_of(layout), tag);
    // The clipped steps of the synchronous run are the rolled-back ones (no norm is within
    // the printed precision of grad_clip 1.5).
    int clipped = 0;
    for (const auto& [step, norm] : sync.norms) {
      ASSERT_GT(std::fabs(norm - 1.5), 1e-3) << "step " << step;
      const bool rolled = pv.result.output.find("step " + std::to_string(step) + ": post-validation rolled back") !=
                          std::string::npos;
      EXPECT_EQ(rolled, norm > 1.5) << "step " << step << " norm " << norm << "\n" << pv.result.output;
      clipped += norm > 1.5;
    }
    EXPECT_GT(clipped, 0) << sync.result.output;
    EXPECT_LT(clipped, 6) << sync.result.output;
    EXPECT_EQ(count_of(pv.result.output, "redone clipped"), clipped) << pv.result.output;
    const std::vector<double> rollbacks = json_values(read_file(dir_->file(tag + "_pv.jsonl")), "rollbacks");
    ASSERT_EQ(rollbacks.size(), 6u);
    EXPECT_EQ(rollbacks.back(), clipped);
  }

  static TempDir* dir_;
};
TempDir* PostValidation::dir_ = nullptr;

}  // namespace

TEST(PostValidationConfig, KeyIsABooleanDefaultFalseThatSurvivesTheCheckpointsYaml) {
  EXPECT_FALSE(parse_config("", "t.yaml").training.post_validation);
  const Config c = parse_config("training: {post_validation: true}", "t.yaml");
  EXPECT_TRUE(c.training.post_validation);
  EXPECT_TRUE(parse_config(to_yaml(c), "back").training.post_validation);
  try {
    parse_config("training: {post_validation: sometimes}", "t.yaml");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("t.yaml: key 'training.post_validation': expected true or false"),
              std::string::npos) << e.what();
  }
}

// The fold adds in world-rank order from zero on every rank: with 1e16, 1 and -1e16 the
// order shows (another order would give 1 or 2, not 0).
TEST(StepReduction, FoldsEveryContributionInWorldRankOrder) {
  std::vector<double> all;
  const double losses[3] = {1e16, 1.0, -1e16}, squares[3] = {4.0, 0.0, 5.0}, bubbles[3] = {0.1, 0.2, 0.3};
  for (int r = 0; r < 3; ++r) {
    StepContribution c;
    c.loss_sum = losses[r];
    c.sum_squares = squares[r];
    c.bubble = bubbles[r];
    c.stop_requests[2] = r == 1;  // SIGUSR1 on rank 1
    const std::vector<double> packed = pack(c);
    ASSERT_EQ(packed.size(), size_t(kContributionSize));
    all.insert(all.end(), packed.begin(), packed.end());
  }
  const StepTotals t = fold(all, 4.0);
  EXPECT_EQ(t.loss, ((0.0 + 1e16) + 1.0 - 1e16) / 4.0);
  EXPECT_EQ(t.grad_norm, 3.0);
  EXPECT_EQ(t.bubble, ((0.0 + 0.1) + 0.2 + 0.3) / 3.0);
  EXPECT_EQ(t.stop_signal, SIGUSR1);
  all[kContributionSize + 5] = 0;  // rank 1's request withdrawn
  EXPECT_EQ(fold(all, 4.0).stop_signal, 0);
}

TEST_F(PostValidation, WithoutRollbackSingleProcessIsBitwiseSynchronous) { check_without_rollback("", "a1"); }
TEST_F(PostValidation, WithoutRollbackPp2ZbH2IsBitwiseSynchronous) { check_without_rollback(kPp2ZbH2, "a2"); }
TEST_F(PostValidation, WithoutRollbackPp2ZbvIsBitwiseSynchronous) { check_without_rollback(kPp2Zbv, "a3"); }
TEST_F(PostValidation, WithoutRollbackPp2Dp2IsBitwiseSynchronous) { check_without_rollback(kPp2Dp2, "a4"); }

TEST_F(PostValidation, ClippedStepsRollBackToTheSynchronousBitsSingleProcess) { check_with_rollbacks("", "b1"); }
TEST_F(PostValidation, ClippedStepsRollBackToTheSynchronousBitsPp2Zbv) { check_with_rollbacks(kPp2Zbv, "b2"); }
// ZeRO-1: each optimistic update writes the rank's range into the exchanged arena, the
// masters are all-gathered into it, and a rollback exchanges back every rank's full masters.
TEST_F(PostValidation, ClippedStepsRollBackToTheSynchronousBitsPp2Dp2Zero1) {
  check_with_rollbacks(std::string(kPp2Dp2) + " parallel.zero=1", "b3");
}

// A NaN planted in one gradient of step 3 (on pp rank 1 under pp=2), skipped: the same
// bits as the synchronous skip run, one skip warning.
TEST_F(PostValidation, NonFiniteStepSkippedAsSynchronous) {
  for (const std::string& layout : {std::string(""), std::string(kPp2ZbH2)}) {
    const std::string fault = layout.empty() ? "nan_grad:h.0.mlp.fc.weight:3" : "nan_grad@1:h.3.attn.qkv.weight:3";
    const std::string tag = layout.empty() ? "c1" : "c2";
    auto [sync, pv] = both(layout, "training.on_nonfinite=skip", tag, "PPTRAIN_FAULTS=" + fault);
    if (HasFailure()) return;
    expect_same_bits(pv, sync, dir_->file(tag + "_pv"), dir_->file(tag + "_sync"), ranks_of(layout), tag);
    EXPECT_EQ(count_of(pv.result.output, "step skipped"), 1) << pv.result.output;
    EXPECT_EQ(count_of(pv.result.output, "warning: step 3: loss "), 1) << pv.result.output;
    EXPECT_EQ(count_of(pv.result.output, "step 3: post-validation rolled back"), 1) << pv.result.output;
  }
}

// Under stop the run ends with the synchronous run's line on every rank, naming step 4
// and the tensor, and a non-zero exit.
TEST_F(PostValidation, NonFiniteStepStopsWithTheSynchronousLineOnEveryRank) {
  const std::string env = "PPTRAIN_FAULTS=nan_grad@1:h.3.mlp.fc.weight:4";
  TrainRun sync = train(kPp2ZbH2, "", env), pv = train(kPp2ZbH2, "training.post_validation=true", env);
  EXPECT_NE(sync.result.exit_code, 0) << sync.result.output;
  EXPECT_NE(pv.result.exit_code, 0) << pv.result.output;
  for (int rank : {0, 1}) {
    std::smatch m;
    const std::regex error("\\[rank " + std::to_string(rank) + "\\] error: step 4: [^\n]*");
    ASSERT_TRUE(std::regex_search(sync.result.output, m, error)) << sync.result.output;
    const std::string line = m[0];
    EXPECT_NE(line.find("first non-finite gradient: h.3.mlp.fc.weight; stopping without saving"), std::string::npos)
        << line;
    EXPECT_EQ(count_of(pv.result.output, line), 1) << line << "\n" << pv.result.output;
  }
  EXPECT_EQ(pv.losses, sync.losses) << pv.result.output;
}

// Stop after 3 (checkpoint at 3), resume, 3 more: the same bits as 6 uninterrupted steps,
// all under post-validation with rollbacks.
TEST_F(PostValidation, CheckpointAndResumeEqualTheUninterruptedRun) {
  const std::string pv = "training.post_validation=true ";
  TrainRun whole = train(kPp2Zbv, pv + "--dump-final " + dir_->file("d_whole"));
  const std::string ck = " checkpoint.dir=" + dir_->file("d_ck") + " checkpoint.every=3";
  TrainRun first = train(kPp2Zbv, pv + ck + " --stop-after 3");
  TrainRun second = train(kPp2Zbv, pv + ck + " --dump-final " + dir_->file("d_resumed"));
  ASSERT_EQ(whole.result.exit_code, 0) << whole.result.output;
  ASSERT_EQ(first.result.exit_code, 0) << first.result.output;
  ASSERT_EQ(second.result.exit_code, 0) << second.result.output;
  EXPECT_EQ(read_file(dir_->file("d_ck/latest")), "step_00000006.h5\n");
  TrainRun joined = second;
  for (const auto& [step, loss] : first.losses) joined.losses[step] = loss;
  expect_same_bits(joined, whole, dir_->file("d_resumed"), dir_->file("d_whole"), 2, "resumed against whole");
  EXPECT_GT(count_of(whole.result.output, "rolled back"), 0) << whole.result.output;
}

// A stop signal to a post-validation run (pptrain train, pp=2, constant LR so that runs of
// different lengths share a schedule; SIGUSR1 to mpirun, which forwards it to the ranks,
// as the sbatch scripts ask Slurm for: test_run_signals.cpp says why not SIGTERM): it
// stops after a settled step N with that step's checkpoint and exit 75; resumed to N + 3 it
// ends bitwise where an uninterrupted synchronous N + 3 step run ends.
TEST_F(PostValidation, StopSignalSavesASettledCheckpoint) {
  TempDir out;
  const std::string ck = out.file("ck"), metrics = out.file("m.jsonl");
  const std::string constant_lr = " training.min_lr=1.0e-2 training.warmup_steps=0 ";
  const std::string command = mpirun(2) + pptrain_bin() + " train " + dir_->file("model.yaml") + " " + kPp2ZbH2 +
                              constant_lr + "training.post_validation=true training.steps=1000000 logging.every=1000" +
                              " checkpoint.dir=" + ck + " logging.metrics=" + metrics;
  // In the background; the signal once the metrics report step 1; the exit code last.
  auto r = run_command("(" + command + " > " + out.file("out.txt") + " 2>&1 & pid=$!; "
                       "until grep -q '\"step\": 1,' " + metrics + " 2>/dev/null; do sleep 0.05; done; "
                       "kill -USR1 $pid; wait $pid; echo exit=$?)", 120);
  const std::string output = read_file(out.file("out.txt"));
  ASSERT_NE(r.output.find("exit=75"), std::string::npos) << r.output << output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(output, m, std::regex("stopped by SIGUSR1 after step ([0-9]+)/"))) << output;
  const int n = std::stoi(m[1]);
  char name[32];
  std::snprintf(name, sizeof name, "step_%08d.h5\n", n);
  EXPECT_EQ(read_file(ck + "/latest"), name);

  const std::string steps = constant_lr + "training.steps=" + std::to_string(n + 3);
  TrainRun resumed = train(kPp2ZbH2, steps + " training.post_validation=true checkpoint.dir=" + ck +
                                         " --dump-final " + out.file("resumed"));
  TrainRun straight = train(kPp2ZbH2, steps + " --dump-final " + out.file("straight"));
  ASSERT_EQ(resumed.result.exit_code, 0) << resumed.result.output;
  ASSERT_EQ(straight.result.exit_code, 0) << straight.result.output;
  EXPECT_NE(resumed.result.output.find("resumed_from " + std::to_string(n)), std::string::npos)
      << resumed.result.output;
  const Verdict v = compare_exact(final_dump(out.file("resumed"), 2), final_dump(out.file("straight"), 2));
  EXPECT_TRUE(v.passed()) << v.failures("resumed after SIGUSR1 against uninterrupted");
}

// bf16 on the emulated cuda backend: backups and restores are device copies, and a restore
// leaves the bf16 working copies stale until AdamW or the refresh rewrites them. Every
// step clips at grad_clip 1 (rolled back); the final checkpoints hold the same bits.
TEST_F(PostValidation, Bf16OnTheEmulatedCudaBackendEqualsSynchronous) {
  ASSERT_TRUE(fs::exists(pptrain_emu_bin())) << pptrain_emu_bin() << " not built";
  TempDir out;
  std::string output;
  for (const char* pv : {"false", "true"}) {
    auto r = run_command(mpirun(2) + pptrain_emu_bin() + " train " + dir_->file("model.yaml") + " " + kPp2Zbv +
                             " device=cuda training.precision=bf16 training.grad_clip=1 training.post_validation=" +
                             pv + " checkpoint.dir=" + out.file(pv), 120);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    output = r.output;
  }
  EXPECT_GT(count_of(output, "redone clipped"), 0) << output;
  EXPECT_EQ(compare_checkpoints(out.file("true/step_00000006.h5"), out.file("false/step_00000006.h5")), "");
}
