// MpiComm under mpirun: runs the programs of tests/mpi/ (comm_collectives, comm_p2p,
// comm_errors, and comm_wait: how a rank waits) on 2 and 4 ranks, each under a timeout so
// a hang fails, and checks their output and exit status.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "backend/cpu/cpu_topology.h"
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

namespace {

// How a rank waits for MPI (mpi_comm.h: MpiWait), through tests/mpi/comm_wait: rank 1 waits
// for a receive, a reduce-scatter and a gather that rank 0 starts `delay_ms` late. Returns
// its lines "wait MODE WHAT cpu_ms C wall_ms W" as {mode, what, cpu, wall}.
struct WaitCost {
  std::string mode, what;
  double cpu_ms, wall_ms;
};
std::vector<WaitCost> wait_costs(const std::string& output) {
  std::vector<WaitCost> costs;
  const std::regex line(R"(wait (poll|sleep) (\w+) cpu_ms ([0-9.e+-]+) wall_ms ([0-9.e+-]+))");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), line); it != std::sregex_iterator(); ++it)
    costs.push_back({(*it)[1], (*it)[2], std::stod((*it)[3]), std::stod((*it)[4])});
  return costs;
}

// The CPUs this process may run on (mpirun --bind-to none gives its ranks the same), read
// as MpiSession reads each rank's.
int cpus_here() { return std::max(1, int(pptrain::cpu::affinity_cpus().size())); }

std::string mpirun_with_threads(int threads, int ranks) {
  return "OMP_NUM_THREADS=" + std::to_string(threads) +
         " OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe --bind-to none -np " +
         std::to_string(ranks) + " ";
}

}  // namespace

TEST(MpiWait, ASleepingRankWaitsWithoutTakingItsCpu) {
  const std::string path = mpi_test_program("comm_wait");
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  CommandResult r = run_command("PPTRAIN_MPI_WAIT=sleep " + mpirun(2) + path + " 300", 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<WaitCost> costs = wait_costs(r.output);
  ASSERT_EQ(costs.size(), 3u) << r.output;
  for (const WaitCost& c : costs) {
    EXPECT_EQ(c.mode, "sleep") << r.output;
    // Rank 1 waited for most of rank 0's 300 ms (their starts differ by far less).
    EXPECT_GT(c.wall_ms, 100.0) << c.what << "\n" << r.output;
    // A sleeping wait of W ms polls flat out for 50 µs, then wakes about W / 1 ms + 6 times
    // (sleeps of 20, 40, ... 640 µs, then 1 ms). Each wake-up is an MPI_Test and a sleep
    // call: about 48 µs of CPU each on a 2-core VM (14.5-17 ms in a 300 ms wait), 5% of
    // the wall time. Polling takes all of it while it has a CPU, and on a machine loaded
    // by 3 test binaries still well over a quarter. The bound, a quarter, is 5x that 5%.
    EXPECT_LT(c.cpu_ms, 0.25 * c.wall_ms) << c.what << ": the waiting rank took its CPU\n" << r.output;
  }
}

TEST(MpiWait, RanksSleepOnlyWhereTheirThreadsOutnumberTheCpus) {
  const std::string path = mpi_test_program("comm_wait");
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  const int cpus = cpus_here();
  // 2 ranks of `threads` threads each on these CPUs: sleeping where 2 · threads > cpus.
  for (int threads : {1, cpus}) {
    CommandResult r = run_command("env -u PPTRAIN_MPI_WAIT " + mpirun_with_threads(threads, 2) + path + " 20", 60);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::vector<WaitCost> costs = wait_costs(r.output);
    ASSERT_EQ(costs.size(), 3u) << r.output;
    EXPECT_EQ(costs[0].mode, 2 * threads > cpus ? "sleep" : "poll") << threads << " threads, " << cpus << " CPUs\n"
                                                                     << r.output;
  }
  // The user's choice wins either way.
  CommandResult r = run_command("PPTRAIN_MPI_WAIT=poll " + mpirun_with_threads(cpus, 2) + path + " 20", 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(wait_costs(r.output).size(), 3u) << r.output;
  EXPECT_EQ(wait_costs(r.output)[0].mode, "poll") << r.output;
}

TEST(MpiWait, ABadSettingIsOneLineOnEveryRankAndAFailedJob) {
  const std::string path = mpi_test_program("comm_wait");
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  CommandResult r = run_command("PPTRAIN_MPI_WAIT=fast " + mpirun(2) + path + " 20", 60);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << r.output;
  EXPECT_EQ(count(r.output, "error: PPTRAIN_MPI_WAIT=fast: expected poll or sleep"), 2) << r.output;
  EXPECT_TRUE(wait_costs(r.output).empty()) << r.output;
}
