// The pipeline executor's use of its waits (runtime/executor.h): while a receive has not
// arrived, it asks its stages to prepare the weights their passes will read
// (Stage::prepare_weights), in the order the program first needs them, and stops as soon as
// the receive is there; never a stage before its first F, where ZeRO-1 has gathered its
// weights (the before_first_forward hook); the time shows on the timeline as "prepare".
//
// One pipeline rank runs alone here, on stand-ins: stages that log what they are asked, and
// a communicator whose receives arrive after a set number of polls (the executor's test()
// calls), so every interleaving is exact and repeatable. And a real stage (GPT-2's blocks and
// Llama's, with the head) asks for exactly the weights, shapes and order its passes then
// give the linear ops.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "core/communicator.h"
#include "model/stage.h"
#include "pipeline/registry.h"
#include "runtime/executor.h"
#include "runtime/timeline.h"
#include "support/forwarding_ops.h"
#include "support/single_rank_model.h"

namespace pptrain {
namespace {

using Log = std::vector<std::string>;

// A receive that arrives at its `polls`-th test() (or at wait()); sends are done at once.
class PolledRequest final : public Request {
 public:
  explicit PolledRequest(int polls) : left_(polls) {}
  void wait() override { left_ = 0; }
  bool test() override { return left_ <= 0 || --left_ <= 0; }

 private:
  int left_;
};

class StandInComm final : public Communicator {
 public:
  explicit StandInComm(int polls) : polls_(polls) {}
  int rank() const override { return 1; }
  int size() const override { return 2; }
  void allreduce(float*, size_t, ReduceOp) override {}
  void allreduce(double*, size_t, ReduceOp) override {}
  void allreduce(bfloat16*, size_t, ReduceOp) override {}
  void reduce_scatter(const float*, float*, size_t, ReduceOp) override {}
  void allgather(float*, size_t) override {}
  void allgather(bfloat16*, size_t) override {}
  void broadcast(void*, size_t, int) override {}
  void barrier() override {}
  std::unique_ptr<Request> isend(const void*, size_t, int, int) override { return std::make_unique<PolledRequest>(0); }
  std::unique_ptr<Request> irecv(void*, size_t, int, int) override { return std::make_unique<PolledRequest>(polls_); }

 private:
  int polls_;
};

// A stage of `weights` weights that logs its passes and each weight it is asked to prepare
// ("prepare 2 I w1"). `keeps`: whether the backend keeps prepared copies (else the stage
// stops at the first weight, as Ops::prepare_linear_weight's false says).
class StandInStage final : public Stage {
 public:
  StandInStage(int index, bool head, Log& log, bool keeps) : log_(log), keeps_(keeps) {
    spec_.index = index;
    spec_.has_head = head;
  }
  const StageSpec& spec() const override { return spec_; }
  Precision precision() const override { return Precision::fp32; }
  size_t transfer_bytes() const override { return kBytes; }
  void* input(int mb) override { return buffer(in_, mb); }
  void forward(int mb, const MicrobatchData&) override { event("F", mb); }
  const void* output(int mb) override { return buffer(out_, mb); }
  void* output_grad(int mb) override { return buffer(out_grad_, mb); }
  void backward_input(int mb) override { event("I", mb); }
  const void* input_grad(int mb) override { return buffer(in_grad_, mb); }
  void backward_weight(int mb, bool) override { event("W", mb); }
  void skip_weight(int, bool) override {}
  void release(int) override {}
  void discard(int) override {}
  double loss_sum(int) override { return 0; }
  void set_loss_scale(float) override {}
  void head_dlogits_row(int, int, float*) override {}
  size_t activation_bytes_per_microbatch() const override { return 0; }
  size_t layer_slot_bytes() const override { return 0; }
  size_t layer_slot_bytes_from_input() const override { return 0; }
  size_t scratch_bytes() const override { return 0; }
  size_t live_microbatches() const override { return 0; }
  int prepare_weights(bool dgrad, int from, const std::function<bool()>& keep_going) override {
    for (int w = from; w < kWeights; ++w) {
      if (!keep_going()) return w;
      log_.push_back("prepare " + std::to_string(spec_.index) + (dgrad ? " I w" : " F w") + std::to_string(w));
      if (!keeps_) return kNothingKept;
    }
    return kAllAsked;
  }
  static constexpr int kWeights = 3;

