// The dependency direction of DESIGN.md ("Dependency direction"): every `#include "..."` of
// every shipped source (src/ recursively, kernels/, emu/) is resolved as the compiler does
// (the including file's folder, then -Isrc, -Ikernels, -I.), the including file and the
// included one are mapped to their folder (a top folder under src/, where src/main.cpp
// belongs to cli, or 'kernels', or 'emu'), and an include the table below does not allow is
// printed, one line each:
//
//   src/core/log.h:12: folder 'core' may not include 'train' ("train/trainer.h"); core may include: nothing but itself
//
// System includes (<...>) are not checked. Of src/, only backend/cuda may include kernels/
// and emu/ (the SIMT emulator and the CUDA runtime/cuBLAS/NCCL shims of the emulated
// build); kernels/ may include core and emu, emu/ only core. No shipped source may include
// test code (tests/), whatever the table says: tests/ is on the include path of the tests'
// objects only, but the repository root is on everyone's (for "emu/..."), so "tests/..."
// would compile; an include that names a file under tests/, by either spelling
// ("tests/support/test_util.h" or "support/test_util.h"), is reported. A folder under
// src/ that is missing from the table is reported too, so a new folder must be added here
// with what it may include.
//
// The source root is PPTRAIN_SRC_DIR when set, else src/ of the working directory (tests
// run from the repository root), else the src/ beside the build folder holding this binary
// (BUILD/tests/test_layering); kernels/, emu/ and tests/ are its siblings. `make
// check-layering` runs the check on the tree alone.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "support/test_util.h"

namespace fs = std::filesystem;
using pptrain::testing::TempDir;

