// What the run-control tests share (tests/test_run_control.cpp, tests/test_run_signals.cpp):
// the corpus and config every test trains, through the pptrain executable alone or under
// mpirun with pp = ranks, and what they read back (dump files, the checkpoint `latest`
// names).
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "support/checkpoint_util.h"
#include "support/markov_model.h"
#include "support/test_util.h"

namespace pptrain::testing {

// The corpus and the model every test trains: 4 blocks (2 per stage under pp=2).
class RunControl : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    MarkovModel m;
    m.parallel = "microbatches: 4";
    m.training = "steps: 6, min_lr: 1.0e-2, warmup_steps: 0";
    m.data = "shuffle: true";
    m.corpus_tokens = 8000;
    m.corpus_seed = 1337;
    auto r = write_markov_model(*dir_, m, "c.yaml");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { delete dir_; }

  // `pptrain train` on the test config with `overrides`, on `ranks` processes (pp=ranks).
  static std::string train(int ranks, const std::string& overrides) {
    const std::string launch = ranks > 1 ? mpirun(ranks) : std::string("OMP_NUM_THREADS=1 ");
    const std::string layout = ranks > 1 ? " parallel.pp=" + std::to_string(ranks) : "";
    return launch + pptrain_bin() + " train " + dir_->file("c.yaml") + layout + " " + overrides;
  }

  static inline TempDir* dir_ = nullptr;
};

// The --dump files of `ranks` ranks after `step` steps, in rank order.
inline std::vector<std::string> dump_files(const std::string& dir, int step, int ranks) {
  std::vector<std::string> files;
  for (int rank = 0; rank < ranks; ++rank)
    files.push_back(dir + "/step" + std::to_string(step) + ".rank" + std::to_string(rank) + ".bin");
  return files;
}

// The file name `latest` in checkpoint directory `dir` names ("" when there is none).
inline std::string latest_of(const std::string& dir) {
  std::string text = std::filesystem::exists(dir + "/latest") ? read_file(dir + "/latest") : "";
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return std::filesystem::path(text).filename();
}

}  // namespace pptrain::testing
