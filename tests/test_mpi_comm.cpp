// MpiComm under mpirun: runs the programs of tests/mpi/ (comm_collectives, comm_p2p,
// comm_errors) on 2 and 4 ranks, each under a timeout so a hang fails, and checks their
// output and exit status.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <regex>

#include "support/mpi_programs.h"
#include "support/test_util.h"

using namespace pptrain::testing;

namespace {

// Runs tests/mpi/<program> on `ranks` ranks with `args`.
CommandResult run_mpi(const std::string& program, int ranks, const std::string& args = "",
                      int timeout_s = 60) {
  std::string path = mpi_test_program(program);
  if (!std::filesystem::exists(path))
    return {-1, path + " is missing: build it with make (mk/mpi_tests.mk)"};
  return run_command(mpirun(ranks) + path + " " + args, timeout_s);
}

int count(const std::string& text, const std::string& pattern) {
  std::regex re(pattern);
  return int(std::distance(std::sregex_iterator(text.begin(), text.end(), re),
                           std::sregex_iterator()));
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

class MpiCommRanks : public ::testing::TestWithParam<int> {};

TEST_P(MpiCommRanks, AllreduceBroadcastBarrierSplit) {
  int ranks = GetParam();
  CommandResult r = run_mpi("comm_collectives", ranks);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "collectives ok rank [0-9]+ of " + std::to_string(ranks)), ranks)
      << r.output;
}

TEST_P(MpiCommRanks, RingExchangeWithTags) {
  int ranks = GetParam();
  CommandResult r = run_mpi("comm_p2p", ranks);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "p2p ok rank [0-9]+ of " + std::to_string(ranks)), ranks) << r.output;
}

INSTANTIATE_TEST_SUITE_P(Ranks, MpiCommRanks, ::testing::Values(2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

TEST(MpiComm, MpiErrorNamesCallGroupAndRank) {
  // A truncated receive is the request Open MPI 4.1's MPI_Waitall could lose (one wait in
  // 40 hung on an idle machine, one in 4 under load; the hang came with the first message
  // of a fresh job, never in a loop within one job). MpiRequest polls MPI_Testall instead;
  // several fresh jobs here make a regression likely to show.
  for (int attempt = 0; attempt < 8; ++attempt) {
    CommandResult r = run_mpi("comm_errors", 2, "truncate", 30);
    ASSERT_EQ(r.exit_code, 0) << "attempt " << attempt << ":\n" << r.output;
    ASSERT_TRUE(contains(r.output, "caught: MPI_Testall failed on 'pp' (rank 1 of 2, world rank 1), "
                                   "irecv of 16 bytes from rank 0, tag 5: MPI_ERR_TRUNCATE"))
        << r.output;
  }
}

TEST(MpiComm, ShortMessageIsAnError) {
  CommandResult r = run_mpi("comm_errors", 2, "short");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "caught: irecv of 32 bytes from rank 0, tag 5 on 'pp' (rank 1 of "
                                 "2, world rank 1): expected 32 bytes in part 1 of 1 but the "
                                 "message had 16"))
      << r.output;
}

TEST(MpiComm, PeerOutsideGroupAndBadTagAreErrors) {
  CommandResult r = run_mpi("comm_errors", 2, "bad_peer");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "caught: isend on 'pp' (rank 1 of 2, world rank 1): peer rank 2 "
                                 "is outside the group (0..1)"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "caught: irecv on 'pp' (rank 1 of 2, world rank 1): peer rank -1"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "caught: broadcast on 'pp' (rank 1 of 2, world rank 1): root rank 2"))
      << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("caught: isend on 'pp' \\(rank 1 of 2, world "
                                                     "rank 1\\): tag -1 is outside 0\\.\\.[0-9]+ "
                                                     "\\(MPI_TAG_UB\\)")))
      << r.output;
}

TEST(MpiComm, DroppedRequestsAreReportedNotHung) {
  CommandResult r = run_mpi("comm_errors", 2, "dropped", 30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "[rank 1] warning: irecv of 16 bytes from rank 0, tag 10 on 'pp' "
                                 "(rank 1 of 2, world rank 1) was destroyed before completion: "
                                 "cancelled"))
      << r.output;
  // Open MPI cannot cancel a send; it is reported and released either way.
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(\[rank 0\] warning: isend of 4194304 bytes)"
                                                     R"( to rank 1, tag 9 on 'pp' .* was destroyed)"
                                                     R"( before completion: )")))
      << r.output;
  EXPECT_EQ(count(r.output, "dropped ok rank"), 2) << r.output;
}

TEST(MpiComm, HangIsReportedWithEachRankAndWhereItWaits) {
  // The harness's own deadline: a hung job ends after 3 s with a report of every process
  // still running, by rank, with its frames (gdb) or its kernel wait channel.
  auto start = std::chrono::steady_clock::now();
  CommandResult r = run_mpi("comm_errors", 2, "hang", 3);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 124) << r.output;
  EXPECT_EQ(count(r.output, "hanging rank [01]"), 2) << "output before the deadline is kept:\n" << r.output;
  EXPECT_TRUE(contains(r.output, "*** timed out after 3 s; still running:")) << r.output;
  std::smatch m0, m1;
  ASSERT_TRUE(std::regex_search(r.output, m0, std::regex(R"(rank 0 \(pid [0-9]+\): \S*comm_errors hang\n((      .*\n)+))")))
      << r.output;
  ASSERT_TRUE(std::regex_search(r.output, m1, std::regex(R"(rank 1 \(pid [0-9]+\): \S*comm_errors hang\n((      .*\n)+))")))
      << r.output;
  if (std::system("command -v gdb >/dev/null 2>&1") == 0) {
    EXPECT_TRUE(contains(m0[1], "MpiRequest::wait")) << m0[1];  // waiting for the message
    EXPECT_TRUE(contains(m1[1], "MpiComm::barrier")) << m1[1];  // waiting for rank 0
  } else {
    EXPECT_TRUE(contains(m0[1], "wait channel")) << m0[1];
  }
  // 3 s deadline + about 1 s of gdb per live process (3 here) + at most the 5 s grace from
  // SIGTERM to SIGKILL ≈ 11 s; 30 s leaves room for a loaded machine, and a harness that
  // waited for the job instead of ending it would take forever.
  EXPECT_LT(seconds, 30.0) << "the hung job was not ended promptly";
}

TEST(MpiComm, ErrorOnOneRankEndsTheJobQuickly) {
  auto start = std::chrono::steady_clock::now();
  CommandResult r = run_mpi("comm_errors", 4, "rank_throws", 60);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "the job hung until the timeout:\n" << r.output;
  EXPECT_TRUE(contains(r.output, "[rank 1] error: rank 1 failed on purpose (config.yaml: key 'x')"))
      << r.output;
  EXPECT_EQ(count(r.output, "error: "), 1) << "only rank 1 failed:\n" << r.output;
  EXPECT_LT(seconds, 15.0) << r.output;
}
