// Schedule generators: every generator over a grid of (p, m, v) yields a program the
// validator accepts (before and after lowering, also with blocking sends) or a one-line
// constraint error; with T_F = T_I = T_W the simulated bubble and peak activations match
// the closed forms in DESIGN.md.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/error.h"
#include "pipeline/lower.h"
#include "pipeline/registry.h"
#include "pipeline/simulate.h"
#include "pipeline/transform.h"
#include "pipeline/validate.h"
#include "support/test_util.h"

using namespace pptrain;
using namespace pptrain::pipeline;
using pptrain::testing::max_of;

namespace {

// The stages-per-rank values each generator is tried with.
std::vector<int> stage_counts(const std::string& name) {
  if (name == "interleaved-1f1b") return {1, 2, 3, 4};
  if (name == "looped-bfs") return {1, 2, 3};
  return {1, 2};
}

// Shapes a generator must refuse (and only these): the constraint its message names.
std::string expected_constraint(const std::string& name, int pp, int m, int v) {
  if (name == "interleaved-1f1b" && v < 2) return "at least 2 stages per rank";
  if ((name == "zbv" || name == "dualpipev") && v != 2) return "exactly 2 stages per rank";
  if ((name == "gpipe" || name == "1f1b" || name == "zb-h1" || name == "zb-h2") && v != 1)
    return "1 stage per rank";
  if (name == "dualpipev" && m < 2 * pp - 1) return "at least 2*pp-1 microbatches";
  return "";
}

SimResult unit_sim(const Schedule& s, double weight_grad = 1) {
  CostModel cost;
  cost.weight_grad = weight_grad;
  return simulate(s, cost);
}

}  // namespace

TEST(ScheduleGrid, EveryGeneratorYieldsAValidProgramOrAConstraintError) {
  int accepted = 0, refused = 0;
  for (const std::string& name : schedule_names()) {
    for (int pp = 1; pp <= 8; ++pp) {
      for (int m = 1; m <= 32; ++m) {
        for (int v : stage_counts(name)) {
          SCOPED_TRACE(cat(name, " pp=", pp, " m=", m, " v=", v));
          const std::string constraint = expected_constraint(name, pp, m, v);
          Schedule s;
          try {
            s = generate_schedule(name, pp, m, v);
          } catch (const Error& e) {
            std::string msg = e.what();
            EXPECT_FALSE(constraint.empty()) << "refused unexpectedly: " << msg;
            EXPECT_NE(msg.find(constraint), std::string::npos) << msg;
            EXPECT_NE(msg.find(name), std::string::npos) << msg;
            EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
            ++refused;
            continue;
          }
          ASSERT_TRUE(constraint.empty()) << "accepted a shape it cannot run";
          EXPECT_EQ(s.name, name);
          EXPECT_EQ(s.stages_per_rank, v);
          EXPECT_NO_THROW(validate(s));
          Schedule lowered = lower(s);
          EXPECT_NO_THROW(validate(lowered, {0, true}));
          EXPECT_EQ(compute_only(lowered).program, s.program);
          // The other backward form is valid too.
          EXPECT_NO_THROW(validate(uses_split_backward(s.program) ? merge_backward(s)
                                                                  : split_backward(s)));
          SimResult sim = unit_sim(lowered);
          // Every rank does m forwards and m backwards of each of its v stages.
          for (double busy : sim.busy) EXPECT_NEAR(busy, 3.0 * m, 1e-9);
          EXPECT_GE(sim.bubble_ratio, -1e-12);
          ++accepted;
        }
      }
    }
  }
  EXPECT_GT(accepted, 2000);
  EXPECT_GT(refused, 0);
}

