// The exact stage partitioner (partition/partitioner.h): the simulator's formulas (timing
// graph, memory points) reproduce simulate() for every schedule; stage_cost_model sums the
// layers; the partition equals brute force (every split simulated) for every schedule,
// with and without a memory limit; an infeasible limit names the smallest that fits; a
// heavy head goes to a stage of its own. The 128-blocks-into-16-stages cases print their
// solve time (not asserted: timing is noisy on a shared machine).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>

#include "core/config.h"
#include "core/error.h"
#include "partition/partition.h"
#include "partition/partitioner.h"
#include "pipeline/lower.h"
#include "pipeline/registry.h"
#include "pipeline/simulate.h"
#include "support/layer_costs.h"
#include "support/test_util.h"

using namespace pptrain;
using pipeline::Schedule;
using pptrain::testing::layer;
using pptrain::testing::max_of;

namespace {

// The stages per rank a schedule is tried with here, and its pp for a small chain.
int stages_per_rank(const std::string& name) { return pipeline::default_stages_per_rank(name); }

Schedule small_program(const std::string& name, int pp, int m) {
  return pipeline::generate_schedule(name, pp, m, stages_per_rank(name));
}

struct NamedProfile {
  std::string name;
  CostProfile prof;
};

// Unequal costs: a heavy head, a heavy embedding, and a slow link.
std::vector<NamedProfile> small_profiles() {
  std::vector<NamedProfile> out(3);
  out[0].name = "heavy head";
  out[0].prof.embedding = layer(0.1, 0, 0.1, 3, 0, 500, 1000);
  out[0].prof.block = layer(1, 1.1, 0.7, 10, 4, 100, 200);
  out[0].prof.head = layer(3, 3.2, 2.5, 40, 12, 500, 1000);
  out[1].name = "heavy embedding";
  out[1].prof.embedding = layer(2.6, 0, 2.1, 25, 0, 900, 1800);
  out[1].prof.block = layer(1, 1.3, 0.6, 10, 6, 100, 200);
  out[1].prof.head = layer(0.4, 0.5, 0.3, 8, 2, 50, 100);
  out[1].prof.transfer_ms = 0.3;
  out[2].name = "slow link";
  out[2].prof.embedding = layer(0.2, 0, 0.3, 2, 0, 300, 600);
  out[2].prof.block = layer(0.9, 1, 0.9, 12, 3, 120, 240);
  out[2].prof.head = layer(1.5, 1.7, 1.2, 20, 7, 300, 600);
  out[2].prof.transfer_ms = 0.8;
  return out;
}

// Every split of n_layer blocks into `stages` stages (first and last may be empty).
void for_each_split(int n_layer, int stages, const std::function<void(const std::vector<int>&)>& visit) {
  std::vector<int> n(stages, 0);
  std::function<void(int, int)> fill = [&](int s, int left) {
    if (s == stages - 1) {
      n[s] = left;
      visit(n);
      return;
    }
    for (int k = (s == 0 ? 0 : 1); k <= left; ++k) {
      n[s] = k;
      fill(s + 1, left - k);
    }
  };
  fill(0, n_layer);
}

struct BruteForce {
  double best_step = INFINITY;  // among the splits that fit
  double least_peak = INFINITY; // the smallest largest-peak of any split
  std::vector<double> peaks;    // every split's largest peak
};

BruteForce brute_force(const CostProfile& prof, const Schedule& lowered, int n_layer, double limit) {
  BruteForce out;
  for_each_split(n_layer, lowered.num_stages(), [&](const std::vector<int>& n) {
    const SplitEvaluation e = evaluate_split(prof, lowered, n);
    const double peak = max_of(e.peak_bytes);
    out.peaks.push_back(peak);
    out.least_peak = std::min(out.least_peak, peak);
    if (limit <= 0 || peak <= limit) out.best_step = std::min(out.best_step, e.step_ms);
  });
  return out;
}

// A limit between two neighbouring peaks near the middle: about half the splits fit.
double middle_limit(std::vector<double> peaks) {
  std::sort(peaks.begin(), peaks.end());
  peaks.erase(std::unique(peaks.begin(), peaks.end()), peaks.end());
  const size_t i = peaks.size() / 2;
  return i == 0 ? peaks[0] * 1.5 : (peaks[i - 1] + peaks[i]) / 2;
}

void expect_split_shape(const std::vector<int>& n, int n_layer) {
  int sum = 0;
  for (size_t s = 0; s < n.size(); ++s) {
    if (s != 0 && s + 1 != n.size()) {
      EXPECT_GE(n[s], 1) << "stage " << s;
    }
    EXPECT_GE(n[s], 0);
    sum += n[s];
  }
  EXPECT_EQ(sum, n_layer);
}

std::string split_text(const std::vector<int>& n) {
  std::string out;
  for (int k : n) out += cat(out.empty() ? "[" : ",", k);
  return out + "]";
}

}  // namespace

