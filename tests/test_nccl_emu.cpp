// NcclComm over the emulated NCCL under mpirun: runs tests/mpi/nccl_comm on 2 and 4 ranks
// (p2p order, test()/wait(), fp32/bf16/fp64 all-reduce sum and max, groups created by some
// ranks only, mismatched init arguments) and its bad-peer mode, each under a timeout so a
// hang fails.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "support/mpi_programs.h"
#include "support/test_util.h"

using namespace pptrain::testing;

namespace {

CommandResult run_nccl(int ranks, const std::string& args = "") {
  std::string path = mpi_test_program("nccl_comm");
  if (!std::filesystem::exists(path)) return {-1, path + " is missing: build it with make (mk/mpi_tests.mk)"};
  return run_command(mpirun(ranks) + path + " " + args, 60);
}

}  // namespace

class NcclEmuRanks : public ::testing::TestWithParam<int> {};

TEST_P(NcclEmuRanks, P2pOrderAllreduceAndPartialGroups) {
  const int ranks = GetParam();
  CommandResult r = run_nccl(ranks);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::regex ok("nccl ok rank [0-9]+ of " + std::to_string(ranks));
  EXPECT_EQ(std::distance(std::sregex_iterator(r.output.begin(), r.output.end(), ok), std::sregex_iterator()),
            ranks)
      << r.output;
  // The mismatched init is reported by the emulated NCCL on every member.
  EXPECT_NE(r.output.find("NCCL WARN (emulated) ncclCommInitRank: world rank " + std::to_string(ranks - 1) +
                          " passed nranks " + std::to_string(ranks + 1)),
            std::string::npos)
      << r.output;
}

INSTANTIATE_TEST_SUITE_P(Ranks, NcclEmuRanks, ::testing::Values(2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

TEST(NcclEmu, BadPeerIsAnErrorNamingTheCallAndGroup) {
  CommandResult r = run_nccl(2, "bad_peer");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("caught: isend on 'world' (rank 0 of 2, world rank 0): peer 2 is not another rank "
                          "of the group\n"),
            std::string::npos)
      << r.output;
}
