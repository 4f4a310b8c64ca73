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

// TEST_JOBS binaries run at once: each stand-in marks that it runs and passes only if it
// sees the other's mark within 5 s, which the first to start can only when both run side
// by side. With TEST_JOBS=1 it waits for a second that starts only after it ended, and
// fails (the second then finds the first's mark and passes).
TEST(RunTests, BinariesRunSideBySide) {
  TempDir build;
  const std::string marks = build.file("marks");
  fs::create_directories(marks);
  auto waits_for = [&](const std::string& me, const std::string& other) {
    return "touch " + marks + "/" + me + "\nfor i in $(seq 50); do [ -e " + marks + "/" + other + " ] && {\n" +
           gtest_output(1, 0) + "exit 0; }; sleep 0.1; done\n" + gtest_output(0, 1);
  };
  write_binary(build, "test_a", waits_for("a", "b"));
  write_binary(build, "test_b", waits_for("b", "a"));
  CommandResult r = run_command("TEST_JOBS=2 scripts/run_tests.sh " + build.path() + " test_a test_b", 120);
  EXPECT_EQ(last_line(r.output), "2 passed, 0 failed") << r.output;
  EXPECT_NE(r.output.find("2 at once"), std::string::npos) << r.output;
  fs::remove_all(marks);
  fs::create_directories(marks);
  r = run_command("TEST_JOBS=1 scripts/run_tests.sh " + build.path() + " test_a test_b", 120);
  EXPECT_EQ(last_line(r.output), "1 passed, 1 failed") << r.output;
  EXPECT_NE(run_command("TEST_JOBS=two scripts/run_tests.sh " + build.path() + " test_a", 60).exit_code, 0);
}

// A binary named in TEST_SOLO runs with nothing beside it: it fails if another stand-in's
// "running" mark exists while it runs; the others hold theirs for half a second each.
TEST(RunTests, ASoloBinaryRunsAlone) {
  TempDir build;
  const std::string marks = build.file("marks");
  fs::create_directories(marks);
  for (const char* name : {"test_a", "test_b", "test_c", "test_d"})
    write_binary(build, name,
                 "touch " + marks + "/" + name + "\nsleep 0.5\nrm " + marks + "/" + name + "\n" + gtest_output(1, 0));
  write_binary(build, "test_s",
               "for i in 1 2 3 4 5; do [ -z \"$(ls " + marks + ")\" ] || { " + gtest_output(0, 1) +
                   "; }; sleep 0.1; done\n" + gtest_output(1, 0));
  CommandResult r = run_command("TEST_JOBS=2 TEST_SOLO=test_s scripts/run_tests.sh " + build.path() +
                                    " test_a test_b test_s test_c test_d",
                                120);
  EXPECT_EQ(last_line(r.output), "5 passed, 0 failed") << r.output;
  // The check bites: without TEST_SOLO the solo stand-in runs beside another and fails.
  r = run_command("TEST_JOBS=2 TEST_SOLO= scripts/run_tests.sh " + build.path() + " test_a test_s", 120);
  EXPECT_EQ(last_line(r.output), "1 passed, 1 failed") << r.output;
}

// The longest binary of the previous run starts first, unknown ones before any known one;
// the times are written for the next run and the slowest named before the summary.
TEST(RunTests, TheLongestStartFirstAndTheSlowestAreNamed) {
  TempDir build;
  for (const char* name : {"test_a", "test_b", "test_c"}) write_binary(build, name, gtest_output(1, 0));
  fs::create_directories(build.file("test-logs"));
  write_file(build.file("test-logs/durations"), "test_a 3\ntest_b 50\n");
  CommandResult r = run_command("TEST_JOBS=1 scripts/run_tests.sh " + build.path() + " test_a test_b test_c", 120);
  EXPECT_EQ(last_line(r.output), "3 passed, 0 failed") << r.output;
  const size_t a = r.output.find("test_a "), b = r.output.find("test_b "), c = r.output.find("test_c ");
  EXPECT_LT(c, b) << r.output;
  EXPECT_LT(b, a) << r.output;
  EXPECT_NE(r.output.find("slowest: test_"), std::string::npos) << r.output;
  const std::string written = read_file(build.file("test-logs/durations"));
  for (const char* name : {"test_a ", "test_b ", "test_c "}) EXPECT_NE(written.find(name), std::string::npos) << written;
}