// ---- the simulator's formulas ----------------------------------------------------------

TEST(TimingGraph, StartsAndPeaksEqualTheSimulatorsForEverySchedule) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> cost(0.1, 3.0);
  for (const std::string& name : pipeline::schedule_names()) {
    for (int pp : {1, 2, 3, 4}) {
      const int m = 2 * pp + 1;
      SCOPED_TRACE(cat(name, " pp=", pp, " m=", m));
      const Schedule s = pipeline::lower(small_program(name, pp, m));
      pipeline::CostModel c;
      c.comm = cost(rng) / 2;
      for (int st = 0; st < s.num_stages(); ++st) {
        c.stage_forward.push_back(cost(rng));
        c.stage_input_grad.push_back(cost(rng));
        c.stage_weight_grad.push_back(cost(rng));
        c.stage_act_input.push_back(cost(rng));
        c.stage_act_weight.push_back(cost(rng));
        c.stage_act_from_input.push_back(cost(rng));
      }
      const pipeline::SimResult sim = pipeline::simulate(s, c);

      const pipeline::TimingGraph g = pipeline::timing_graph(s);
      std::vector<double> durations;
      for (const pipeline::TimingNode& node : g.nodes) {
        const int st = node.action.stage;
        const double i = c.stage_input_grad[st], w = c.stage_weight_grad[st];
        switch (node.action.op) {
          case pipeline::Op::F: durations.push_back(c.stage_forward[st]); break;
          case pipeline::Op::I: durations.push_back(i); break;
          case pipeline::Op::W: durations.push_back(w); break;
          default: durations.push_back(i + w);
        }
      }
      const std::vector<double> start = pipeline::earliest_starts(g, durations, c.comm);
      // Every compute action starts when the simulator starts it.
      size_t checked = 0;
      for (int r = 0; r < s.pp; ++r)
        for (const pipeline::TimedAction& ta : sim.timeline[r]) {
          if (!pipeline::is_compute(ta.action.op)) continue;
          auto it = std::find_if(g.nodes.begin(), g.nodes.end(), [&](const pipeline::TimingNode& n) {
            return n.action == ta.action && n.rank == r;
          });
          ASSERT_NE(it, g.nodes.end()) << pipeline::to_string(ta.action);
          EXPECT_EQ(start[it - g.nodes.begin()], ta.start) << pipeline::to_string(ta.action);
          ++checked;
        }
      EXPECT_EQ(checked, g.nodes.size());
      double makespan = 0;
      for (int last : g.last_of_rank)
        if (last >= 0) makespan = std::max(makespan, start[last] + durations[last]);
      EXPECT_EQ(makespan, sim.makespan);

      std::vector<double> peak(s.pp, 0);
      for (const pipeline::MemoryPoint& p : pipeline::memory_points(s)) {
        double bytes = 0;
        for (int st = 0; st < s.num_stages(); ++st)
          bytes += p.input_live[st] * c.stage_act_input[st] + p.weight_live[st] * c.stage_act_weight[st] +
                   p.from_input_live[st] * c.stage_act_from_input[st];
        peak[p.rank] = std::max(peak[p.rank], bytes);
      }
      // The same double sums of small integer multiples, possibly in another order: equal up
      // to a few ulps of values below 1e3, far inside 1e-9.
      for (int r = 0; r < s.pp; ++r) EXPECT_NEAR(peak[r], sim.peak_activations[r], 1e-9) << "rank " << r;
    }
  }
}

