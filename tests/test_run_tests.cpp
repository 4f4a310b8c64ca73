// scripts/run_tests.sh, the runner of `make test`, on stand-in test binaries in a temporary
// build folder: its last line "N passed, M failed" counts a binary that was never built
// and one that dies before printing anything as one failure each, and it exits non-zero
// whenever something failed. Runs from the repository root.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "support/test_util.h"

using namespace pptrain::testing;
namespace fs = std::filesystem;

namespace {

// An executable shell script standing in for a GoogleTest binary.
void write_binary(const TempDir& build, const std::string& name, const std::string& body) {
  fs::create_directories(build.file("tests"));
  const std::string path = build.file("tests/" + name);
  write_file(path, "#!/bin/sh\n" + body + "\n");
  fs::permissions(path, fs::perms::owner_all, fs::perm_options::add);
}

// gtest's summary lines for `passed` passing and `failed` failing tests.
std::string gtest_output(int passed, int failed) {
  std::string out = "echo '[==========] " + std::to_string(passed + failed) + " tests ran.'\n";
  out += "echo '[  PASSED  ] " + std::to_string(passed) + " tests.'\n";
  if (failed > 0) out += "echo '[  FAILED  ] " + std::to_string(failed) + " tests, listed below:'\nexit 1";
  return out;
}

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  return t.substr(t.find_last_of('\n') + 1);
}

CommandResult run_tests(const TempDir& build, const std::string& names) {
  return run_command("TEST_TIMEOUT=20 scripts/run_tests.sh " + build.path() + " " + names, 120);
}

}  // namespace

TEST(RunTests, CountsEveryPassingAndFailingTest) {
  ASSERT_TRUE(fs::exists("scripts/run_tests.sh")) << "run from the repository root";
  TempDir build;
  write_binary(build, "test_a", gtest_output(3, 0));
  write_binary(build, "test_b", gtest_output(4, 2));
  CommandResult r = run_tests(build, "test_a test_b");
  EXPECT_EQ(last_line(r.output), "7 passed, 2 failed") << r.output;
  EXPECT_NE(r.exit_code, 0) << r.output;
}

TEST(RunTests, AllPassingExitsZero) {
  TempDir build;
  write_binary(build, "test_a", gtest_output(3, 0));
  CommandResult r = run_tests(build, "test_a");
  EXPECT_EQ(last_line(r.output), "3 passed, 0 failed") << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST(RunTests, AMissingBinaryCountsAsOneFailureAndTheOthersStillRun) {
  TempDir build;
  write_binary(build, "test_a", gtest_output(2, 0));
  write_binary(build, "test_c", gtest_output(5, 0));
  CommandResult r = run_tests(build, "test_a test_missing test_c");
  EXPECT_EQ(last_line(r.output), "7 passed, 1 failed") << r.output;
  EXPECT_NE(r.output.find("test_missing"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("not built"), std::string::npos) << r.output;
  EXPECT_NE(r.exit_code, 0) << r.output;
}

TEST(RunTests, ABinaryThatCrashesBeforePrintingCountsAsOneFailure) {
  TempDir build;
  write_binary(build, "test_a", gtest_output(2, 0));
  write_binary(build, "test_crash", "kill -SEGV $$");
  write_binary(build, "test_abort_after_start", "echo '[==========] Running 3 tests'; kill -ABRT $$");
  CommandResult r = run_tests(build, "test_a test_crash test_abort_after_start");
  EXPECT_EQ(last_line(r.output), "2 passed, 2 failed") << r.output;
  EXPECT_NE(r.output.find("signal 11"), std::string::npos) << r.output;
  EXPECT_NE(r.exit_code, 0) << r.output;
}

TEST(RunTests, WithoutNamesExpectsOneBinaryPerTestSource) {
  // The default list comes from tests/test_*.cpp of the working directory: in an empty
  // build folder every one of them is missing.
  TempDir build;
  size_t sources = 0;
  for (const auto& e : fs::directory_iterator("tests"))
    if (e.path().filename().string().rfind("test_", 0) == 0 && e.path().extension() == ".cpp") ++sources;
  ASSERT_GT(sources, 0u);
  CommandResult r = run_command("TEST_TIMEOUT=5 scripts/run_tests.sh " + build.path(), 120);
  EXPECT_EQ(last_line(r.output), "0 passed, " + std::to_string(sources) + " failed") << r.output;
  EXPECT_NE(r.exit_code, 0);
}

TEST(RunTests, AFailedBuildCountsOnceWhenNoTestBinaryIsMissing) {
  TempDir build;
  write_binary(build, "test_a", gtest_output(2, 0));
  CommandResult r = run_command("BUILD_FAILED=1 scripts/run_tests.sh " + build.path() + " test_a", 60);
  EXPECT_EQ(last_line(r.output), "2 passed, 1 failed") << r.output;
  EXPECT_NE(r.exit_code, 0);
  r = run_command("BUILD_FAILED=1 scripts/run_tests.sh " + build.path() + " test_a test_missing", 60);
  EXPECT_EQ(last_line(r.output), "2 passed, 1 failed") << r.output;
}