namespace {

// The folders each folder may include besides itself (DESIGN.md): the top folders of src/,
// then the two shipped folders outside it. 'tests' is in no row: see check_layering.
const std::map<std::string, std::set<std::string>>& may_include() {
  static const std::map<std::string, std::set<std::string>> table = {
      {"core", {}},
      {"pipeline", {"core"}},
      {"data", {"core"}},
      {"backend", {"core"}},  // backend/cuda also: kCudaExtras
      {"model", {"core", "backend"}},
      {"parallel", {"core", "backend"}},
      {"runtime", {"core", "backend", "model", "pipeline", "parallel"}},
      {"partition", {"core", "backend", "model", "pipeline", "parallel", "runtime"}},
      {"job", {"core", "pipeline", "data", "backend", "model", "parallel", "runtime", "partition"}},
      {"checkpoint", {"core", "backend", "model", "parallel", "data"}},
      {"train", {"core", "pipeline", "data", "backend", "model", "parallel", "runtime", "partition", "job",
                 "checkpoint"}},
      {"cli", {"core", "pipeline", "data", "backend", "model", "parallel", "runtime", "partition", "job",
               "checkpoint", "train"}},
      // kernels/: the emulator in the emulated build (launch.cuh picks it or the toolkit).
      {"kernels", {"core", "emu"}},
      {"emu", {"core"}},
  };
  return table;
}
// What src/backend/cuda may include beyond backend's row: the emulator's shims (emu/, the
// emulated build) and the kernels' headers (kernels/).
const std::set<std::string> kCudaExtras = {"emu", "kernels"};

// The order the table is printed in (DESIGN.md's).
const std::vector<std::string> kFolderOrder = {"core",      "pipeline", "data",       "backend", "model",
                                               "parallel",  "runtime",  "partition",  "job",     "checkpoint",
                                               "train",     "cli",      "kernels",    "emu"};

std::string allowed_text(const std::string& folder, bool cuda) {
  std::string out;
  for (const std::string& f : kFolderOrder)
    if (may_include().at(folder).count(f)) out += (out.empty() ? "" : ", ") + f;
  if (out.empty()) out = "nothing but itself";
  if (cuda) out += " (backend/cuda also: emu, kernels)";
  return out;
}

// `sub` lies inside `dir` (both absolute and normalised): its path relative to `dir`.
std::optional<fs::path> inside(const fs::path& sub, const fs::path& dir) {
  fs::path rel = sub.lexically_relative(dir);
  if (rel.empty() || *rel.begin() == "..") return std::nullopt;
  return rel;
}

// The top folder of a file under src/, given its path relative to src/.
std::string top_folder(const fs::path& rel) {
  if (rel == "main.cpp") return "cli";
  if (std::distance(rel.begin(), rel.end()) < 2) return "";  // a file at the top of src/
  return rel.begin()->string();
}

// The repository root (-I.); the shipped folders and tests/ lie below it.
struct Roots {
  fs::path root;
  fs::path src() const { return root / "src"; }          // -Isrc
  fs::path kernels() const { return root / "kernels"; }  // -Ikernels
  fs::path emu() const { return root / "emu"; }
  fs::path tests() const { return root / "tests"; }      // -Itests, test objects only
};

Roots roots_beside(const fs::path& src) {
  fs::path s = fs::absolute(src).lexically_normal();
  if (s.filename().empty()) s = s.parent_path();
  return {s.parent_path()};
}

// The folder a file belongs to ('kernels', 'emu', 'tests' or a top folder of src/), "" for
// a file at the top of src/ other than main.cpp.
std::string folder_of(const Roots& roots, const fs::path& file) {
  if (auto rel = inside(file, roots.src())) return top_folder(*rel);
  if (inside(file, roots.kernels())) return "kernels";
  if (inside(file, roots.emu())) return "emu";
  if (inside(file, roots.tests())) return "tests";
  return "(outside src/, kernels/, emu/ and tests/)";
}

// Where an include resolves, or "" when it resolves to no file. The shipped sources' path
// (the including file's folder, -Isrc, -Ikernels, -I.) first; then tests/, which is not on
// it, so that "support/test_util.h" is reported as test code rather than as a missing file.
std::string resolve(const Roots& roots, const fs::path& including_dir, const std::string& name) {
  for (const fs::path& dir : {including_dir, roots.src(), roots.kernels(), roots.root, roots.tests()}) {
    fs::path p = (dir / name).lexically_normal();
    if (fs::is_regular_file(p)) return folder_of(roots, p);
  }
  return "";
}

// Every offending include (and every folder missing from the table), one line each,
// sorted by file and line; empty when the shipped sources follow the table.
std::vector<std::string> check_layering(const Roots& roots) {
  static const std::set<std::string> kExtensions = {".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh"};
  static const std::regex kInclude(R"(^\s*#\s*include\s*"([^"]+)\")");
  std::vector<fs::path> files;
  for (const fs::path& dir : {roots.src(), roots.kernels(), roots.emu()})
    for (const auto& e : fs::recursive_directory_iterator(dir))
      if (e.is_regular_file() && kExtensions.count(e.path().extension().string())) files.push_back(e.path());
  std::sort(files.begin(), files.end());

  std::vector<std::string> out;
  std::set<std::string> unknown_reported;
  for (const fs::path& file : files) {
    const std::string shown = file.lexically_relative(roots.root).generic_string();
    const std::string folder = folder_of(roots, file);
    if (folder.empty()) {
      out.push_back(shown + ": a file at the top of src/ (only main.cpp may be there) belongs to no folder");
      continue;
    }
    if (!may_include().count(folder)) {
      if (unknown_reported.insert(folder).second)
        out.push_back(shown + ": folder '" + folder +
                      "' is not in the layering table of tests/test_layering.cpp; add it with the "
                      "folders it may include");
      continue;
    }
    const bool cuda = shown.rfind("src/backend/cuda/", 0) == 0;
    std::ifstream in(file);
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
      std::smatch m;
      if (!std::regex_search(line, m, kInclude)) continue;
      const std::string name = m[1];
      std::string target = resolve(roots, file.parent_path(), name);
      if (target.empty()) {
        // A file that does not exist (yet): its first path component names the folder.
        const std::string first = fs::path(name).begin()->string();
        if (may_include().count(first) || first == "tests") target = first;
      }
      const std::string where = shown + ":" + std::to_string(number) + ": ";
      if (target.empty()) {
        out.push_back(where + "\"" + name + "\" resolves to no file under src/, kernels/, emu/ or tests/");
        continue;
      }
      // Test code, whatever the table says.
      if (target == "tests") {
        out.push_back(where + "folder '" + folder + "' may not include 'tests' (\"" + name +
                      "\"); no source under src/, kernels/ or emu/ may include test code");
        continue;
      }
      if (target == folder || may_include().at(folder).count(target) || (cuda && kCudaExtras.count(target)))
        continue;
      out.push_back(where + "folder '" + folder + "' may not include '" + target + "' (\"" + name + "\"); " +
                    folder + " may include: " + allowed_text(folder, cuda));
    }
  }
  return out;
}

// The source root under test (see the top of this file).
fs::path source_root() {
  if (const char* env = std::getenv("PPTRAIN_SRC_DIR"); env && *env) return env;
  if (fs::is_regular_file("src/main.cpp")) return "src";
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    fs::path beside = fs::path(exe).parent_path().parent_path().parent_path() / "src";
    if (fs::is_regular_file(beside / "main.cpp")) return beside;
  }
  return "src";
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

// A copy of the shipped folders (src/, kernels/, emu/) in `dir`, with the real tree's tests/
// linked beside them, so an include of test code resolves as in the tree.
Roots copy_of_tree(const TempDir& dir) {
  const Roots real = roots_beside(source_root());
  const Roots copy{fs::path(dir.path())};
  fs::copy(real.src(), copy.src(), fs::copy_options::recursive);
  fs::copy(real.kernels(), copy.kernels(), fs::copy_options::recursive);
  fs::copy(real.emu(), copy.emu(), fs::copy_options::recursive);
  fs::create_directory_symlink(real.tests(), copy.tests());
  return copy;
}

// Writes a new source `rel` (relative to the copy's root) whose line 3 is `#include "name"`;
// returns that line number. A new file, so the tests do not depend on which sources exist.
int plant(const Roots& copy, const std::string& rel, const std::string& name) {
  fs::create_directories((copy.root / rel).parent_path());
  pptrain::testing::write_file((copy.root / rel).string(),
                               "// planted by tests/test_layering.cpp\n#pragma once\n#include \"" + name + "\"\n");
  return 3;
}

bool has_line_starting(const std::vector<std::string>& lines, const std::string& prefix) {
  return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.rfind(prefix, 0) == 0; });
}

}  // namespace