TEST(Simulator, BytesTakenByIAreHeldFromIUntilW) {
  // Two stages, two microbatches, split backward. Per microbatch a stage takes at F
  // act_input (freed by I) and act_weight (kept until W), and at I act_from_input (kept
  // until W: a block's slot under full recompute), while F's bytes are still held.
  Schedule s;
  s.name = "hand";
  s.pp = 2;
  s.microbatches = 2;
  s.program.resize(2);
  for (const char* a : {"0F0", "0F1", "0I0", "0W0", "0I1", "0W1"}) s.program[0].push_back(pipeline::parse_action(a));
  for (const char* a : {"1F0", "1I0", "1F1", "1I1", "1W0", "1W1"}) s.program[1].push_back(pipeline::parse_action(a));
  pipeline::CostModel c;
  c.stage_act_input = {1, 1};
  c.stage_act_weight = {2, 3};
  c.stage_act_from_input = {5, 7};
  // rank 0: F0 3, F1 6, I0 6 + 5 = 11 (peak), then 10; W0 3; I1 8, then 7; W1 0.
  // rank 1: F0 4, I0 4 + 7 = 11, then 10; F1 14; I1 14 + 7 = 21 (peak), then 20; W0 10; W1 0.
  const pipeline::SimResult sim = pipeline::simulate(s, c);
  EXPECT_EQ(sim.peak_activations[0], 11);
  EXPECT_EQ(sim.peak_activations[1], 21);
  // Counted from F instead (the upper bound before I took bytes): rank 0 would peak at 16.
  pipeline::CostModel from_f = c;
  from_f.stage_act_weight = {2 + 5, 3 + 7};
  from_f.stage_act_from_input = {0, 0};
  EXPECT_EQ(pipeline::simulate(s, from_f).peak_activations[0], 16);
  // The memory points give the same peaks.
  std::vector<double> peak(2, 0);
  for (const pipeline::MemoryPoint& p : pipeline::memory_points(s)) {
    double bytes = 0;
    for (int st = 0; st < 2; ++st)
      bytes += p.input_live[st] * c.stage_act_input[st] + p.weight_live[st] * c.stage_act_weight[st] +
               p.from_input_live[st] * c.stage_act_from_input[st];
    peak[p.rank] = std::max(peak[p.rank], bytes);
  }
  EXPECT_EQ(peak[0], 11);
  EXPECT_EQ(peak[1], 21);
  // A full backward B takes them for its moment: F0 F1 B0 B1 on one rank peaks at 6 + 5.
  Schedule b;
  b.name = "hand-b";
  b.pp = 1;
  b.microbatches = 2;
  b.program.resize(1);
  for (const char* a : {"0F0", "0F1", "0B0", "0B1"}) b.program[0].push_back(pipeline::parse_action(a));
  pipeline::CostModel one;
  one.stage_act_input = {1};
  one.stage_act_weight = {2};
  one.stage_act_from_input = {5};
  EXPECT_EQ(pipeline::simulate(b, one).peak_activations[0], 11);
  // Bytes taken by I without the per-stage lists they add to are refused.
  pipeline::CostModel alone;
  alone.stage_act_from_input = {5};
  EXPECT_THROW(pipeline::simulate(b, alone), Error);
}

TEST(Simulator, PeakMemoryAddsTheStaticMemoryOfTheRanksStages) {
  const Schedule s = pipeline::generate_schedule("zbv", 2, 4, 2);  // V: rank 0 holds 0 and 3
  pipeline::CostModel c;
  c.stage_act_input = {1, 2, 3, 4};
  c.stage_act_weight = {0.5, 0.5, 0.5, 0.5};
  c.stage_static_memory = {100, 20, 3000, 400000};
  const pipeline::SimResult sim = pipeline::simulate(s, c);
  EXPECT_DOUBLE_EQ(sim.peak_memory[0], sim.peak_activations[0] + 400100);
  EXPECT_DOUBLE_EQ(sim.peak_memory[1], sim.peak_activations[1] + 3020);
  // Per-stage activations are absolute: not divided by the stages per rank.
  pipeline::CostModel same;
  same.stage_act_input = {1, 1, 1, 1};
  same.stage_act_weight = {0, 0, 0, 0};
  pipeline::CostModel unit;  // act_input = 1 for the rank's share of the model
  EXPECT_DOUBLE_EQ(pipeline::simulate(s, same).peak_activations[0],
                   2 * pipeline::simulate(s, unit).peak_activations[0]);
  // One list without the other is refused.
  pipeline::CostModel half;
  half.stage_act_input = {1, 1, 1, 1};
  EXPECT_THROW(pipeline::simulate(s, half), Error);
}

// ---- costs of a split --------------------------------------------------------------------