TEST(ScheduleGrid, UnknownNameAndBadShapesAreOneLineErrors) {
  auto message = [](auto fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string unknown = message([] { generate_schedule("zb-h3", 4, 8, 1); });
  EXPECT_NE(unknown.find("unknown schedule 'zb-h3'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("zbv"), std::string::npos) << unknown;
  EXPECT_NE(message([] { generate_schedule("1f1b", 0, 8, 1); }).find("pp must be >= 1"),
            std::string::npos);
  EXPECT_NE(message([] { generate_schedule("gpipe", 4, 0, 1); }).find("microbatches must be >= 1"),
            std::string::npos);
  EXPECT_EQ(message([] { generate_schedule("zbv", 4, 8, 3); }),
            "zbv needs exactly 2 stages per rank (got 3)");
  EXPECT_EQ(message([] { generate_schedule("dualpipev", 4, 6, 2); }),
            "dualpipev needs at least 2*pp-1 microbatches (pp=4: >= 7, got 6)");
  // stages_per_rank 0 picks the schedule's own.
  EXPECT_EQ(generate_schedule("zbv", 4, 8, 0).stages_per_rank, 2);
  EXPECT_EQ(generate_schedule("1f1b", 4, 8, 0).stages_per_rank, 1);
}

TEST(ScheduleBubble, GPipeAnd1F1BMatchTheClosedForm) {
  for (const char* name : {"gpipe", "1f1b"}) {
    for (int pp = 1; pp <= 8; ++pp) {
      for (int m = 1; m <= 32; ++m) {
        SCOPED_TRACE(cat(name, " pp=", pp, " m=", m));
        Schedule s = generate_schedule(name, pp, m, 1);
        SimResult sim = unit_sim(s);
        EXPECT_NEAR(sim.bubble_ratio, double(pp - 1) / (m + pp - 1), 1e-12);
        EXPECT_NEAR(sim.makespan, 3.0 * (m + pp - 1), 1e-9);
        std::vector<double> in_flight = peak_in_flight(s);
        for (int r = 0; r < pp; ++r) {
          // GPipe holds every microbatch; 1F1B at most p - r (p on the first rank).
          double expected = std::string(name) == "gpipe" ? m : std::min(m, pp - r);
          EXPECT_DOUBLE_EQ(in_flight[r], expected);
          EXPECT_DOUBLE_EQ(sim.peak_activations[r], expected);
        }
      }
    }
  }
}

// What `pptrain train` runs (runtime_form): a B as its I then W, the input gradient sent
// between them, the same compute in the same order. The rank before no longer waits for the
// W, which it does not need: never slower, faster wherever a stage sends to another rank,
// and no more activations held.
TEST(ScheduleBubble, TheRuntimeFormSendsAnInputGradientBeforeItsW) {
  for (const char* name : {"gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "dualpipev"})
    for (int v : stage_counts(name))
      for (int pp = 1; pp <= 4; ++pp)
        for (int m : {1, 4, 8}) {
          if (!expected_constraint(name, pp, m, v).empty()) continue;
          SCOPED_TRACE(cat(name, " v=", v, " pp=", pp, " m=", m));
          const Schedule as_generated = generate_schedule(name, pp, m, v);
          const Schedule run = runtime_form(as_generated);
          // Only the split: merged back, the program as lowered (DualPipeV's own I/W pairs
          // would merge too).
          if (!uses_split_backward(as_generated.program)) {
            EXPECT_EQ(merge_backward(run).program, lower(as_generated).program);
          }
          const SimResult before = unit_sim(as_generated), after = unit_sim(run);
          // 1e-9: makespans are sums of at most a few hundred durations of 1 or 1/v in double,
          // whose rounding stays many orders below it on any machine.
          EXPECT_LE(after.makespan, before.makespan + 1e-9);
          // At least one stage's W (w / v) sooner where a B's send ends the step's critical
          // path: every schedule here but DualPipeV, whose last sends come from its split
          // backwards.
          if (pp > 1 && name != std::string("dualpipev")) {
            EXPECT_LE(after.makespan, before.makespan - 1.0 / v + 1e-9);
          }
          EXPECT_EQ(after.peak_activations, before.peak_activations);
          // Every SEND_B follows its I before any other compute (the W comes after).
          for (const auto& actions : run.program) {
            Action last_compute{Op::F, -1, -1};
            for (const Action& a : actions) {
              if (is_compute(a.op)) last_compute = a;
              if (a.op == Op::SEND_B) {
                EXPECT_EQ(last_compute, (Action{Op::I, a.stage, a.microbatch}));
              }
            }
          }
        }
  // The 1F1B picture of `pptrain schedule --schedule 1f1b --pp 2 --microbatches 4`: 15 time
  // units as generated, 14 as run (the first rank's last backward starts a W sooner).
  EXPECT_DOUBLE_EQ(unit_sim(generate_schedule("1f1b", 2, 4, 1)).makespan, 15.0);
  EXPECT_DOUBLE_EQ(unit_sim(runtime_form(generate_schedule("1f1b", 2, 4, 1))).makespan, 14.0);
}

TEST(ScheduleBubble, ZBH1IsAThirdOf1F1B) {
  // Bubble per rank (p-1)(T_F + T_I - T_W), for T_W = T_I and T_W = T_I / 2.
  for (double tw : {1.0, 0.5}) {
    for (int pp = 1; pp <= 8; ++pp) {
      for (int m = pp; m <= 32; ++m) {
        SCOPED_TRACE(cat("T_W=", tw, " pp=", pp, " m=", m));
        Schedule s = generate_schedule("zb-h1", pp, m, 1);
        SimResult sim = unit_sim(s, tw);
        for (int r = 0; r < pp; ++r) EXPECT_NEAR(sim.idle[r], (pp - 1) * (1 + 1 - tw), 1e-9);
        std::vector<double> in_flight = peak_in_flight(s);
        for (int r = 0; r < pp; ++r) EXPECT_DOUBLE_EQ(in_flight[r], pp - r);  // as 1F1B
      }
    }
  }
  // Unit costs: exactly a third of 1F1B's bubble time.
  SimResult zb = unit_sim(generate_schedule("zb-h1", 8, 24, 1));
  SimResult base = unit_sim(generate_schedule("1f1b", 8, 24, 1));
  EXPECT_NEAR(base.idle[0] / zb.idle[0], 3.0, 1e-12);
}

TEST(ScheduleBubble, ZBH2HasNoBubbleInsideItsSpan) {
  for (int pp = 1; pp <= 8; ++pp) {
    for (int m = 2 * pp - 1; m <= 32; ++m) {
      SCOPED_TRACE(cat("pp=", pp, " m=", m));
      Schedule s = generate_schedule("zb-h2", pp, m, 1);
      SimResult sim = unit_sim(s);
      for (int r = 0; r < pp; ++r) EXPECT_NEAR(sim.span_idle[r], 0, 1e-9);
      EXPECT_NEAR(sim.span_bubble_ratio, 0, 1e-12);
      // What is left is the start-up skew: rank r starts r forwards late.
      EXPECT_NEAR(sim.makespan, 3.0 * m + pp - 1, 1e-9);
      EXPECT_DOUBLE_EQ(peak_in_flight(s)[0], 2 * pp - 1);
      // T_W = T_I / 2: the first rank's bubble is (p-1)(T_F + T_I - 2 T_W).
      SimResult half = unit_sim(s, 0.5);
      EXPECT_NEAR(half.span_idle[0], (pp - 1) * (1 + 1 - 2 * 0.5), 1e-9);
    }
  }
}

TEST(ScheduleBubble, ZBVHasNoBubbleAndThePeakOf1F1B) {
  for (int pp = 1; pp <= 8; ++pp) {
    for (int m = 2 * pp - 1; m <= 32; ++m) {
      SCOPED_TRACE(cat("pp=", pp, " m=", m));
      Schedule s = generate_schedule("zbv", pp, m, 2);
      SimResult sim = unit_sim(s);
      for (int r = 0; r < pp; ++r) EXPECT_NEAR(sim.span_idle[r], 0, 1e-9);
      EXPECT_NEAR(sim.makespan, 3.0 * m + (pp - 1) * 0.5, 1e-9);
      // Peak: 2p half-size stages on every rank = p microbatches, 1F1B's first rank.
      double one_f_one_b = max_of(peak_in_flight(generate_schedule("1f1b", pp, m, 1)));
      EXPECT_DOUBLE_EQ(max_of(peak_in_flight(s)), one_f_one_b);
      EXPECT_DOUBLE_EQ(max_of(sim.peak_activations), one_f_one_b);
    }
  }
}

TEST(ScheduleBubble, InterleavedDividesThe1F1BBubbleByV) {
  for (int pp = 2; pp <= 8; ++pp) {
    for (int m = pp; m <= 32; ++m) {
      for (int v = 2; v <= 4; ++v) {
        SCOPED_TRACE(cat("pp=", pp, " m=", m, " v=", v));
        SimResult inter = unit_sim(generate_schedule("interleaved-1f1b", pp, m, v));
        SimResult base = unit_sim(generate_schedule("1f1b", pp, m, 1));
        // Bubble time (p-1)(T_F + T_B) / v on every rank.
        for (int r = 0; r < pp; ++r) {
          EXPECT_NEAR(inter.idle[r], 3.0 * (pp - 1) / v, 1e-9);
          EXPECT_NEAR(base.idle[r] / inter.idle[r], v, 1e-9);
        }
        EXPECT_NEAR(inter.bubble_ratio, double(pp - 1) / (v * m + pp - 1), 1e-12);
      }
    }
  }
}

TEST(ScheduleBubble, LoopedBFSKeepsThePipelineFullAcrossStages) {
  for (int pp = 2; pp <= 8; ++pp) {
    for (int m = pp; m <= 32; m += 3) {
      for (int v = 1; v <= 3; ++v) {
        SCOPED_TRACE(cat("pp=", pp, " m=", m, " v=", v));
        Schedule s = generate_schedule("looped-bfs", pp, m, v);
        SimResult sim = unit_sim(s);
        EXPECT_NEAR(sim.bubble_ratio, double(pp - 1) / (v * m + pp - 1), 1e-12);
        EXPECT_DOUBLE_EQ(peak_in_flight(s)[0], m);  // all microbatches, as GPipe
      }
    }
  }
}

TEST(ScheduleBubble, DualPipeVStaysCloseToZeroBubble) {
  // The folded DualPipe pairs F and B of different chunks; without their overlap it keeps
  // a small bubble, far below 1F1B's, at about 1F1B's memory.
  for (int pp = 2; pp <= 8; ++pp) {
    int m = 3 * pp;
    SCOPED_TRACE(cat("pp=", pp));
    Schedule s = generate_schedule("dualpipev", pp, m, 2);
    SimResult sim = unit_sim(s);
    SimResult base = unit_sim(generate_schedule("1f1b", pp, m, 1));
    EXPECT_LT(sim.bubble_ratio, base.bubble_ratio / 2);
    EXPECT_LE(max_of(peak_in_flight(s)), pp + 1);
  }
}

TEST(ScheduleBubble, CommunicationLatencyIsPaidOnCrossRankEdgesOnly) {
  // 1F1B at p=2, m=1: F0 on rank 0, F0 and B0 on rank 1, B0 on rank 0: two messages.
  CostModel cost;
  cost.comm = 0.25;
  SimResult sim = simulate(generate_schedule("1f1b", 2, 1, 1), cost);
  EXPECT_NEAR(sim.makespan, 1 + 0.25 + 1 + 2 + 0.25 + 2, 1e-12);
  // ZB-V at p=1: both stages on one rank, nothing to send.
  SimResult local = simulate(generate_schedule("zbv", 1, 4, 2), cost);
  EXPECT_NEAR(local.makespan, 12, 1e-12);
}

TEST(ScheduleBubble, PerStageCosts) {
  // GPipe, 2 ranks, 2 microbatches; stage 1 costs twice stage 0 (F = I = W = 1 vs 2).
  CostModel cost;
  cost.stage_forward = {1, 2};
  cost.stage_input_grad = {1, 2};
  cost.stage_weight_grad = {1, 2};
  SimResult sim = simulate(generate_schedule("gpipe", 2, 2, 1), cost);
  // rank 1: F0 [1,3] F1 [3,5] B0 [5,9] B1 [9,13]; rank 0: B0 [9,11] B1 [13,15].
  EXPECT_NEAR(sim.makespan, 15, 1e-12);
  EXPECT_NEAR(sim.busy[0], 6, 1e-12);
  EXPECT_NEAR(sim.busy[1], 12, 1e-12);
  EXPECT_NEAR(sim.bubble_ratio, 1 - 18.0 / 30, 1e-12);
  cost.stage_forward = {1, 2, 3};
  try {
    simulate(generate_schedule("gpipe", 2, 2, 1), cost);
    ADD_FAILURE() << "accepted 3 per-stage costs for 2 stages";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "cost model: 3 per-stage costs for 2 stages");
  }
}

TEST(ScheduleBubble, CostSpecParsesAndRejectsBadKeys) {
  CostModel c = parse_cost("f=1,i=1.5,w=0.5,comm=0.1,act_i=0.75,act_w=0.25,act_from_i=0.5");
  EXPECT_DOUBLE_EQ(c.input_grad, 1.5);
  EXPECT_DOUBLE_EQ(c.act_from_input, 0.5);
  EXPECT_DOUBLE_EQ(c.weight_grad, 0.5);
  EXPECT_DOUBLE_EQ(c.comm, 0.1);
  EXPECT_EQ(to_string(c), "f=1,i=1.5,w=0.5,comm=0.1,act_i=0.75,act_w=0.25,act_from_i=0.5");
  auto error = [](const char* spec) {
    try {
      parse_cost(spec);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(error("f=1,x=2"), "--cost 'f=1,x=2': unknown key 'x' (f, i, w, comm, act_i, act_w, act_from_i)");
  EXPECT_EQ(error("w=-1"), "--cost 'w=-1': w needs a number >= 0 (got '-1')");
  EXPECT_EQ(error("i"), "--cost 'i': 'i' is not KEY=NUMBER (keys f, i, w, comm, act_i, act_w, act_from_i, e.g. "
                       "f=1,i=1,w=1); a cost file of `pptrain profile` is for the planner (parallel.profile=FILE), "
                       "not a schedule");
  EXPECT_EQ(error("i="), "--cost 'i=': i needs a number >= 0 (got '')");
}

TEST(ScheduleBubble, MemoryFreedAtIAndAtW) {
  // ZB-H1, last rank: 1 microbatch waits for I and up to p-1 for W (paper: (p-i+1)M_B +
  // (i-1)M_W for worker i, 1-based). With act_i = 1, act_w = 0.25 that is 1 + 0.25 (p-1),
  // plus the microbatch whose F just ran (counted from the start of its F).
  const int pp = 4;
  CostModel cost;
  cost.act_input = 1;
  cost.act_weight = 0.25;
  SimResult sim = simulate(generate_schedule("zb-h1", pp, 12, 1), cost);
  EXPECT_NEAR(sim.peak_activations[0], pp * 1.25, 1e-12);          // W right after I
  EXPECT_NEAR(sim.peak_activations[pp - 1], 1.25 + 0.25 * (pp - 1), 1e-12);
}
