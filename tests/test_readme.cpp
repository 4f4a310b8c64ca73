// Every command of README.md's ```sh blocks runs as written: in the README's order (later
// examples use what earlier ones wrote, as for a reader trying them), each under a
// timeout, from a fresh directory holding only what the README says to prepare:
//   build/      the binaries (a link to the build under test)
//   configs/    the repository's configs
//   book.txt notes.txt   "your" text files (Training)
//   data/fortunes        the demo's corpus, which `make run` prepares
//   my.yaml     "a config of yours": the README's own config example
//   gpt2_124M.bin        "an llm.c model": a small file in llm.c's format
//   tiny-llama/          "a LlamaForCausalLM directory" of configs/llama_tiny.yaml's shape:
//                        one step of that config, exported by pptrain export-hf
// with the switches the README gives for mpirun as root on a small machine exported
// (OMPI_ALLOW_RUN_AS_ROOT..., oversubscription), and one OpenMP thread per process: the
// suite runs several test binaries at once on few cores, where a second thread only costs
// (the demo's 100 steps took 22.7 CPU-s on one thread and 29.9 on two), and the commands are
// checked for what they do, not for their speed.
// Not run here: `make ...` (the entry points: .ci/run runs `make test`, and
// tests/test_fresh_build.cpp the first `make` and `make run`) and `sbatch ...`
// (tests/test_slurm.cpp submits the slurm/ scripts to a throwaway Slurm cluster).
// Runs from the repository root.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "support/test_util.h"

using namespace pptrain::testing;
namespace fs = std::filesystem;

namespace {

struct Block {
  std::string language;            // after the opening ```
  int line = 0;                    // of the opening fence, 1-based
  std::vector<std::string> lines;  // between the fences
};

std::vector<Block> fenced_blocks(const std::string& markdown) {
  std::vector<Block> blocks;
  std::istringstream in(markdown);
  std::string l;
  bool inside = false;
  for (int n = 1; std::getline(in, l); ++n) {
    if (l.rfind("```", 0) == 0) {
      if (!inside) blocks.push_back({l.substr(3), n, {}});
      inside = !inside;
    } else if (inside) {
      blocks.back().lines.push_back(l);
    }
  }
  return blocks;
}

// The shell commands of a block: continuation lines joined, blank and comment lines dropped.
std::vector<std::string> commands_of(const Block& b) {
  std::vector<std::string> out;
  std::string pending;
  for (const std::string& l : b.lines) {
    if (!l.empty() && l.back() == '\\') {
      pending += l.substr(0, l.size() - 1);
      continue;
    }
    std::string command = pending + l;
    pending.clear();
    size_t first = command.find_first_not_of(" \t");
    if (first == std::string::npos || command[first] == '#') continue;
    out.push_back(command.substr(first));
  }
  return out;
}

std::string first_word(const std::string& command) { return command.substr(0, command.find(' ')); }

// A GPT-2 model file in llm.c's layout (header of 256 int32, then the 16 fp32 tensors in
// llm.c's order), small: T=8, V=Vp=16, 1 layer, 2 heads, C=8.
void write_llmc_model(const std::string& path) {
  const int32_t T = 8, V = 16, Vp = 16, L = 1, NH = 2, C = 8;
  int32_t header[256] = {20240326, 3, T, V, L, NH, C, Vp};
  const size_t sizes[] = {size_t(Vp) * C, size_t(T) * C, L * C, L * C, size_t(L) * 3 * C * C, L * 3 * C,
                          size_t(L) * C * C, L * C, L * C, L * C, size_t(L) * 4 * C * C, L * 4 * C,
                          size_t(L) * C * 4 * C, L * C, C, C};
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header), sizeof header);
  uint32_t state = 1;
  for (size_t n : sizes)
    for (size_t i = 0; i < n; ++i) {
      state = state * 1664525u + 1013904223u;
      float x = float(int(state >> 24) - 128) / 1024.0f;
      out.write(reinterpret_cast<const char*>(&x), sizeof x);
    }
}

std::string some_text(const std::string& topic, int lines) {
  std::string text;
  for (int i = 0; i < lines; ++i)
    text += "Line " + std::to_string(i) + " of the " + topic + ": a pipeline sends activations forward and "
            "gradients back, one microbatch at a time.\n";
  return text;
}