TEST(StageCostModel, SumsEmbeddingBlocksAndHead) {
  CostProfile p;
  p.embedding = layer(0.5, 0, 0.25, 7, 0, 1000, 2000);
  p.block = layer(2, 3, 1, 11, 5, 100, 200);
  p.head = layer(4, 6, 8, 13, 17, 10000, 20000);
  p.transfer_ms = 0.125;
  const pipeline::CostModel c = stage_cost_model(p, {0, 3, 2, 0});
  EXPECT_EQ(c.comm, 0.125);
  EXPECT_EQ(c.stage_forward, (std::vector<double>{0.5, 6, 4, 4}));
  EXPECT_EQ(c.stage_input_grad, (std::vector<double>{0, 9, 6, 6}));
  EXPECT_EQ(c.stage_weight_grad, (std::vector<double>{0.25, 3, 2, 8}));
  EXPECT_EQ(c.stage_act_input, (std::vector<double>{7, 33, 22, 13}));
  EXPECT_EQ(c.stage_act_weight, (std::vector<double>{0, 15, 10, 17}));
  EXPECT_EQ(c.stage_static_memory, (std::vector<double>{3000, 900, 600, 30000}));
  // One stage holds everything.
  const pipeline::CostModel one = stage_cost_model(p, {2});
  EXPECT_EQ(one.stage_forward, (std::vector<double>{8.5}));
  EXPECT_EQ(one.stage_static_memory, (std::vector<double>{3000 + 600 + 30000}));
}

TEST(EvaluateSplit, IsTheSimulationOfTheStageCostModel) {
  CostProfile p = small_profiles()[2].prof;
  const Schedule s = pipeline::generate_schedule("1f1b", 2, 4, 1);
  const SplitEvaluation e = evaluate_split(p, s, {3, 2});
  const pipeline::SimResult sim = pipeline::simulate(s, stage_cost_model(p, {3, 2}));
  EXPECT_EQ(e.step_ms, sim.makespan);
  EXPECT_EQ(e.peak_bytes, sim.peak_memory);
  EXPECT_THROW(evaluate_split(p, s, {5}), Error);
}

// ---- exactness ---------------------------------------------------------------------------

TEST(Partitioner, EqualsBruteForceForEveryScheduleWithAndWithoutAMemoryLimit) {
  for (const std::string& name : pipeline::schedule_names()) {
    const int v = stages_per_rank(name);
    for (int pp : v == 1 ? std::vector<int>{3, 4} : std::vector<int>{2}) {
      const int m = v == 1 ? pp + 2 : 2 * pp;  // dualpipev: at least 2p-1
      const int n_layer = pp * v == 3 ? 6 : 7;
      const Schedule program = small_program(name, pp, m);
      const Schedule lowered = pipeline::lower(program);
      for (const NamedProfile& np : small_profiles()) {
        const BruteForce all = brute_force(np.prof, lowered, n_layer, 0);
        for (double limit : {0.0, middle_limit(all.peaks)}) {
          SCOPED_TRACE(cat(name, " pp=", pp, " v=", v, " m=", m, " ", n_layer, " blocks, ", np.name,
                           ", limit ", limit));
          const BruteForce best = brute_force(np.prof, lowered, n_layer, limit);
          const Partition part = partition_stages(np.prof, program, n_layer, limit);
          expect_split_shape(part.blocks_per_stage, n_layer);
          // 1e-7 relative: GLPK's optimality tolerance; both sides are the simulator's makespan
          // of a split, so a different split within it is an equally good one.
          EXPECT_NEAR(part.step_ms, best.best_step, 1e-7 * best.best_step) << split_text(part.blocks_per_stage);
          const SplitEvaluation e = evaluate_split(np.prof, program, part.blocks_per_stage);
          EXPECT_EQ(part.step_ms, e.step_ms);
          EXPECT_EQ(part.peak_bytes, e.peak_bytes);
          if (limit > 0) {
            EXPECT_LE(max_of(part.peak_bytes), limit);
          }
        }
      }
    }
  }
}

TEST(Partitioner, MinMemoryPartitionEqualsBruteForce) {
  for (const std::string& name : {std::string("1f1b"), std::string("zb-h2"), std::string("zbv")}) {
    const int pp = stages_per_rank(name) == 2 ? 2 : 4;
    const Schedule program = small_program(name, pp, 6);
    for (const NamedProfile& np : small_profiles()) {
      SCOPED_TRACE(cat(name, " ", np.name));
      const BruteForce all = brute_force(np.prof, pipeline::lower(program), 8, 0);
      const Partition least = min_memory_partition(np.prof, program, 8);
      expect_split_shape(least.blocks_per_stage, 8);
      EXPECT_NEAR(max_of(least.peak_bytes), all.least_peak, 1e-7 * all.least_peak);  // GLPK's tolerance, as above
    }
  }
}

