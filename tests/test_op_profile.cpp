// The op profile (backend/profiled_ops.h, logging.op_profile): the profiler forwards every
// op unchanged and counts each call once, with the FLOPs and bytes its arguments imply;
// only the ops between begin_step and end_step count; a timed op's milliseconds come from
// the backend's clock; a training run prints every rank's table and writes each rank's
// JSON, with the same losses as without it, on cpu, under mpirun, and on the emulated cuda
// backend (whose clock is CUDA events on its stream).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "backend/profiled_ops.h"
#include "support/forwarding_ops.h"
#include "core/config.h"
#include "core/error.h"
#include "support/cpu_ops_util.h"
#include "support/test_util.h"

namespace pptrain {
namespace {

using testing::random_floats;
using testing::run_command;

const ProfiledOps::OpStats& stats_of(const ProfiledOps& p, OpId id) { return p.stats()[size_t(id)]; }

TEST(OpProfile, ForwardsUnchangedAndCountsEachCallWithItsCost) {
  ProfiledOps profiled(make_cpu_ops());
  std::unique_ptr<Ops> plain = make_cpu_ops();
  const int n = 6, in = 5, out = 7;
  const std::vector<float> x = random_floats(n * in, 1), w = random_floats(out * in, 2), b = random_floats(out, 3);
  std::vector<float> y1(n * out), y2(n * out), g1(n * out), g2(n * out);

  profiled.linear_forward(y1.data(), x.data(), w.data(), b.data(), n, in, out);  // outside a step: not counted
  profiled.begin_step();
  profiled.linear_forward(y1.data(), x.data(), w.data(), b.data(), n, in, out);
  profiled.gelu_forward(g1.data(), y1.data(), size_t(n) * out);
  profiled.gelu_forward(g1.data(), y1.data(), size_t(n) * out);
  const double ss = profiled.sum_squares(g1.data(), g1.size());  // an op with a result
  profiled.end_step(5.0);
  plain->linear_forward(y2.data(), x.data(), w.data(), b.data(), n, in, out);
  plain->gelu_forward(g2.data(), y2.data(), size_t(n) * out);
  EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(g1.data(), g2.data(), g1.size() * sizeof(float)), 0);
  EXPECT_EQ(ss, plain->sum_squares(g2.data(), g2.size()));

  EXPECT_EQ(profiled.steps(), 1);
  EXPECT_EQ(profiled.step_ms(), 5.0);
  const auto& lin = stats_of(profiled, OpId::linear_forward);
  EXPECT_EQ(lin.calls, 1);
  EXPECT_EQ(lin.flops, 2.0 * n * in * out);
  EXPECT_EQ(lin.bytes, 4.0 * (n * in + in * out + n * out));
  EXPECT_EQ(stats_of(profiled, OpId::gelu_forward).calls, 2);
  EXPECT_EQ(stats_of(profiled, OpId::gelu_forward).bytes, 2 * 2.0 * 4 * n * out);
  EXPECT_EQ(stats_of(profiled, OpId::sum_squares).calls, 1);
  EXPECT_EQ(stats_of(profiled, OpId::gelu_backward).calls, 0);
  for (const auto& s : profiled.stats()) EXPECT_GE(s.ms, 0.0);
}

// An op's time is its own, between the marks around it, on the backend's clock: a clock
// whose marks are set by hand shows each call's difference and nothing of the gaps.
class ScriptedClock final : public OpClock {
 public:
  explicit ScriptedClock(std::vector<double> times) : times_(std::move(times)) {}
  void mark(size_t i) override { marked_ = std::max(marked_, i + 1); }
  std::vector<double> resolve(size_t n) override {
    EXPECT_EQ(n, marked_);
    return {times_.begin(), times_.begin() + n};
  }

 private:
  std::vector<double> times_;
  size_t marked_ = 0;
};

class ScriptedOps final : public testing::ForwardingOps {
 public:
  explicit ScriptedOps(std::vector<double> times) : times_(std::move(times)) {}
  std::string name() const override { return "scripted"; }
  std::unique_ptr<OpClock> make_op_clock() override { return std::make_unique<ScriptedClock>(times_); }

 private:
  std::vector<double> times_;
};

TEST(OpProfile, AnOpsTimeIsTheDifferenceOfItsOwnMarks) {
  // Marks: scale [0, 2], gap, scale [5, 6], gap, add [10, 13].
  ProfiledOps p(std::make_unique<ScriptedOps>(std::vector<double>{0, 2, 5, 6, 10, 13}));
  std::vector<float> a(8, 1.0f), b(8, 2.0f);
  p.begin_step();
  p.scale(a.data(), 2.0f, a.size());
  p.scale(a.data(), 2.0f, a.size());
  p.add(a.data(), a.data(), b.data(), a.size());
  p.end_step(20.0);
  EXPECT_EQ(stats_of(p, OpId::scale).ms, 3.0);
  EXPECT_EQ(stats_of(p, OpId::add).ms, 3.0);
  EXPECT_EQ(p.busy_ms(), 6.0);
  const std::string table = p.table(0, 0);
  EXPECT_NE(table.find("op profile, rank 0, 1 step of 20.00 ms: ops busy 6.00 ms (30.0% of the step, scripted)"),
            std::string::npos)
      << table;
  EXPECT_LT(table.find("  add "), table.find("  scale "));  // equal times: ops.h's order
  const std::string json = p.json(3, 0);
  EXPECT_NE(json.find("\"rank\": 3, \"backend\": \"scripted\", \"steps\": 1, \"step_ms\": 20.0000, "
                      "\"busy_ms\": 6.0000, \"busy_fraction\": 0.3000"),
            std::string::npos)
      << json;
}

TEST(OpProfile, TheHostClockTimesWhatTheCallTakes) {
  ProfiledOps p(make_cpu_ops());
  std::vector<float> y(1 << 20);
  p.begin_step();
  const auto t0 = std::chrono::steady_clock::now();
  p.zero(y.data(), y.size() * sizeof(float));
  const double outer = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  p.end_step(outer);
  EXPECT_GT(stats_of(p, OpId::zero).ms, 0.0);
  EXPECT_LE(stats_of(p, OpId::zero).ms, outer);
}

// The key's bounds, in one line each.
TEST(OpProfile, ConfigKeys) {
  EXPECT_EQ(parse_config("logging: {op_profile: 3, op_profile_file: p.json}\n", "t.yaml").logging.op_profile, 3);
  try {
    parse_config("logging: {op_profile_file: p.json}\n", "t.yaml");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "t.yaml: key 'logging.op_profile_file': needs logging.op_profile > 0 (the steps to profile)");
  }
}

