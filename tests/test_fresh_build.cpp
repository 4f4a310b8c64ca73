// The first `make` on a machine without the packages: the flags that pkg-config gives for
// the packages must be read after `make` installed them, not when make started. A copy of
// the working tree is built with stand-ins, so the test takes seconds:
//  - pkg-config answers nothing (exit 1) until the deps step has run, then delegates to the
//    real one;
//  - scripts/install_deps.sh (the deps step) only "installs" by creating a marker file;
//  - the compilers (mpicxx, nvcc and the fuzz targets' clang++-14) record their command
//    line and create their output.
// Checked: the first call succeeds and every compile and link line has the packages'
// flags; a build step asked for before the packages exist stops with one clear line; the
// first `make run` builds only build/pptrain before it trains; a test that fails to compile
// costs `make test` only that test. Runs from the repository root.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "support/test_util.h"

using namespace pptrain::testing;
namespace fs = std::filesystem;

namespace {


std::vector<std::string> lines_of(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

void write_script(const std::string& path, const std::string& body) {
  write_file(path, "#!/bin/sh\n" + body);
  fs::permissions(path, fs::perms::owner_all, fs::perm_options::add);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// A copy of the working tree (no build outputs) with the stand-ins; `make` runs in it.
class FreshMachine {
 public:
  // `broken`: a source the stand-in compiler fails on, as on a compile error.
  explicit FreshMachine(const std::string& broken = "") {
    const std::string real = run_command("command -v pkg-config", 10).output;
    real_pkg_config_ = real.substr(0, real.find('\n'));
    repo_ = dir_.file("repo");
    fs::create_directories(repo_);
    CommandResult copy = run_command("tar -C . --exclude=./.git --exclude='./build*' --exclude=./data "
                                     "--exclude=./runs -cf - . | tar -C " + repo_ + " -xf -", 60);
    if (copy.exit_code != 0) throw std::runtime_error("copying the tree failed: " + copy.output);
    const std::string bin = dir_.file("bin"), log = dir_.file("commands.log"), marker = dir_.file("installed");
    fs::create_directories(bin);
    write_script(bin + "/pkg-config", "[ -e " + marker + " ] || exit 1\nexec " + real_pkg_config_ + " \"$@\"\n");
    // The compilers: one line per call, the output file created (an executable script
    // for a linked binary, so `make run` can go on to "train").
    const std::string compiler =
        "echo \"$(basename \"$0\") $*\" >> " + log + "\n" +
        (broken.empty() ? "" : "case \" $* \" in *\" " + broken + " \"*) echo \"" + broken +
                                   ": error: stand-in compile error\" >&2; exit 1 ;; esac\n") +
        "out=; prev=\n"
        "for a in \"$@\"; do [ \"$prev\" = -o ] && out=$a; prev=$a; done\n"
        "[ -n \"$out\" ] || exit 0\n"
        "case $out in *.o) : > \"$out\" ;; *) printf '#!/bin/sh\\necho \"stand-in $*\"\\n' > \"$out\"; "
        "chmod +x \"$out\" ;; esac\n";
    write_script(bin + "/mpicxx", compiler);
    write_script(bin + "/nvcc", compiler);
    write_script(bin + "/clang++-14", compiler);  // the fuzz targets' compiler (mk/fuzz.mk)
    write_script(repo_ + "/scripts/install_deps.sh", "echo \"deps $*\" >> " + log + "\ntouch " + marker + "\n");
    path_ = "PATH=" + bin + ":$PATH";
    log_ = log;
  }

  bool real_pkg_config_knows_the_packages() const {
    return !real_pkg_config_.empty() &&
           run_command(real_pkg_config_ + " --exists hdf5-openmpi yaml-cpp openblas", 10).exit_code == 0;
  }
  std::string real_pkg_config(const std::string& args) const {
    return run_command(real_pkg_config_ + " " + args, 10).output;
  }
  // `make ARGS` in the copy, as a newcomer types it (the stand-ins first on PATH).
  CommandResult make(const std::string& args) const {
    return run_command("cd " + repo_ + " && " + path_ + " NVCC=" + dir_.file("bin/nvcc") + " make " + args, 300);
  }
  std::vector<std::string> commands() const { return lines_of(read_file(log_)); }
  // The recorded command that wrote `output` (empty if none).
  std::string command_writing(const std::string& output) const {
    for (const std::string& c : commands())
      if (c.find(" -o " + output + " ") != std::string::npos || ends_with(c, " -o " + output)) return c;
    return "";
  }

 private:
  TempDir dir_;
  std::string repo_, path_, log_, real_pkg_config_;
};

// Every flag pkg-config gives for the packages appears in `command`.
void expect_flags(const std::string& command, const std::vector<std::string>& flags, const std::string& what) {
  ASSERT_FALSE(command.empty()) << what << " never ran";
  for (const std::string& f : flags)
    EXPECT_NE((" " + command + " ").find(" " + f + " "), std::string::npos)
        << what << " lacks " << f << " (the packages' flags were read before they were installed):\n"
        << command;
}

void first_make_builds_with_the_packages_flags(const std::string& cuda) {
  FreshMachine m;
  if (!m.real_pkg_config_knows_the_packages()) GTEST_SKIP() << "pkg-config does not know the packages here";
  const std::vector<std::string> cflags = split_words(m.real_pkg_config("--cflags hdf5-openmpi yaml-cpp openblas"));
  const std::vector<std::string> libs = split_words(m.real_pkg_config("--libs hdf5-openmpi yaml-cpp openblas"));
  ASSERT_FALSE(libs.empty());

  CommandResult r = m.make("CUDA=" + cuda);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> commands = m.commands();
  ASSERT_FALSE(commands.empty());
  EXPECT_EQ(commands.front().rfind("deps", 0), 0u) << "something ran before the deps step: " << commands.front();
  expect_flags(m.command_writing("build/obj/src/main.o"), cflags, "the compile of src/main.cpp");
  expect_flags(m.command_writing("build/pptrain"), libs, "the link of build/pptrain");
  expect_flags(m.command_writing("build/tests/test_config"), libs, "the link of build/tests/test_config");
  if (cuda == "1") {
    const std::string link = m.command_writing("build/pptrain");
    EXPECT_NE(link.find("-lcublas"), std::string::npos) << link;
    EXPECT_NE(m.command_writing("build/nvcc/kernels/layernorm.o").find("nvcc "), std::string::npos);
  }
}

}  // namespace

TEST(FreshMachine, FirstMakeBuildsWithThePackagesFlags) {
  first_make_builds_with_the_packages_flags("0");
}

TEST(FreshMachine, FirstMakeWithCudaBuildsWithThePackagesFlags) {
  // mk/cuda.mk links build/pptrain with its own library list; it must hold them too.
  first_make_builds_with_the_packages_flags("1");
}

TEST(FreshMachine, ABuildStepBeforeThePackagesStopsWithOneClearLine) {
  FreshMachine m;
  CommandResult r = m.make("CUDA=0 build/pptrain");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("pkg-config finds none of: hdf5-openmpi yaml-cpp openblas. Run `make deps` first"),
            std::string::npos)
      << r.output;
  for (const std::string& c : m.commands()) ADD_FAILURE() << "ran without the packages' flags: " << c;
}

TEST(FreshMachine, FirstMakeRunBuildsOnlyThePptrainBinaryThenTrains) {
  FreshMachine m;
  if (!m.real_pkg_config_knows_the_packages()) GTEST_SKIP() << "pkg-config does not know the packages here";
  if (!fs::exists("/usr/share/games/fortunes/fortunes")) GTEST_SKIP() << "the demo corpus (fortunes-min) is missing";
  CommandResult r = m.make("CUDA=0 run");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The phases in order, the last one running the (stand-in) trainer.
  size_t at = 0;
  for (const char* phase : {"[1/4] deps", "[2/4] build", "[3/4] data", "[4/4] training", "stand-in train "}) {
    size_t found = r.output.find(phase, at);
    EXPECT_NE(found, std::string::npos) << "no '" << phase << "' after the previous phase:\n" << r.output;
    if (found != std::string::npos) at = found;
  }
  ASSERT_FALSE(m.commands().empty());
  EXPECT_EQ(m.commands().front(), "deps run") << "make run installs the run set first";
  expect_flags(m.command_writing("build/pptrain"), split_words(m.real_pkg_config("--libs hdf5-openmpi yaml-cpp openblas")),
               "the link of build/pptrain");
  for (const std::string& c : m.commands())
    EXPECT_EQ(c.find("build/obj/tests/"), std::string::npos) << "make run built a test: " << c;
}

TEST(FreshMachine, ATestThatFailsToCompileCountsAsOneFailureAndMakeTestStillEndsWithItsSummary) {
  FreshMachine m("tests/test_config.cpp");
  if (!m.real_pkg_config_knows_the_packages()) GTEST_SKIP() << "pkg-config does not know the packages here";
  CommandResult r = m.make("CUDA=0 test");
  EXPECT_NE(r.exit_code, 0) << r.output;
  // The stand-in test binaries print no results: the one that failed to build is the only
  // failure, and every other test binary was still built (and run).
  std::string out = r.output;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  const std::string tail = out.substr(out.find_last_of('\n') + 1);
  EXPECT_TRUE(tail == "0 passed, 1 failed" || out.find("\n0 passed, 1 failed\n") != std::string::npos) << r.output;
  EXPECT_NE(r.output.find("test_config"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(not built)"), std::string::npos) << r.output;
  EXPECT_FALSE(m.command_writing("build/tests/test_train").empty()) << "make test stopped at the first error";
}

// OMP_NUM_THREADS (MPI scripts often export 1) does not limit the build's jobs: make takes
// the cores nproc gives without it (derived here the same way, so any machine agrees).
TEST(MakeEntry, OmpNumThreadsDoesNotLimitTheBuildsJobs) {
  CommandResult cores = run_command("env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc");
  ASSERT_EQ(cores.exit_code, 0) << cores.output;
  const int n = std::stoi(cores.output);
  if (n < 2) GTEST_SKIP() << "one core: nothing to tell apart";
  CommandResult r = run_command("OMP_NUM_THREADS=1 make -n run 2>&1");
  EXPECT_NE(r.output.find("build/pptrain, " + std::to_string(n) + " jobs in parallel"), std::string::npos) << r.output;
}