// A binary known to be long runs as GoogleTest shards side by side, each once: a stand-in
// that honours GTEST_SHARD_INDEX marks its shard; a 130 s one at 60 s a shard is 3 shards.
// Run alone (TEST_JOBS=1) or unknown, it is one piece.
TEST(RunTests, ALongBinaryRunsAsShards) {
  TempDir build;
  const std::string marks = build.file("marks");
  fs::create_directories(marks);
  write_binary(build, "test_long",
               "touch " + marks + "/shard${GTEST_SHARD_INDEX:-none}of${GTEST_TOTAL_SHARDS:-none}\n" +
                   gtest_output(1, 0));
  fs::create_directories(build.file("test-logs"));
  write_file(build.file("test-logs/durations"), "test_long 130\n");
  CommandResult r = run_command("TEST_JOBS=2 scripts/run_tests.sh " + build.path() + " test_long", 120);
  EXPECT_EQ(last_line(r.output), "3 passed, 0 failed") << r.output;
  for (const char* mark : {"shard0of3", "shard1of3", "shard2of3"}) EXPECT_TRUE(fs::exists(marks + "/" + mark)) << mark;
  EXPECT_NE(r.output.find("test_long 3/3"), std::string::npos) << r.output;
  fs::remove_all(marks);
  fs::create_directories(marks);
  r = run_command("TEST_JOBS=1 scripts/run_tests.sh " + build.path() + " test_long", 120);
  EXPECT_EQ(last_line(r.output), "1 passed, 0 failed") << r.output;
  EXPECT_TRUE(fs::exists(marks + "/shardnoneofnone")) << r.output;
}

// Each binary runs with an Open MPI session folder of its own (OMPI_MCA_orte_tmpdir_base), so
// that two binaries side by side never race to create the shared one; the folders exist
// while the binaries run and are gone afterwards. A user's own setting is kept for all.
TEST(RunTests, EachBinaryGetsAnOpenMpiSessionFolderOfItsOwn) {
  TempDir build;
  // This binary itself runs under run_tests.sh, which set the variable: unset for the runs
  // that must choose their own.
  for (const char* name : {"test_a", "test_b"})
    write_binary(build, name,
                 std::string("[ -d \"$OMPI_MCA_orte_tmpdir_base\" ] || exit 3\necho \"$OMPI_MCA_orte_tmpdir_base\" > ") +
                     build.file(std::string("seen_") + name) + "\n" + gtest_output(1, 0));
  CommandResult r = run_command(
      "env -u OMPI_MCA_orte_tmpdir_base TEST_TIMEOUT=20 scripts/run_tests.sh " + build.path() + " test_a test_b", 120);
  ASSERT_EQ(last_line(r.output), "2 passed, 0 failed") << r.output;
  const std::string a = last_line(read_file(build.file("seen_test_a"))),
                    b = last_line(read_file(build.file("seen_test_b")));
  EXPECT_FALSE(a.empty());
  EXPECT_NE(a, b);
  EXPECT_FALSE(fs::exists(a)) << a << " was left behind";
  EXPECT_FALSE(fs::exists(b)) << b << " was left behind";

  const std::string own = build.file("own");
  fs::create_directories(own);
  r = run_command("OMPI_MCA_orte_tmpdir_base=" + own + " TEST_TIMEOUT=20 scripts/run_tests.sh " + build.path() +
                      " test_a test_b",
                  120);
  ASSERT_EQ(last_line(r.output), "2 passed, 0 failed") << r.output;
  EXPECT_EQ(last_line(read_file(build.file("seen_test_a"))), own);
  EXPECT_EQ(last_line(read_file(build.file("seen_test_b"))), own);
}
