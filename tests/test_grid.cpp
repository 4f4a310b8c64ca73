// Grid under mpirun: for each (dp, pp, tp) the program tests/mpi/grid_layout prints every
// rank's coordinate and the world ranks of its pp/tp/dp/embedding groups as MPI sees
// them; this test computes the same lines from the layout's definition by enumerating
// all ranks, and compares. Layout errors must be reported by every rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <regex>

#include "support/mpi_programs.h"
#include "support/test_util.h"

using namespace pptrain::testing;

namespace {

struct Layout {
  int dp, pp, tp;
  std::vector<int> embedding;  // pp indices; empty = the default {0, pp-1}
};

// Readable test names in failure messages instead of the struct's bytes.
void PrintTo(const Layout& l, std::ostream* os) {
  *os << "dp=" << l.dp << " pp=" << l.pp << " tp=" << l.tp << " embedding=" << l.embedding.size();
}

struct Coord {
  int dp, pp, tp;
};

std::string list(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ' ';
    s += std::to_string(v[i]);
  }
  return s + "]";
}

// The line grid_layout must print for world rank `w`, from the definitions alone:
// coordinates by enumeration in rank order (dp outer, tp inner), groups as "all ranks
// that agree on the fixed coordinates", listed by the varying one.
std::string expected_line(const Layout& l, int w) {
  std::vector<Coord> coord;
  for (int d = 0; d < l.dp; ++d)
    for (int p = 0; p < l.pp; ++p)
      for (int t = 0; t < l.tp; ++t) coord.push_back({d, p, t});
  std::vector<int> embedding = l.embedding.empty() ? std::vector<int>{0, l.pp - 1} : l.embedding;
  auto in_embedding = [&](int p) {
    return std::find(embedding.begin(), embedding.end(), p) != embedding.end();
  };
  const Coord me = coord[w];
  std::vector<int> pp, tp, dp, emb;  // world ranks, ascending = ordered by varying index
  for (int q = 0; q < int(coord.size()); ++q) {
    const Coord c = coord[q];
    if (c.dp == me.dp && c.tp == me.tp) pp.push_back(q);
    if (c.dp == me.dp && c.pp == me.pp) tp.push_back(q);
    if (c.pp == me.pp && c.tp == me.tp) dp.push_back(q);
    if (c.dp == me.dp && c.tp == me.tp && in_embedding(c.pp) && in_embedding(me.pp)) emb.push_back(q);
  }
  if (!in_embedding(me.pp)) emb = {w};
  return "rank " + std::to_string(w) + " coord " + std::to_string(me.dp) + " " +
         std::to_string(me.pp) + " " + std::to_string(me.tp) + " pp " + list(pp) + " tp " +
         list(tp) + " dp " + list(dp) + " embedding " + list(emb) + " member " +
         std::to_string(int(in_embedding(me.pp)));
}

CommandResult run_grid(int ranks, const std::string& args) {
  std::string path = mpi_test_program("grid_layout");
  if (!std::filesystem::exists(path))
    return {-1, path + " is missing: build it with make (mk/mpi_tests.mk)"};
  return run_command(mpirun(ranks) + path + " " + args, 90);
}

std::string args_of(const Layout& l) {
  std::string a = std::to_string(l.dp) + " " + std::to_string(l.pp) + " " + std::to_string(l.tp);
  for (size_t i = 0; i < l.embedding.size(); ++i) {
    a += i ? ',' : ' ';
    a += std::to_string(l.embedding[i]);
  }
  return a;
}

}  // namespace

class GridLayouts : public ::testing::TestWithParam<Layout> {};

TEST_P(GridLayouts, CoordinatesAndGroupsMatchTheDefinition) {
  const Layout l = GetParam();
  const int world = l.dp * l.pp * l.tp;
  CommandResult r = run_grid(world, args_of(l));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int w = 0; w < world; ++w) {
    std::string line = expected_line(l, w);
    EXPECT_NE(r.output.find(line + "\n"), std::string::npos) << "missing: " << line << "\n"
                                                             << r.output;
    EXPECT_NE(r.output.find("grid ok rank " + std::to_string(w) + "\n"), std::string::npos)
        << r.output;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, GridLayouts,
    ::testing::Values(Layout{1, 2, 1, {}}, Layout{1, 1, 2, {}}, Layout{2, 2, 1, {}},
                      Layout{1, 2, 2, {}}, Layout{2, 2, 2, {}},
                      // V placement: first and last stage on pp index 0, a group of one.
                      Layout{2, 2, 1, {0}},
                      // Middle stages hold no embedding: ranks 1 and 2 are alone.
                      Layout{1, 4, 1, {0, 3}}),
    [](const auto& info) {
      const Layout& l = info.param;
      std::string name = "dp" + std::to_string(l.dp) + "_pp" + std::to_string(l.pp) + "_tp" +
                         std::to_string(l.tp);
      for (int p : l.embedding) name += "_emb" + std::to_string(p);
      return name;
    });

TEST(Grid, WorldSizeMismatchIsReportedByEveryRank) {
  CommandResult r = run_grid(3, "2 2 1");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "hung:\n" << r.output;
  for (int w = 0; w < 3; ++w)
    EXPECT_NE(r.output.find("[rank " + std::to_string(w) +
                            "] error: parallel.dp x pp x tp = 2 x 2 x 1 = 4 but mpirun started 3 "
                            "ranks\n"),
              std::string::npos)
        << "rank " << w << ":\n" << r.output;
  EXPECT_EQ(r.output.find("grid ok"), std::string::npos) << r.output;
}

TEST(Grid, EmbeddingRankOutsidePipelineIsReported) {
  CommandResult r = run_grid(2, "1 2 1 0,2");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "hung:\n" << r.output;
  for (int w = 0; w < 2; ++w)
    EXPECT_NE(r.output.find("[rank " + std::to_string(w) +
                            "] error: embedding group: pipeline rank 2 is outside 0..1"),
              std::string::npos)
        << r.output;
}
