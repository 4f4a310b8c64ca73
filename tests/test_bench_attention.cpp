// build/bench/bench_attention (bench/bench_attention.cpp): one JSON line per shape and path
// with its times and peak fractions, and one line and exit 2 for a shape it cannot read. Tiny shapes and one repetition: the figures themselves are for `make bench`.
#include <gtest/gtest.h>

#include <string>

#include "support/test_util.h"

using namespace pptrain::testing;

TEST(BenchAttention, PrintsOneLinePerShapeAndPath) {
  CommandResult r = run_command("OMP_NUM_THREADS=2 " + build_dir() + "/bench/bench_attention 1 2,33,3,5 1,70,2,16", 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int count = 0;
  for (const std::string& line : split_lines(r.output)) {
    if (line.rfind("{\"bench\": \"attention\"", 0) != 0) continue;
    ++count;
    EXPECT_NE(line.find(count % 2 ? "\"path\": \"naive\"" : "\"path\": \"flash\""), std::string::npos) << line;
    EXPECT_NE(line.find(count <= 2 ? "\"t\": 33, \"nh\": 3, \"hd\": 5" : "\"t\": 70, \"nh\": 2, \"hd\": 16"),
              std::string::npos)
        << line;
    EXPECT_NE(line.find("\"backward_ms\": "), std::string::npos) << line;
    EXPECT_NE(line.find("\"forward_peak_fraction\": "), std::string::npos) << line;
  }
  EXPECT_EQ(count, 4) << r.output;
}

TEST(BenchAttention, AShapeItCannotReadIsOneLine) {
  CommandResult r = run_command(build_dir() + "/bench/bench_attention 1 2,128,8 2>&1", 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output, "bench_attention: shape '2,128,8': expected B,T,NH,HD (positive integers)\n");
}