TEST(Partitioner, AnInfeasibleLimitNamesTheSmallestThatFits) {
  const NamedProfile np = small_profiles()[0];
  const Schedule program = small_program("zb-h1", 4, 6);
  const BruteForce all = brute_force(np.prof, pipeline::lower(program), 8, 0);
  const double smallest = std::ceil(all.least_peak);
  std::string message;
  try {
    partition_stages(np.prof, program, 8, all.least_peak * 0.99);
  } catch (const Error& e) {
    message = e.what();
  }
  ASSERT_FALSE(message.empty()) << "no error";
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  const std::string named = cat("the smallest limit that fits is ", std::llround(smallest), " bytes");
  EXPECT_NE(message.find(named), std::string::npos) << message;
  EXPECT_NE(message.find("zb-h1"), std::string::npos) << message;
  const Partition fits = partition_stages(np.prof, program, 8, smallest);
  EXPECT_LE(max_of(fits.peak_bytes), smallest);
  // Too few blocks for the stages: one line too.
  EXPECT_THROW(partition_stages(np.prof, program, 1, 0), Error);
}

TEST(Partitioner, AHeavyHeadGetsAStageOfItsOwn) {
  // GPT-2 with 8 blocks of d_model 256 and the full vocabulary: the head's projection is
  // about 2/3 of the work. Costs in proportion to the forward FLOPs (dgrad and wgrad of a
  // linear layer each as much as its forward).
  Config c;
  c.model.n_layer = 8;
  c.model.d_model = 256;
  c.model.n_head = 4;
  c.model.seq_len = 256;
  c.model.vocab_size = 50257;
  c.parallel.pp = 2;
  const double block = block_cost(c.model) / 1e6, head = head_cost(c.model) / 1e6;
  // The figure "the head alone is about two thirds of the work": 0.03 covers the
  // closed form's 0.654 at these shapes (a statement about the model, not a measurement).
  EXPECT_NEAR(head / (head + 8 * block), 2.0 / 3, 0.03);
  CostProfile p;
  p.n_layer = 8;
  p.block = layer(block, block, block, 1, 1, 1, 2);
  p.head = layer(head, head, head, 1, 1, 1, 2);
  p.embedding = layer(0.01, 0, 0.01, 0, 0, 1, 2);
  p.transfer_ms = 0.01;
  const std::vector<int> closed_form = blocks_per_stage(c);
  EXPECT_EQ(closed_form, (std::vector<int>{7, 1}));
  const Schedule program = pipeline::generate_schedule("1f1b", 2, 8, 1);
  const Partition part = partition_stages(p, program, 8, 0);
  EXPECT_EQ(part.blocks_per_stage, (std::vector<int>{8, 0}));
  EXPECT_LT(part.step_ms, evaluate_split(p, program, closed_form).step_ms);
}

// ---- size: 128 blocks into 16 stages -------------------------------------------------------

TEST(Partitioner, PrintsTheSolveTimeOf128BlocksInto16Stages) {
  CostProfile p;
  p.embedding = layer(0.4, 0, 0.3, 2e6, 0, 80e6, 160e6);
  p.block = layer(1, 1.1, 0.8, 30e6, 10e6, 28e6, 56e6);
  p.head = layer(6, 6.5, 5, 200e6, 60e6, 80e6, 160e6);
  p.transfer_ms = 0.05;
  struct Case {
    const char* name;
    int pp, m, v;
  };
  for (const Case& k : {Case{"1f1b", 16, 32, 1}, Case{"zb-h1", 16, 32, 1}, Case{"zbv", 8, 16, 2}}) {
    const Schedule program = pipeline::generate_schedule(k.name, k.pp, k.m, k.v);
    const Partition least = min_memory_partition(p, program, 128);
    for (double limit : {0.0, 1.05 * max_of(least.peak_bytes)}) {
      const auto t0 = std::chrono::steady_clock::now();
      const Partition part = partition_stages(p, program, 128, limit);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      expect_split_shape(part.blocks_per_stage, 128);
      std::printf("[ timing   ] %s pp=%d v=%d m=%d, 128 blocks, limit %s: %.3f s, step %.4g ms, split %s\n", k.name,
                  k.pp, k.v, k.m, limit > 0 ? cat(limit / 1e9, " GB").c_str() : "none", seconds, part.step_ms,
                  split_text(part.blocks_per_stage).c_str());
      std::fflush(stdout);
    }
  }
}