TEST(Layering, EveryShippedIncludeFollowsTheDependencyTable) {
  const Roots roots = roots_beside(source_root());
  ASSERT_TRUE(fs::is_regular_file(roots.src() / "main.cpp")) << roots.src() << " is not pptrain's src/";
  // Each shipped folder is there to be checked (a moved one would pass unchecked).
  ASSERT_TRUE(fs::is_regular_file(roots.kernels() / "launch.cuh")) << roots.kernels() << " is not pptrain's kernels/";
  ASSERT_TRUE(fs::is_regular_file(roots.emu() / "emu.h")) << roots.emu() << " is not pptrain's emu/";
  const std::vector<std::string> offending = check_layering(roots);
  if (!offending.empty())
    ADD_FAILURE() << offending.size() << " line(s) against the dependency table of DESIGN.md "
                  << "(tests/test_layering.cpp):\n" << joined(offending);
}

// Each planted include is reported, naming its file and line, and nothing else changes.
TEST(Layering, PlantedIncludesAgainstTheTableAreReported) {
  struct Plant {
    std::string file, include, expected;  // expected: the start of the message after "FILE:LINE: "
  };
  const std::vector<Plant> plants = {
      {"src/core/planted.h", "train/trainer.h", "folder 'core' may not include 'train' (\"train/trainer.h\")"},
      // Relative to the including file's folder, or from the root, as the compiler resolves it.
      {"src/core/planted.h", "../runtime/executor.h",
       "folder 'core' may not include 'runtime' (\"../runtime/executor.h\")"},
      {"src/core/planted.h", "src/train/trainer.h", "folder 'core' may not include 'train' (\"src/train/trainer.h\")"},
      // kernels/ and the emulator are for src/backend/cuda only.
      {"src/model/planted.cpp", "launch.cuh", "folder 'model' may not include 'kernels' (\"launch.cuh\")"},
      {"src/parallel/planted.cpp", "emu/nccl_emu.h", "folder 'parallel' may not include 'emu' (\"emu/nccl_emu.h\")"},
      {"src/backend/cpu/planted.cpp", "emu/emu.h", "folder 'backend' may not include 'emu' (\"emu/emu.h\")"},
      // The emulator sits below the kernels and the backend.
      {"emu/planted.h", "launch.cuh", "folder 'emu' may not include 'kernels' (\"launch.cuh\")"},
      {"emu/planted.h", "backend/ops.h", "folder 'emu' may not include 'backend' (\"backend/ops.h\")"},
      {"kernels/planted.cuh", "backend/ops.h", "folder 'kernels' may not include 'backend' (\"backend/ops.h\")"},
      // Test code is for tests: from every shipped folder, by either spelling, existing or not.
      {"src/backend/cuda/planted.cpp", "support/test_util.h",
       "folder 'backend' may not include 'tests' (\"support/test_util.h\")"},
      {"src/core/planted.h", "tests/support/test_util.h",
       "folder 'core' may not include 'tests' (\"tests/support/test_util.h\")"},
      {"src/train/planted.cpp", "tests/not_yet_written.h",
       "folder 'train' may not include 'tests' (\"tests/not_yet_written.h\")"},
      {"kernels/planted.cuh", "support/test_util.h",
       "folder 'kernels' may not include 'tests' (\"support/test_util.h\")"},
      {"emu/planted.h", "tests/support/test_util.h",
       "folder 'emu' may not include 'tests' (\"tests/support/test_util.h\")"},
      // main.cpp is cli's; a header that does not exist (yet) still names its folder.
      {"src/pipeline/planted.h", "cli/not_yet_written.h",
       "folder 'pipeline' may not include 'cli' (\"cli/not_yet_written.h\")"},
  };
  const std::vector<std::string> before = check_layering(roots_beside(source_root()));
  for (const Plant& p : plants) {
    SCOPED_TRACE(p.file + " includes \"" + p.include + "\"");
    TempDir dir;
    const Roots copy = copy_of_tree(dir);
    const int line = plant(copy, p.file, p.include);
    const std::vector<std::string> after = check_layering(copy);
    const std::string prefix = p.file + ":" + std::to_string(line) + ": " + p.expected;
    EXPECT_TRUE(has_line_starting(after, prefix)) << "expected a line starting with\n  " << prefix << "\ngot:\n"
                                                  << joined(after);
    EXPECT_EQ(after.size(), before.size() + 1) << joined(after);
  }
}