// A run: the table of every rank, in rank order, and each rank's JSON; the same losses as
// without the profile (it only reads clocks).
std::string losses_of(const std::string& out) {
  std::string l;
  for (size_t at = out.find("| loss "); at != std::string::npos; at = out.find("| loss ", at + 1))
    l += out.substr(at, out.find(" |", at + 2) - at) + ";";
  return l;
}

void check_run(const std::string& launcher, const std::string& bin, const std::string& device, int ranks) {
  testing::TempDir dir;
  auto data = testing::prepare_markov_corpus(dir.file("data"), 19, 6000, 5);
  ASSERT_EQ(data.exit_code, 0) << data.output;
  testing::write_file(dir.file("c.yaml"),
                      "device: " + device + "\n"
                      "model: {n_layer: 2, n_head: 2, d_model: 16, seq_len: 8, vocab_size: 19}\n"
                      "parallel: {pp: " + std::to_string(ranks) + ", microbatches: 2}\n"
                      "training: {steps: 4, micro_batch_size: 2, lr: 1.0e-2, warmup_steps: 0, eval_every: 0}\n"
                      "data: {train: '" + dir.file("data") + "/train_*.bin'}\n"
                      "logging: {every: 1, sample_tokens: 0}\n");
  const std::string json = dir.file("prof.json");
  const std::string trace = dir.file("trace.json");
  auto profiled = run_command(launcher + bin + " train " + dir.file("c.yaml") + " logging.op_profile=2 " +
                                  "logging.op_profile_file=" + json + " logging.trace=" + trace + " 2>&1",
                              300);
  ASSERT_EQ(profiled.exit_code, 0) << profiled.output;
  auto plain = run_command(launcher + bin + " train " + dir.file("c.yaml") + " 2>&1", 300);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(losses_of(profiled.output), losses_of(plain.output));
  EXPECT_FALSE(losses_of(plain.output).empty());
  size_t last = 0;
  for (int r = 0; r < ranks; ++r) {
    const size_t at = profiled.output.find("op profile, rank " + std::to_string(r) + ", 2 steps of ");
    ASSERT_NE(at, std::string::npos) << profiled.output;
    EXPECT_GE(at, last) << "rank order";
    last = at;
    const std::string doc = testing::read_file(r == 0 ? json : json + ".rank" + std::to_string(r));
    EXPECT_NE(doc.find("\"rank\": " + std::to_string(r) + ", \"backend\": \"" + device + "\", \"steps\": 2"),
              std::string::npos)
        << doc;
    EXPECT_NE(doc.find("{\"op\": \"linear_forward\", \"calls_per_step\": "), std::string::npos) << doc;
    // Busy within the step (the ops are part of it): at most 1, with the print's rounding.
    const std::vector<double> busy = testing::json_values(doc, "busy_fraction");
    ASSERT_EQ(busy.size(), 1u) << doc;
    EXPECT_GT(busy[0], 0.0);
    EXPECT_LE(busy[0], 1.0001);
    // Each call of the two profiled steps is a slice on the rank's op track of the trace,
    // none starting before the run's time line does.
    double calls = 0;
    const std::regex per_step("\"calls_per_step\": ([0-9.]+)");
    for (auto it = std::sregex_iterator(doc.begin(), doc.end(), per_step); it != std::sregex_iterator(); ++it)
      calls += 2 * std::stod((*it)[1]);
    const std::string text = testing::read_file(trace);
    const std::regex op_slice("\"cat\": \"op\", \"ph\": \"X\", \"pid\": " + std::to_string(r) +
                              ", \"tid\": 3, \"ts\": ([-0-9.e+]+)");
    int slices = 0;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), op_slice); it != std::sregex_iterator(); ++it) {
      ++slices;
      EXPECT_GE(std::stod((*it)[1]), 0.0) << (*it)[0];
    }
    EXPECT_EQ(slices, int(calls + 0.5)) << "rank " << r;
  }
  EXPECT_NE(profiled.output.find(" linear_backward_weight "), std::string::npos) << profiled.output;
}

TEST(OpProfileRun, CpuOneRank) { check_run("OMP_NUM_THREADS=1 ", testing::pptrain_bin(), "cpu", 1); }
TEST(OpProfileRun, CpuPipelineOfTwoRanks) { check_run(testing::mpirun(2), testing::pptrain_bin(), "cpu", 2); }
TEST(OpProfileRun, EmulatedCudaEvents) { check_run("", testing::pptrain_emu_bin(), "cuda", 1); }

}  // namespace
}  // namespace pptrain
