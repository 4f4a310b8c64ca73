// build/bench/bench_blas (bench/bench_blas.cpp): one JSON line per library and product, each
// checked against a double product first, then the table; one line and exit 2 for arguments
// it cannot read. A tiny model and one repetition: the figures themselves are for a person
// choosing a library on their CPU.
#include <gtest/gtest.h>

#include <string>

#include "support/test_util.h"

using namespace pptrain::testing;

TEST(BenchBlas, ChecksAndTimesEveryProductOfEveryLibraryPresent) {
  // D 24, no head: qkv, proj, fc, fc2 x forward, dgrad, wgrad = 12 products a library; N 10
  // (no dimension a multiple of a kernel's tile). 60 s: the run takes well under a second;
  // the limit only turns a hang into a failure.
  CommandResult r = run_command("OMP_NUM_THREADS=2 " + build_dir() + "/bench/bench_blas 1 24,0,10", 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int openblas = 0, others = 0, libraries = 0;
  bool table = false;
  for (const std::string& line : split_lines(r.output)) {
    if (line.rfind("{\"bench\": \"blas\"", 0) == 0) {
      (line.find("\"library\": \"openblas\"") != std::string::npos ? openblas : others) += 1;
      EXPECT_NE(line.find("\"error_of_bound\": "), std::string::npos) << line;
      EXPECT_NE(line.find("\"gflops\": "), std::string::npos) << line;
    } else if (line.rfind("library ", 0) == 0) {
      table = true;
    } else if (table && (line.rfind("openblas ", 0) == 0 || line.rfind("onednn ", 0) == 0 ||
                         line.rfind("blis ", 0) == 0)) {
      ++libraries;
    }
  }
  EXPECT_EQ(openblas, 12) << r.output;
  EXPECT_EQ(others % 12, 0) << r.output;
  EXPECT_TRUE(table) << r.output;
  EXPECT_EQ(libraries, 1 + others / 12) << r.output;
  // The products' shapes: fc's forward is [10, 96] = [10, 24]·[96, 24]ᵀ.
  EXPECT_NE(r.output.find("\"layer\": \"fc\", \"pass\": \"forward\", \"m\": 10, \"n\": 96, \"k\": 24"),
            std::string::npos)
      << r.output;
}

TEST(BenchBlas, ArgumentsItCannotReadAreOneLine) {
  for (const char* args : {"0", "1 24,0", "1 0,0,10"}) {
    CommandResult r = run_command(build_dir() + "/bench/bench_blas " + args + " 2>&1", 60);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
    EXPECT_EQ(r.output, "bench_blas: usage: bench_blas [REPS >= 1] [D,V,N] (V = 0: no head)\n") << args;
  }
}
