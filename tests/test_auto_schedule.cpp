// The automatic schedule (pipeline/auto_schedule.h): over a grid of shapes, costs and
// memory limits its program validates and lowers, keeps the simulated peak activations
// within the limit on every rank, and is no slower than any fixed schedule of the same
// placement that fits the same limit; with equal costs and no limit it reaches the
// zero-bubble makespan; an impossible limit is a one-line error.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "pipeline/auto_schedule.h"
#include "pipeline/registry.h"
#include "pipeline/simulate.h"
#include "support/error_of.h"
#include "support/test_util.h"

using namespace pptrain;
using namespace pptrain::pipeline;
using pptrain::testing::error_of;
using pptrain::testing::max_of;
namespace util = pptrain::testing;

namespace {

struct NamedCost {
  const char* name;
  CostModel cost;
};

std::vector<NamedCost> cost_cases() {
  auto make = [](double f, double i, double w, double comm, double act_i, double act_w) {
    CostModel c;
    c.forward = f;
    c.input_grad = i;
    c.weight_grad = w;
    c.comm = comm;
    c.act_input = act_i;
    c.act_weight = act_w;
    return c;
  };
  // Activations of one microbatch total 1 unit in every case, so the limits below count
  // microbatches; the large-W case keeps part of them until W, as in the paper.
  return {{"equal", make(1, 1, 1, 0, 1, 0)},
          {"small W", make(1, 1, 0.25, 0, 1, 0)},
          {"large W", make(1, 1, 2, 0, 0.6, 0.4)},
          {"large F", make(2, 1, 1, 0, 1, 0)},
          {"comm", make(1, 1, 1, 0.3, 1, 0)}};
}

}  // namespace

TEST(AutoSchedule, ValidFitsTheLimitAndBeatsEveryFixedScheduleThatFits) {
  int cases = 0, heuristic_won = 0, fixed_compared = 0;
  for (int p = 2; p <= 6; ++p)
    for (int m : {p, 2 * p, 3 * p, 8})
      for (int v : {1, 2})
        for (const NamedCost& c : cost_cases())
          for (double limit : {0.0, double(p), p + 1.0, 2.0 * p - 1, 1.0}) {
            SCOPED_TRACE(cat("p=", p, " m=", m, " v=", v, " cost ", c.name, " limit=", limit));
            Schedule s = auto_schedule(p, m, v, c.cost, limit);
            ++cases;
            heuristic_won += s.name == "auto";
            EXPECT_EQ(s.placement, v == 2 ? Placement::V : Placement::Loop);
            Schedule prepared;
            ASSERT_NO_THROW(prepared = prepare_schedule(s));
            const SimResult sim = simulate(prepared, c.cost);
            if (limit > 0) {
              // + 1e-9: sums of a few unit fractions in double, exact to ~1e-15.
              for (double peak : sim.peak_activations) EXPECT_LE(peak, limit + 1e-9);
            }
            for (const std::string& name : schedule_names()) {
              Schedule fixed;
              try {
                fixed = generate_schedule(name, p, m, v);
              } catch (const Error&) {
                continue;
              }
              if (fixed.placement != s.placement) continue;
              const SimResult fixed_sim = simulate(fixed, c.cost);
              if (limit > 0 && max_of(fixed_sim.peak_activations) > limit + 1e-9) continue;
              ++fixed_compared;
              EXPECT_LE(sim.makespan, fixed_sim.makespan + 1e-9) << "slower than " << name;
            }
          }
  EXPECT_EQ(cases, 5 * 4 * 2 * 5 * 5);
  EXPECT_GT(fixed_compared, cases);
  // The heuristic's own program, not a fixed schedule's, wins most of the grid (89%
  // when written; the fixed ones win ties on memory and some cases with communication
  // cost, where lowering posts receives later than the heuristic planned).
  EXPECT_GT(heuristic_won, cases * 3 / 4) << heuristic_won << " of " << cases;
  std::printf("auto: the heuristic's program won %d of %d cases\n", heuristic_won, cases);
}

