// Build check of the real CUDA kernels: `<<<...>>>` appears only in the launch helper, so
// both builds (nvcc and the emulator) share every call site. That every kernels/*.cu
// compiles with nvcc for sm_90 is test_cuda_build's (its `make CUDA=1 CUDA_ARCH=90`
// compiles each one; compiling them twice cost the suite a minute). Runs from the
// repository root.
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


}  // namespace

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
