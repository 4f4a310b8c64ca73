// scripts/bench_native.sh (the default build against ARCH=native) where it must refuse, in
// one line and a non-zero exit, before building anything: a native build folder that is the
// build folder itself (an ARCH change would rebuild every object there: the user's build
// must come out untouched) and counts that are not positive integers. The measurement
// itself builds a second tree (minutes), so it is left to `make bench`. Runs from the
// repository root.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <string>

#include "support/test_util.h"

using namespace pptrain::testing;

namespace {

long long mtime_ns(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return -1;
  return (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
}

}  // namespace

TEST(BenchNative, TheBuildFolderItselfIsRefusedAndLeftAlone) {
  const std::string build = build_dir(), stamp_before = std::to_string(mtime_ns(pptrain_bin()));
  CommandResult r =
      run_command("BENCH_NATIVE_BUILD=" + build + " scripts/bench_native.sh " + build + " 2>&1", 60);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_NE(r.output.find("bench_native: BENCH_NATIVE_BUILD is BUILD (" + build +
                          "): ARCH=native would rebuild it; name another folder"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(std::to_string(mtime_ns(pptrain_bin())), stamp_before);
}

TEST(BenchNative, CountsMustBePositiveIntegers) {
  for (const std::string var : {"BENCH_PAIRS=x", "BENCH_STEPS=0"}) {
    CommandResult r = run_command(var + " scripts/bench_native.sh " + build_dir() + " 2>&1", 60);
    EXPECT_NE(r.exit_code, 0) << var << "\n" << r.output;
    EXPECT_NE(r.output.find("bench_native: " + var + ": expected a positive integer"), std::string::npos)
        << r.output;
  }
}
