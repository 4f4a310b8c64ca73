// Build checks of the real CUDA kernels: every kernels/*.cu compiles with nvcc for sm_90
// (skipped, with the reason printed, where nvcc is absent), and `<<<...>>>` appears only in
// the launch helper, so both builds share every call site. Runs from the repository root.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/test_util.h"

namespace fs = std::filesystem;
using pptrain::testing::run_command;
using pptrain::testing::TempDir;

namespace {

std::vector<fs::path> files_in(const fs::path& dir, const std::vector<std::string>& extensions,
                               bool recursive) {
  std::vector<fs::path> out;
  if (!fs::exists(dir)) return out;
  auto take = [&](const fs::directory_entry& e) {
    if (!e.is_regular_file()) return;
    for (const std::string& ext : extensions)
      if (e.path().extension() == ext) out.push_back(e.path());
  };
  if (recursive)
    for (const auto& e : fs::recursive_directory_iterator(dir)) take(e);
  else
    for (const auto& e : fs::directory_iterator(dir)) take(e);
  std::sort(out.begin(), out.end());
  return out;
}

std::string find_nvcc() {
  if (const char* env = std::getenv("NVCC"); env && *env) return env;
  auto found = run_command("command -v nvcc", 10);
  if (found.exit_code == 0 && !found.output.empty()) return found.output.substr(0, found.output.find('\n'));
  if (fs::exists("/usr/local/cuda/bin/nvcc")) return "/usr/local/cuda/bin/nvcc";
  return "";
}

}  // namespace

TEST(KernelsBuild, EveryKernelCompilesWithNvccForSm90) {
  std::vector<fs::path> sources = files_in("kernels", {".cu"}, false);
  ASSERT_GE(sources.size(), 10u) << "run from the repository root";
  std::string nvcc = find_nvcc();
  if (nvcc.empty()) {
    std::printf("skipped: nvcc not found (set NVCC or install the CUDA toolkit)\n");
    GTEST_SKIP() << "nvcc not found";
  }
  TempDir out;
  // Two compilations at a time; each prints "<file> <exit code>" when done.
  std::string command = "ls kernels/*.cu | xargs -P 2 -I{} sh -c '" + nvcc +
                        " -std=c++20 -arch=sm_90 -Isrc -Ikernels -c {} -o " + out.path() +
                        "/$(basename {}).o > " + out.path() + "/$(basename {}).log 2>&1; echo {} $?'";
  auto result = run_command(command, 600);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  for (const fs::path& source : sources) {
    std::string line = source.string() + " 0";
    bool ok = result.output.find(line + "\n") != std::string::npos;
    std::string object = out.file(source.filename().string() + ".o");
    EXPECT_TRUE(ok && fs::exists(object) && fs::file_size(object) > 0)
        << source << " failed to compile:\n"
        << pptrain::testing::read_file(out.file(source.filename().string() + ".log"));
  }
}

TEST(KernelsBuild, OnlyTheLaunchHelperUsesTripleChevrons) {
  std::vector<fs::path> files = files_in("kernels", {".cu", ".cuh", ".h", ".cpp"}, true);
  std::vector<fs::path> more = files_in("src", {".cu", ".cuh", ".h", ".cpp"}, true);
  files.insert(files.end(), more.begin(), more.end());
  ASSERT_FALSE(files.empty()) << "run from the repository root";
  int helper_launches = 0;
  for (const fs::path& file : files) {
    std::ifstream in(file);
    std::string line;
    int number = 0;
    while (std::getline(in, line)) {
      ++number;
      size_t at = line.find("<<<");
      if (at == std::string::npos) continue;
      size_t comment = line.find("//");
      if (comment != std::string::npos && comment < at) continue;
      if (file == fs::path("kernels/launch.cuh")) ++helper_launches;
      else ADD_FAILURE() << file.string() << ":" << number << ": kernel launch outside launch(): " << line;
    }
  }
  EXPECT_EQ(helper_launches, 1) << "kernels/launch.cuh must hold the one launch";
}