 private:
  static constexpr size_t kBytes = 64;
  void* buffer(std::map<int, std::vector<char>>& at, int mb) {
    auto& b = at[mb];
    b.resize(kBytes);
    return b.data();
  }
  void event(const char* pass, int mb) {
    log_.push_back(std::string(pass) + " " + std::to_string(spec_.index) + " " + std::to_string(mb));
  }
  StageSpec spec_;
  Log& log_;
  bool keeps_;
  std::map<int, std::vector<char>> in_, out_, out_grad_, in_grad_;
};

struct RankRun {
  Log log;
  Timeline timeline;
};

// Pipeline rank 1 of a pp 2 schedule with m microbatches, each receive arriving at its
// `polls`-th poll; the hook logs "gathered S" before each stage's first F.
RankRun run_rank1(const std::string& schedule, int m, int polls, bool keeps = true) {
  RankRun r;
  const pipeline::Schedule s = pipeline::prepare_schedule(schedule, 2, m, 0);
  std::vector<std::unique_ptr<StandInStage>> owned;
  std::map<int, Stage*> stages;
  const int total = 2 * s.stages_per_rank;
  for (int stage = 0; stage < total; ++stage)
    if (pipeline::rank_of_stage(s.placement, stage, 2) == 1) {
      owned.push_back(std::make_unique<StandInStage>(stage, stage == total - 1, r.log, keeps));
      stages[stage] = owned.back().get();
    }
  auto ops = make_cpu_ops();
  StandInComm comm(polls);
  PipelineExecutor exec(*ops, stages, s, 1, comm);
  PipelineExecutor::StageHooks hooks;
  hooks.before_first_forward = [&r](int stage) { r.log.push_back("gathered " + std::to_string(stage)); };
  exec.set_stage_hooks(hooks);
  r.timeline.start_step();
  exec.run(std::vector<MicrobatchData>(m), r.timeline);
  return r;
}

size_t position(const Log& log, const std::string& entry) {
  return size_t(std::find(log.begin(), log.end(), entry) - log.begin());
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

TEST(ExecutorPrepare, AStageIsPreparedOnlyAfterItsWeightsAreGathered) {
  // ZB-V: rank 1 holds stages 1 and 2 and waits for stage 1's input before stage 2's first F.
  for (const int polls : {2, 5, 50}) {
    const RankRun r = run_rank1("zbv", 4, polls);
    for (const std::string stage : {"1", "2"}) {
      const size_t gathered = position(r.log, "gathered " + stage);
      ASSERT_LT(gathered, r.log.size()) << stage;
      for (size_t i = 0; i < gathered; ++i)
        EXPECT_FALSE(starts_with(r.log[i], "prepare " + stage + " ")) << "polls " << polls << ": " << r.log[i]
                                                                       << " before stage " << stage << " was gathered";
    }
  }
}

TEST(ExecutorPrepare, WaitsPrepareInTheOrderThePassesNeedTheWeightsAndStopWhenTheReceiveArrives) {
  // 1F1B, last rank: its first receive is stage 1's input, and F then I of stage 1 follow.
  // Polled 50 times, the wait is long enough for all 6 weights, forward's first; every pass
  // then finds its weights made. Arriving at the third poll: the wait's first poll and the
  // one before the first weight find it missing, the one before the second weight finds it
  // there: one weight, then F 1 0.
  const RankRun slow = run_rank1("1f1b", 4, 50);
  const Log want_slow = {"gathered 1",    "prepare 1 F w0", "prepare 1 F w1", "prepare 1 F w2",
                         "prepare 1 I w0", "prepare 1 I w1", "prepare 1 I w2", "F 1 0"};
  ASSERT_GE(slow.log.size(), want_slow.size());
  EXPECT_EQ(Log(slow.log.begin(), slow.log.begin() + long(want_slow.size())), want_slow);
  EXPECT_EQ(std::count_if(slow.log.begin(), slow.log.end(), [](auto& e) { return starts_with(e, "prepare"); }), 6)
      << "each weight once a step";
  const RankRun fast = run_rank1("1f1b", 4, 3);
  const Log want_fast = {"gathered 1", "prepare 1 F w0", "F 1 0"};
  ASSERT_GE(fast.log.size(), want_fast.size());
  EXPECT_EQ(Log(fast.log.begin(), fast.log.begin() + 3), want_fast);
  // Each next wait goes on where the last stopped, one weight each (3 polls again).
  for (int w = 1; w < StandInStage::kWeights; ++w) {
    const size_t at = position(fast.log, "prepare 1 F w" + std::to_string(w));
    ASSERT_LT(at, fast.log.size()) << w;
    // The last stage runs F, I, W of a microbatch, then waits for the next one's input.
    EXPECT_EQ(fast.log.at(at - 1), "W 1 " + std::to_string(w - 1)) << "weight " << w << " in the wait for microbatch " << w;
  }
}

TEST(ExecutorPrepare, ABackendThatKeepsNoCopiesIsAskedOnceAStepAndLeavesNoSlice) {
  const RankRun r = run_rank1("1f1b", 4, 50, /*keeps=*/false);
  EXPECT_EQ(std::count_if(r.log.begin(), r.log.end(), [](auto& e) { return starts_with(e, "prepare"); }), 1);
  for (const TimedEvent& e : r.timeline.events()) EXPECT_NE(e.name, "prepare");
}

TEST(ExecutorPrepare, ThePreparingShowsOnTheTimelineAsCompute) {
  const RankRun r = run_rank1("1f1b", 4, 50);
  const auto& events = r.timeline.events();
  const auto prepare = std::find_if(events.begin(), events.end(), [](const TimedEvent& e) { return e.name == "prepare"; });
  ASSERT_NE(prepare, events.end());
  EXPECT_TRUE(prepare->compute);
  EXPECT_EQ(prepare->track, 0);
  // Before stage 1's first forward on the rank's track.
  const auto first_f = std::find_if(events.begin(), events.end(), [](const TimedEvent& e) { return e.name == "1F0"; });
  ASSERT_NE(first_f, events.end());
  EXPECT_LE(prepare->end_us, first_f->start_us);
}

// The cpu backend, logging the weights the linear ops read ("F w rows in out", "I w ...", in
// call order) and those it is asked to prepare.
class LinearLog final : public testing::ForwardingOps {
 public:
  bool prepare_linear_weight(ConstView w, int rows, int in, int out, bool dgrad) override {
    prepared.push_back(entry(dgrad ? "I" : "F", w, rows, in, out));
    return true;  // a backend that keeps copies: the stage asks for every weight
  }
  void linear_forward(View y, ConstView x, ConstView w, ConstView b, int n, int in, int out) override {
    used.push_back(entry("F", w, n, in, out));
    ForwardingOps::linear_forward(y, x, w, b, n, in, out);
  }
  void linear_forward_residual(View y, ConstView x, ConstView w, ConstView b, ConstView residual, int n, int in,
                               int out) override {
    used.push_back(entry("F", w, n, in, out));
    ForwardingOps::linear_forward_residual(y, x, w, b, residual, n, in, out);
  }
  void linear_gelu_forward(View y, View pre, ConstView x, ConstView w, ConstView b, int n, int in, int out) override {
    used.push_back(entry("F", w, n, in, out));
    ForwardingOps::linear_gelu_forward(y, pre, x, w, b, n, in, out);
  }
  void linear_backward_input(View dx, ConstView dy, ConstView w, int n, int in, int out, bool accumulate) override {
    used.push_back(entry("I", w, n, in, out));
    ForwardingOps::linear_backward_input(dx, dy, w, n, in, out, accumulate);
  }
  void linear_backward_input_dgelu(View dpre, ConstView dy, ConstView w, ConstView pre, int n, int in,
                                   int out) override {
    used.push_back(entry("I", w, n, in, out));
    ForwardingOps::linear_backward_input_dgelu(dpre, dy, w, pre, n, in, out);
  }

  std::vector<std::string> prepared, used;

 private:
  static std::string entry(const char* pass, ConstView w, int rows, int in, int out) {
    return std::string(pass) + " " + std::to_string(reinterpret_cast<uintptr_t>(w.data)) + " " +
           std::to_string(rows) + " " + std::to_string(in) + " " + std::to_string(out);
  }
};

TEST(ExecutorPrepare, AStageAsksForTheWeightsItsPassesRead) {
  for (const bool llama : {false, true}) {
    ModelConfig m = testing::tiny_model();
    m.n_layer = 2;
    if (llama) {  // grouped-query attention, the SwiGLU MLP (gate and up read the same input)
      m.arch = "llama";
      m.n_kv_head = 1;
      m.tie_embeddings = false;
    }
    auto log = std::make_unique<LinearLog>();
    LinearLog& ops = *log;
    testing::SingleRankModel model(m, 2, 3, std::move(log));
    model.stage->prepare_weights(false, 0, [] { return true; });
    model.stage->prepare_weights(true, 0, [] { return true; });
    Buffer<int32_t> tokens(*model.ops, model.dims.rows()), targets(*model.ops, model.dims.rows());
    model.stage->forward(0, {tokens.data(), targets.data()});
    model.stage->backward_input(0);
    EXPECT_EQ(ops.prepared, ops.used) << (llama ? "llama" : "gpt-2");
  }
}

}  // namespace
}  // namespace pptrain
