// The performance model as the planner's cost profile (bench/perf_model/predicted_profile.cpp,
// `gpu_model --write-profile`): the layer kinds' passes add up to the model's step, the
// bytes are the job's memory estimate's, full recompute moves the forward into I, and the
// planner, given the profile, predicts the model's own step for the one-rank layout.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "../bench/perf_model/perf_model.h"
#include "partition/cost_profile.h"
#include "partition/layout_search.h"
#include "pipeline/registry.h"
#include "support/test_util.h"

namespace pptrain {
namespace {

namespace fs = std::filesystem;
using bench::Fractions;
using bench::LinkSpec;
using bench::predict_step;
using bench::predicted_cost_profile;
using testing::run_command;
using testing::TempDir;

std::string gpu_model_bin() { return (fs::path(testing::pptrain_bin()).parent_path() / "bench/gpu_model").string(); }

struct Case {
  const char* config;
  std::vector<std::string> overrides;
};
// GPT-2 in bf16 with flash and naive attention, fp32, and the Llama family (grouped-query
// attention) from the repository's configs, at their shapes.
const std::vector<Case> kCases = {
    {"configs/gpt2_124m_gpu.yaml", {}},
    {"configs/gpt2_124m_gpu.yaml", {"model.attention=naive", "parallel.microbatches=2"}},
    {"configs/gpt2_124m_gpu.yaml", {"training.precision=fp32", "training.micro_batch_size=4"}},
    {"configs/llama3_1b_gpu.yaml", {"parallel.dp=1", "parallel.microbatches=1"}},
};

double sum_ms(const bench::StepPrediction& p, const std::vector<std::string>& names) {
  double ms = 0;
  for (const bench::OpLine& o : p.ops)
    for (const std::string& n : names)
      if (o.name == n) ms += o.ms;
  return ms;
}

// Floating-point sums of the same terms in another order: a relative 1e-12 (the step is a
// sum of ~40 positive terms, each rounded at 2^-53 relative).
void expect_same_ms(double got, double want, const std::string& what) {
  EXPECT_NEAR(got, want, 1e-12 * std::abs(want) + 1e-15) << what;
}

TEST(PredictedProfile, ThePassesAddUpToTheStepAndEachIsItsOwnOps) {
  const auto dev = bench::device_spec("h200");
  for (const Case& c : kCases) {
    const Config cfg = load_config(c.config, c.overrides);
    SCOPED_TRACE(cfg.source + " " + cfg.model.attention + " " + cfg.training.precision);
    const bench::StepPrediction p = predict_step(cfg, dev, Fractions{});
    const double mb = cfg.parallel.microbatches, L = cfg.model.n_layer;
    auto pass_sum = [](const bench::PassTimes& t) { return t.f + t.i + t.w; };
    expect_same_ms(mb * (pass_sum(p.embedding) + L * pass_sum(p.block) + pass_sum(p.head)) + p.update_ms, p.step_ms,
                   "passes against the step");
    // Each pass holds its own lines: W the weight gradients, the update the optimizer's.
    expect_same_ms(p.update_ms * 1, sum_ms(p, {"the microbatches' losses to the host", "zero gradients",
                                               "gradient norm (sum of squares)",
                                               "adamw (+ clip factor, + bf16 copy)", "adamw (+ clip factor)"}),
                   "update");
    expect_same_ms(mb * p.embedding.w, sum_ms(p, {"embedding wgrad (scatter-add)"}), "embedding W");
    expect_same_ms(mb * p.head.w, sum_ms(p, {"lm head wgrad", "final norm wgrad"}), "head W");
    expect_same_ms(mb * p.head.i, sum_ms(p, {"lm head dgrad", "final norm dgrad"}), "head I");
    EXPECT_EQ(p.embedding.i, 0.0);
    double block_w = 0;
    for (const bench::OpLine& o : p.ops)
      if (o.op.find("_backward_weight") != std::string::npos && o.name != "lm head wgrad" &&
          o.name != "final norm wgrad" && o.name != "embedding wgrad (scatter-add)")
        block_w += o.ms;
    expect_same_ms(mb * L * p.block.w, block_w, "block W");
    EXPECT_GT(p.block.f, 0);
    // I holds a dgrad GEMM of the same FLOPs as each of W's wgrad GEMMs (both 2·N·in·out, one
    // fraction of the peak each) and the attention's backward besides; W's only other part is
    // the norms' column sums, memory-bound and small beside its GEMMs. So I > W would hold;
    // half of W is the margin for those column sums.
    EXPECT_GT(p.block.i, p.block.w * 0.5);
  }
}

TEST(PredictedProfile, FullRecomputeRunsMostOfTheForwardAgainInIAndKeepsLess) {
  const auto dev = bench::device_spec("h100");
  for (const Case& c : kCases) {
    const Config cfg = load_config(c.config, c.overrides);
    SCOPED_TRACE(cfg.source + " " + cfg.model.attention);
    const CostProfile p = predicted_cost_profile(cfg, dev, Fractions{}, nullptr, LinkSpec{});
    EXPECT_EQ(p.block_full.forward_ms, p.block.forward_ms);
    EXPECT_EQ(p.block_full.weight_grad_ms, p.block.weight_grad_ms);
    // I again runs the forward but for the MLP's output projection and its residual: that
    // projection is a third of GPT-2's block GEMM FLOPs (4C² of 12C²) and less of a Llama
    // block's (down, one of the MLP's three matrices, beside q/k/v/o), so more than half of
    // the forward runs again and not all of it.
    const double again = p.block_full.input_grad_ms - p.block.input_grad_ms;
    EXPECT_GT(again, 0.5 * p.block.forward_ms);
    EXPECT_LT(again, p.block.forward_ms);
    EXPECT_LT(p.block_full.act_iw_bytes + p.block_full.act_from_input_bytes, p.block.act_iw_bytes);
    EXPECT_GT(p.block_full.act_from_input_bytes, 0);
    EXPECT_EQ(p.block.act_from_input_bytes, 0);
  }
}

TEST(PredictedProfile, ItsBytesAreTheMemoryModelsAndTheLinkSetsTheTransfers) {
  const auto dev = bench::device_spec("h200");
  for (const Case& c : kCases) {
    const Config cfg = load_config(c.config, c.overrides);
    SCOPED_TRACE(cfg.source + " " + cfg.training.precision);
    const bench::StepPrediction s = predict_step(cfg, dev, Fractions{});
    const CostProfile p = predicted_cost_profile(cfg, dev, Fractions{}, nullptr, LinkSpec{50, 0.01});
    // The tied token embedding is in both the embedding's and the head's bytes; counted once,
    // the layer kinds hold the model's parameters: fp32 value and gradient (+ bf16), moments.
    const double params = p.embedding.param_bytes + cfg.model.n_layer * p.block.param_bytes + p.head.param_bytes -
                          tied_embedding_param_bytes(p);
    EXPECT_DOUBLE_EQ(params, s.memory.params_fp32 + s.memory.grads_fp32 + s.memory.weights_bf16);
    const double optim = p.embedding.optim_bytes + cfg.model.n_layer * p.block.optim_bytes + p.head.optim_bytes -
                         tied_embedding_optim_bytes(p);
    EXPECT_DOUBLE_EQ(optim, s.memory.adam_moments);
    const double elem = cfg.training.precision == "bf16" ? 2 : 4;
    EXPECT_EQ(p.transfer_bytes, elem * cfg.training.micro_batch_size * cfg.model.seq_len * cfg.model.d_model);
    EXPECT_DOUBLE_EQ(p.transfer_ms, 0.01 + p.transfer_bytes / 50e6);
    EXPECT_EQ(p.allreduce_bytes_per_ms, 50e6);
    EXPECT_FALSE(p.allreduce_measured);
    // Through the untrusted reader and back: the file is one `pptrain profile` could write.
    const CostProfile back = parse_cost_profile(to_json(p), "predicted");
    EXPECT_EQ(to_json(back), to_json(p));
  }
}

TEST(PredictedProfile, ThePlannerPredictsTheModelsStepForOneRank) {
  const auto dev = bench::device_spec("h200");
  for (const Case& c : kCases) {
    const Config cfg = load_config(c.config, c.overrides);
    SCOPED_TRACE(cfg.source + " " + cfg.model.attention + " " + cfg.training.precision);
    const double step = predict_step(cfg, dev, Fractions{}).step_ms;
    const CostProfile p = predicted_cost_profile(cfg, dev, Fractions{}, nullptr, LinkSpec{});
    // One rank, one stage, 1F1B: no bubble and no transfer; the pipeline phase is every
    // microbatch's F, I and W of every layer, then the update of every parameter.
    const int mb = cfg.parallel.microbatches;
    const pipeline::Schedule program = pipeline::prepare_schedule("1f1b", 1, mb, 1);
    const LayoutChoice one =
        predict_layout(scaled_profile(p, cfg.training.micro_batch_size, 1), program, {cfg.model.n_layer}, 1);
    // The same milliseconds summed in the simulator's order and through ns per parameter:
    // doubles (2^-53 relative each) over ~10^3 terms stay far inside 1e-9 relative.
    EXPECT_NEAR(one.step_ms, step, 1e-9 * step);
    EXPECT_EQ(one.sync_ms, 0.0);
  }
}

// The program end to end: --write-profile, then `pptrain plan --profile` on it.
TEST(PredictedProfile, GpuModelWritesAProfileThatPptrainPlanRanksLayoutsWith) {
  TempDir dir;
  const std::string profile = dir.file("h200.json");
  auto model = run_command(gpu_model_bin() + " configs/gpt2_124m_gpu.yaml --device h200 --write-profile " + profile +
                               " --link-gbs 150 2>&1",
                           60);
  ASSERT_EQ(model.exit_code, 0) << model.output;
  EXPECT_NE(model.output.find("# cost profile for the planner written to " + profile + " (150 GB/s between GPUs)"),
            std::string::npos)
      << model.output;
  std::smatch m;
  const std::string json = model.output.substr(model.output.rfind("{\"device\""));
  ASSERT_TRUE(std::regex_search(json, m, std::regex("\"step_ms\": ([0-9.]+)"))) << json;
  const double step = std::stod(m[1]);
  const CostProfile p = read_cost_profile(profile);
  EXPECT_DOUBLE_EQ(p.transfer_ms, 0.02 + p.transfer_bytes / 150e6);

  auto plan = [&](int ranks) {  // pptrain plan on `ranks` with the predicted profile
    auto r = run_command(testing::pptrain_bin() + " plan configs/gpt2_124m_gpu.yaml --ranks " + std::to_string(ranks) +
                             " --top 3 --profile " + profile + " 2>&1",
                         120);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r;
  };
  auto one = plan(1);
  // "   1   1   1   1  1   16    1 1f1b   23.37 ..." : the best one-rank layout's step, 2 decimals
  ASSERT_TRUE(std::regex_search(one.output, m, std::regex("\\n +1 +1 +1 +1 +1 +[0-9]+ +[0-9]+ +\\S+ +([0-9.]+)")))
      << one.output;
  EXPECT_NEAR(std::stod(m[1]), step, 0.006) << one.output;  // plan prints 2 decimals: 0.005 and rounding

  auto eight = plan(8);
  ASSERT_TRUE(std::regex_search(eight.output, m, std::regex("\\n +1 +([0-9]+) +([0-9]+) +([0-9]+) ")))
      << eight.output;
  EXPECT_EQ(std::stoi(m[1]) * std::stoi(m[2]) * std::stoi(m[3]), 8) << eight.output;  // pp·tp·dp fills the ranks
}

TEST(PredictedProfile, ABadLinkIsOneLineAndExitOne) {
  TempDir dir;
  for (const char* bad : {"0", "-3", "fast"}) {
    auto r = run_command(gpu_model_bin() + " configs/gpt2_124m_gpu.yaml --device h200 --write-profile " +
                             dir.file("p.json") + " --link-gbs " + bad + " 2>&1",
                         30);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(r.output, std::string("gpu_model: --link-gbs: expected a number > 0, got '") + bad + "'\n");
    EXPECT_FALSE(fs::exists(dir.file("p.json")));
  }
}

}  // namespace
}  // namespace pptrain