TEST(Layering, AllowedIncludesAreNotReported) {
  TempDir dir;
  const Roots copy = copy_of_tree(dir);
  const std::vector<std::string> before = check_layering(copy);
  // backend/cuda: the emulator's shims and the kernels; kernels: core and the emulator;
  // emu: core; a folder: itself, by any spelling; train: anything but cli; cli: anything.
  plant(copy, "src/backend/cuda/planted_emu.cpp", "emu/nccl_emu.h");
  plant(copy, "src/backend/cuda/planted_kernels.cpp", "launch.cuh");
  plant(copy, "kernels/planted_emu.cuh", "emu/emu.h");
  plant(copy, "kernels/planted_core.cuh", "core/error.h");
  plant(copy, "emu/planted_core.h", "core/bf16.h");
  plant(copy, "emu/planted_same_folder.h", "fiber.h");
  plant(copy, "src/core/planted_same_folder.h", "error.h");
  plant(copy, "src/core/sub/planted_relative.h", "../error.h");
  plant(copy, "src/core/planted_from_root.h", "src/core/error.h");
  plant(copy, "src/train/planted.cpp", "checkpoint/planted_target.h");
  plant(copy, "src/cli/planted.cpp", "train/planted.cpp");
  EXPECT_EQ(check_layering(copy), before);
}

TEST(Layering, AFolderMissingFromTheTableIsReported) {
  TempDir dir;
  const Roots copy = copy_of_tree(dir);
  plant(copy, "src/scheduler/queue.h", "core/error.h");
  const std::vector<std::string> after = check_layering(copy);
  EXPECT_TRUE(has_line_starting(after, "src/scheduler/queue.h: folder 'scheduler' is not in the layering table"))
      << joined(after);
}
