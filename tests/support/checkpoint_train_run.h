// Runs of tests/mpi/checkpoint_train (Trainer + CheckpointManager under mpirun with a
// timeout) on the small Markov model the checkpoint tests share, with each step's loss and
// the step a run resumed from read off its output.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <regex>
#include <string>

#include "support/markov_model.h"
#include "support/mpi_programs.h"
#include "support/test_util.h"

namespace pptrain::testing {

struct TrainRun {
  CommandResult result;
  std::map<int, std::string> losses;  // step -> loss as printed (%.17g)
  int resumed_from = -1;
};

// DIR/model.yaml: 4 blocks (pp=4 and pp=2 with 2 stages per rank have a block per stage);
// warmup and a cosine decay make the LR depend on the step.
inline void write_checkpoint_train_model(TempDir& dir) {
  MarkovModel m;
  m.parallel = "microbatches: 4";
  m.training = "steps: 6, min_lr: 1.0e-3, warmup_steps: 2, grad_clip: 1.0";
  auto r = write_markov_model(dir, m);
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

// checkpoint_train on `ranks` ranks with `config` and `args` after it, `env` before it.
inline TrainRun run_checkpoint_train(const std::string& config, int ranks, const std::string& args,
                                     const std::string& env = "", int timeout_s = 120) {
  const std::string program = mpi_test_program("checkpoint_train");
  TrainRun run;
  if (!std::filesystem::exists(program)) {
    run.result = {-1, program + " is missing: build it with make (mk/mpi_tests.mk)"};
    return run;
  }
  const std::string launcher = ranks > 1 ? mpirun(ranks) : std::string("OMP_NUM_THREADS=1 ");
  run.result = run_command(env + " " + launcher + program + " " + config + " " + args, timeout_s);
  static const std::regex step(R"(step (\d+) loss (\S+))"), resumed(R"(resumed_from (\d+))");
  for (std::sregex_iterator it(run.result.output.begin(), run.result.output.end(), step), end; it != end; ++it)
    run.losses[std::stoi((*it)[1])] = (*it)[2];
  std::smatch m;
  if (std::regex_search(run.result.output, m, resumed)) run.resumed_from = std::stoi(m[1]);
  return run;
}

// The checkpoint tests' fixture: one temporary folder per suite with the model of
// write_checkpoint_train_model, and checkpoint_train runs on it.
class CheckpointTrainSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    write_checkpoint_train_model(*dir_);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  // Runs checkpoint_train on `ranks` ranks with `args` after the config.
  static TrainRun train(int ranks, const std::string& args, const std::string& env = "", int timeout_s = 120) {
    return run_checkpoint_train(dir_->file("model.yaml"), ranks, args, env, timeout_s);
  }

  inline static TempDir* dir_ = nullptr;
};

}  // namespace pptrain::testing
