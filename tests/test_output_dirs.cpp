// `pptrain train` creates the folders its outputs go to (logging.metrics, logging.trace,
// checkpoint.dir), as in a fresh checkout where runs/ does not exist yet; a folder that
// cannot be created is one line (per rank) naming the key and the path, and a non-zero exit.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "support/test_util.h"

using namespace pptrain::testing;
namespace fs = std::filesystem;

namespace {

std::string trainer() { return fs::absolute(pptrain_bin()).string(); }

// A tiny model over a Markov corpus in `dir`/d, with the given logging and checkpoint keys.
void write_config(const TempDir& dir, const std::string& pp, const std::string& outputs) {
  write_file(dir.file("c.yaml"),
             "model: {n_layer: 2, n_head: 2, d_model: 16, seq_len: 8, vocab_size: 16}\n"
             "parallel: {pp: " + pp + ", microbatches: 2}\n"
             "training: {steps: 2, micro_batch_size: 2, eval_every: 0}\n"
             "data: {train: 'd/train_*.bin'}\n" + outputs);
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST(OutputDirs, TrainCreatesTheFoldersOfItsOutputs) {
  TempDir dir;
  ASSERT_EQ(prepare_markov_corpus(dir.file("d"), 16, 4000).exit_code, 0);
  write_config(dir, "1",
               "logging: {every: 1, metrics: 'runs/a/b/metrics.jsonl', trace: 'runs/t/trace.json'}\n"
               "checkpoint: {dir: 'runs/ck/nested', every: 1}\n");
  CommandResult r = run_command("cd " + dir.path() + " && " + trainer() + " train c.yaml", 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir.file("runs/a/b/metrics.jsonl")));
  EXPECT_TRUE(fs::exists(dir.file("runs/t/trace.json")));
  EXPECT_TRUE(fs::exists(dir.file("runs/ck/nested/step_00000002.h5")));
}

TEST(OutputDirs, EveryRankWritesItsTracePartIntoTheCreatedFolder) {
  TempDir dir;
  ASSERT_EQ(prepare_markov_corpus(dir.file("d"), 16, 4000).exit_code, 0);
  write_config(dir, "2", "logging: {every: 1, metrics: 'out/m/metrics.jsonl', trace: 'out/trace/t.json'}\n");
  CommandResult r = run_command("cd " + dir.path() + " && " + mpirun(2) + trainer() + " train c.yaml", 90);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string trace = read_file(dir.file("out/trace/t.json"));
  EXPECT_NE(trace.find("rank 1 (dp 0 pp 1 tp 0)"), std::string::npos) << trace.substr(0, 300);
  EXPECT_TRUE(fs::exists(dir.file("out/m/metrics.jsonl")));
}

TEST(OutputDirs, AFolderThatCannotBeCreatedIsOneLineNamingKeyAndPath) {
  TempDir dir;
  ASSERT_EQ(prepare_markov_corpus(dir.file("d"), 16, 4000).exit_code, 0);
  write_file(dir.file("file"), "a file where a folder should go\n");
  struct Case {
    std::string outputs, expected;
  };
  for (const Case& c : {Case{"logging: {metrics: 'file/sub/metrics.jsonl'}\n",
                             "logging.metrics: cannot create directory 'file/sub': "},
                        Case{"logging: {trace: 'file/trace.json'}\n", "logging.trace: cannot create directory 'file': "},
                        Case{"checkpoint: {dir: 'file/ck'}\n", "checkpoint.dir: cannot create directory 'file/ck': "}}) {
    write_config(dir, "2", c.outputs);
    CommandResult r = run_command("cd " + dir.path() + " && " + mpirun(2) + trainer() + " train c.yaml", 60);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.exit_code, 124) << "timed out:\n" << r.output;
    // The ranks agree on the problem before any work, so each prints the same line once
    // (the first rank's MPI_Abort may cut another short).
    const size_t lines = count(r.output, c.expected);
    EXPECT_GE(lines, 1u) << r.output;
    EXPECT_LE(lines, 2u) << r.output;
    EXPECT_EQ(r.output.find("step 1"), std::string::npos) << "trained before failing:\n" << r.output;
  }
  // --dump's folder the same way (it was "internal error: filesystem error", exit 3).
  write_config(dir, "2", "");
  CommandResult r = run_command("cd " + dir.path() + " && " + mpirun(2) + trainer() + " train c.yaml --dump file/dump", 60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_GE(count(r.output, "--dump: cannot create directory 'file/dump': "), 1u) << r.output;
  EXPECT_EQ(count(r.output, "internal error"), 0u) << r.output;
}

// A metrics file that cannot take a line (a full disk; /dev/full answers every write with
// ENOSPC) stops the run with one line and a non-zero exit on every rank, instead of a
// metrics file that silently ends.
TEST(OutputDirs, AMetricsLineThatCannotBeWrittenStopsTheRun) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  TempDir dir;
  ASSERT_EQ(prepare_markov_corpus(dir.file("d"), 16, 4000).exit_code, 0);
  write_config(dir, "2", "logging: {every: 1, metrics: '/dev/full'}\n");
  CommandResult r = run_command("cd " + dir.path() + " && " + mpirun(2) + trainer() + " train c.yaml", 60);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "timed out:\n" << r.output;
  EXPECT_NE(r.output.find("error: logging.metrics: cannot write '/dev/full': No space left on device"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("step 2/2"), std::string::npos) << "went on:\n" << r.output;
}

// A parameter dump that cannot be written (its file a link to /dev/full, which takes the
// buffered bytes and fails their flush with ENOSPC) stops the run: the close is checked.
TEST(OutputDirs, ADumpThatCannotBeWrittenStopsTheRun) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  TempDir dir;
  ASSERT_EQ(prepare_markov_corpus(dir.file("d"), 16, 4000).exit_code, 0);
  write_config(dir, "1", "");
  fs::create_directories(dir.file("dump"));
  fs::create_symlink("/dev/full", dir.file("dump/step1.rank0.bin"));
  CommandResult r = run_command("cd " + dir.path() + " && " + trainer() + " train c.yaml --dump dump", 60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("error: dump/step1.rank0.bin: write failed: No space left on device"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("step 2/2"), std::string::npos) << "went on:\n" << r.output;
}