// With T_F = T_I = T_W = 1, no communication cost and no memory limit, the last rank
// cannot start before the first microbatch's forward has passed the p-1 ranks before it,
// (p-1) T_F, and then has m (T_F + T_I + T_W) of work of its own: the makespan is at
// least (p-1) T_F + m (T_F + T_I + T_W). (The first rank's bound, its first I no earlier
// than p T_F + (p-1) T_I and 2m of I and W after it, is smaller once m >= p.) Zero bubble
// means reaching this bound: no rank waits except the last rank at the start, where no
// schedule can help. ZB-H2 reaches it for m >= 2p-1; the automatic schedule must also
// reach it for p <= m < 2p-1.
TEST(AutoSchedule, ReachesTheZeroBubbleMakespanWithEqualCostsAndNoLimit) {
  const CostModel unit;  // f = i = w = 1, comm = 0
  for (int p = 1; p <= 6; ++p)
    for (int m = p; m <= 3 * p + 2; ++m) {
      SCOPED_TRACE(cat("p=", p, " m=", m));
      Schedule s = prepare_schedule(auto_schedule(p, m, 1, unit, 0));
      // Unit costs: every time is a small integer, exact in double.
      EXPECT_NEAR(simulate(s, unit).makespan, (p - 1) * 1.0 + m * 3.0, 1e-9) << s.name;
    }
}

TEST(AutoSchedule, ALimitBelowOneMicrobatchIsAOneLineError) {
  CostModel cost;
  cost.act_input = 0.75;
  cost.act_weight = 0.25;
  for (int v : {1, 2}) {
    const std::string msg = error_of([&] { auto_schedule(4, 8, v, cost, 0.5); });
    EXPECT_EQ(msg,
              "auto: memory limit 0.5 is below what one microbatch in flight needs (1 per rank, "
              "in the units of act_i and act_w)");
  }
  // Exactly one microbatch fits: the program runs one microbatch at a time per rank.
  Schedule s = prepare_schedule(auto_schedule(4, 8, 2, cost, 1));
  EXPECT_LE(max_of(simulate(s, cost).peak_activations), 1 + 1e-9);
}

TEST(AutoSchedule, BadShapesAreOneLineErrors) {
  const CostModel cost;
  EXPECT_EQ(error_of([&] { auto_schedule(4, 8, 3, cost, 0); }),
            "auto: builds 1 stage per rank (loop placement) or 2 (V placement), got 3");
  EXPECT_EQ(error_of([&] { auto_schedule(0, 8, 1, cost, 0); }), "auto: pp must be >= 1 (got 0)");
  EXPECT_EQ(error_of([&] { auto_schedule(4, 0, 1, cost, 0); }),
            "auto: microbatches must be >= 1 (got 0)");
  EXPECT_NE(error_of([&] { auto_schedule(1000, 1001, 1, cost, 0); }).find("more than this tool builds"),
            std::string::npos);
  CostModel per_stage;
  per_stage.stage_forward = {1, 1, 1};
  EXPECT_EQ(error_of([&] { auto_schedule(2, 4, 1, per_stage, 0); }),
            "auto: cost model: 3 per-stage costs for 2 stages");
}

TEST(AutoSchedule, TheScheduleCommandBuildsIt) {
  auto schedule = [](const std::string& args) {
    return util::run_command(util::pptrain_bin() + " schedule --schedule auto --pp 4 --microbatches 6 " + args);
  };
  // Equal costs, no limit: the zero-bubble makespan (p-1) + 3m = 21.
  auto text = schedule("--cost f=1,i=1,w=1");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_EQ(text.output.rfind("auto  pp=4  microbatches=6  stages_per_rank=1  placement=loop\n", 0), 0)
      << text.output;
  EXPECT_NE(text.output.find("makespan 21 "), std::string::npos) << text.output;

  auto v = schedule("--stages-per-rank 2 --cost f=1,i=1,w=1,act_i=0.5,act_w=0.5 --memory-limit 3 --format json");
  ASSERT_EQ(v.exit_code, 0) << v.output;
  EXPECT_NE(v.output.find("\"placement\": \"V\""), std::string::npos) << v.output;
  EXPECT_NE(v.output.find("\"valid\": true"), std::string::npos) << v.output;

  auto no_cost = schedule("");
  EXPECT_NE(no_cost.exit_code, 0);
  EXPECT_NE(no_cost.output.find("schedule: --schedule auto needs --cost"), std::string::npos) << no_cost.output;
  auto too_small = schedule("--cost f=1,i=1,w=1 --memory-limit 0.5");
  EXPECT_NE(too_small.exit_code, 0);
  EXPECT_NE(too_small.output.find("auto: memory limit 0.5 is below what one microbatch in flight needs"),
            std::string::npos)
      << too_small.output;
}