// The directory the README's commands run in (see the top of this file).
void prepare_reader_directory(const TempDir& dir, const std::string& config_example) {
  fs::create_directory_symlink(fs::absolute(pptrain_bin()).parent_path(), dir.file("build"));
  fs::copy("configs", dir.file("configs"), fs::copy_options::recursive);
  write_file(dir.file("book.txt"), some_text("book", 400));
  write_file(dir.file("notes.txt"), some_text("notes", 100));
  write_file(dir.file("my.yaml"), config_example);
  write_llmc_model(dir.file("gpt2_124M.bin"));
  // The demo's corpus as `make run` prepares it (scripts/demo.sh), from the same files
  // where fortune-mod is installed.
  std::string corpus = "/usr/share/games/fortunes/fortunes /usr/share/games/fortunes/literature "
                       "/usr/share/games/fortunes/riddles";
  if (!fs::exists("/usr/share/games/fortunes/fortunes")) {
    write_file(dir.file("fortunes.txt"), some_text("fortunes", 800));
    corpus = dir.file("fortunes.txt");
  }
  const std::string pptrain = fs::absolute(pptrain_bin()).string();
  CommandResult r = run_command(pptrain + " prepare-data --text " + corpus + " --out " + dir.file("data/fortunes"), 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command("cd " + dir.path() + " && " + pptrain + " train configs/llama_tiny.yaml training.steps=1 " +
                      "training.eval_every=0 logging.sample_tokens=0 checkpoint.dir=" + dir.file("llama-init") + " && " +
                      pptrain + " export-hf " + dir.file("llama-init/step_00000001.h5") + " " + dir.file("tiny-llama"),
                  120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace

TEST(Readme, EveryShellCommandRunsAsWritten) {
  const std::string readme = read_file("README.md");
  ASSERT_FALSE(readme.empty()) << "run from the repository root";
  std::vector<Block> blocks = fenced_blocks(readme);

  std::string config_example;  // the README's six-section config
  for (const Block& b : blocks)
    if (b.language == "yaml" && config_example.empty())
      for (const std::string& l : b.lines) config_example += l + "\n";
  ASSERT_NE(config_example.find("data:"), std::string::npos) << "no config example in README.md";

  TempDir dir;
  prepare_reader_directory(dir, config_example);
  if (HasFatalFailure()) return;
  const std::string env =
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1; "
      "export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM OMPI_MCA_rmaps_base_oversubscribe OMP_NUM_THREADS; ";

  int ran = 0;
  for (const Block& b : blocks) {
    if (b.language != "sh") continue;
    for (const std::string& command : commands_of(b)) {
      const std::string program = first_word(command);
      if (program == "make" || program == "sbatch") continue;  // covered elsewhere, see the top
      const auto start = std::chrono::steady_clock::now();
      CommandResult r = run_command("cd " + dir.path() + " && " + env + command, 180);
      std::printf("README.md line %d, %.1f s: %s\n", b.line,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), command.c_str());
      ++ran;
      EXPECT_EQ(r.exit_code, 0) << "README.md line " << b.line << ": " << command << "\n" << r.output;
    }
  }
  EXPECT_GE(ran, 15) << "fewer README commands than expected were found";
  // The Training example trained with the demo config, whose metrics file goes to runs/demo/.
  EXPECT_TRUE(fs::exists(dir.file("runs/demo/metrics.jsonl")));
}

// The README's tour goes in a newcomer's order: prepare data, train, a pipeline on 4 ranks,
// checkpoint and resume, import a Hugging Face model, GPUs. Each step is found by the first
// command of its ```sh blocks that does it, and those come in that order.
TEST(Readme, TourIsInOrder) {
  const std::string readme = read_file("README.md");
  ASSERT_FALSE(readme.empty()) << "run from the repository root";
  const std::vector<std::pair<std::string, std::string>> steps = {
      {"prepare data", "build/pptrain prepare-data "},
      {"train", "build/pptrain train "},
      {"a pipeline on 4 ranks", "mpirun -np 4 build/pptrain train "},
      {"resume", "checkpoint.dir="},
      {"import a Hugging Face model", "build/pptrain import-hf "},
      {"GPUs", "make gpu-bundle"}};
  std::vector<std::string> commands;
  for (const Block& b : fenced_blocks(readme))
    if (b.language == "sh")
      for (const std::string& c : commands_of(b)) commands.push_back(c);
  size_t previous = 0;
  for (const auto& [step, marker] : steps) {
    size_t at = previous;
    while (at < commands.size() && commands[at].find(marker) == std::string::npos) ++at;
    ASSERT_LT(at, commands.size()) << "the tour's step '" << step << "' (a command with '" << marker
                                   << "') is missing from README.md, or comes before the step it follows";
    previous = at;
  }
}
