// Shared test helpers: temporary directories, running the pptrain binary (alone or
// under mpirun, always with a timeout so a hang fails), numeric comparisons.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace pptrain::testing {

struct CommandResult {
  int exit_code;       // 124 when the timeout fired
  std::string output;  // stdout and stderr together
};

// Runs `command` with /bin/sh (no stdin), killed after `timeout_s` seconds; then the
// output ends with which of its processes were still running and where (the ranks of an
// mpirun job by rank, with backtraces when gdb is installed). tests/support/run_command.cpp
CommandResult run_command(const std::string& command, int timeout_s = 120);

// Path of the pptrain executable under test ($PPTRAIN_BIN, else build/pptrain).
std::string pptrain_bin();
// The folder pptrain_bin() is in: the build folder the scripts and bench/ binaries are
// taken from.
std::string build_dir();
// The trainer with the emulated cuda backend, beside pptrain_bin().
std::string pptrain_emu_bin();

// The trainer that runs device: cuda in a test: pptrain-emu (the emulated cuda backend); in
// a test compiled with PPTRAIN_REAL_DEVICE (build/gpu-tests, mk/gpu_tests.mk) the real
// build, pptrain itself. Inline: this header is compiled with each test's own flags.
inline std::string cuda_trainer_bin() {
#ifdef PPTRAIN_REAL_DEVICE
  return pptrain_bin();
#else
  return pptrain_emu_bin();
#endif
}

// "mpirun -np N" with the switches that let it run as root and oversubscribed, one
// OpenMP thread per rank.
std::string mpirun(int ranks);

// Writes a synthetic corpus from an order-`order` Markov source over `vocab` symbols
// (train and val shards, entropy.txt) to `dir` with `pptrain prepare-data --markov`.
CommandResult prepare_markov_corpus(const std::string& dir, int vocab, int tokens, uint64_t seed = 1337,
                                    int order = 1);

// A fresh directory under /tmp, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void write_file(const std::string& path, const std::string& text);
std::string read_file(const std::string& path);
// The whitespace-separated words of `text` (command-line overrides written as one string).
std::vector<std::string> split_words(const std::string& text);
// The lines of `text` without their '\n' (a command's output, read line by line).
std::vector<std::string> split_lines(const std::string& text);

// Values of `key` in a JSON Lines text (the metrics file), for lines that have it.
std::vector<double> json_values(const std::string& jsonl, const std::string& key);
// The first number after "key": in `json` (a benchmark's one-line JSON object), or NaN.
double json_number(const std::string& json, const std::string& key);

// Max over i of |a-b| / max(|b|, floor).
double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b, double floor = 1e-6);

// The largest element of a non-empty vector (a makespan over ranks, a rank's peak bytes).
double max_of(const std::vector<double>& x);

}  // namespace pptrain::testing
