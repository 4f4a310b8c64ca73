// bf16 mixed precision (training.precision: bf16) through pptrain-emu, the trainer on the
// emulated cuda backend: a pp=2 ZB-V pipeline and a dp=2 run equal the single-process bf16
// run up to fp32 summation order (and a gradient planted 1e-2 off is rejected); tp=2 stays
// within the bf16 bound; the bf16 copies AdamW writes with each update equal those a
// refresh from the masters before every step makes, bit for bit (clipping on); a resumed
// bf16 run equals the uninterrupted one bit for bit (only fp32 masters are saved, the load
// marks the bf16 copies stale and they are rounded from them) and resumes in fp32 as well.
// Bounds: support/tolerances.h, computed from the test's config. That bf16 training learns
// a Markov source as fp32 does is gpu_check.sh's bf16_learning check, which
// test_gpu_bundle's GpuCheck runs on this emulated backend and judges by the same margins.
// The in-process model comparisons are in test_cuda_backend_model.cpp.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "core/config.h"
#include "support/cpu_ops_util.h"
#include "support/cuda_backend_model.h"
#include "support/dump_compare.h"
#include "support/test_util.h"
#include "train/param_dump.h"

using namespace pptrain;
using namespace pptrain::testing;
namespace fs = std::filesystem;

namespace {

class Bf16Train : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(pptrain_emu_bin())) << pptrain_emu_bin() << " not built";
    auto r = prepare_markov_corpus(dir_.file("data"), 19, 6000, 5);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // 4 blocks: one per stage of a pp=2 V; grad_clip 0 compares raw gradients.
    write_file(dir_.file("model.yaml"),
               "device: cuda\n"
               "model: {n_layer: 4, n_head: 2, d_model: 16, seq_len: 8, vocab_size: 19}\n"
               "parallel: {microbatches: 4}\n"
               "training: {steps: 1, micro_batch_size: 2, lr: 1.0e-2, warmup_steps: 0, grad_clip: 0.0,"
               " eval_every: 0, precision: bf16}\n"
               "data: {train: '" + dir_.file("data") + "/train_*.bin'}\n"
               "logging: {every: 1, sample_tokens: 0}\n");
  }

  // Runs pptrain-emu on `ranks` ranks with `overrides` (`env` before the command) and
  // reads the dumps of step `step` written by world ranks 0 .. dump_ranks-1 (dp replica 0).
  GlobalDump run(int ranks, const std::string& name, const std::string& overrides, int step = 1,
                 int dump_ranks = -1, const std::string& env = "") {
    const std::string out = dir_.file("dump_" + name);
    const std::string cmd = env + mpirun(ranks) + pptrain_emu_bin() + " train " + dir_.file("model.yaml") +
                            " " + overrides + " --dump " + out;
    auto r = run_command(cmd, 180);
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
    last_output_ = r.output;
    std::vector<std::string> files;
    for (int i = 0; i < (dump_ranks < 0 ? ranks : dump_ranks); ++i)
      files.push_back(out + "/step" + std::to_string(step) + ".rank" + std::to_string(i) + ".bin");
    return read_param_dumps(files);
  }

  // The config a run with `overrides` uses (the bounds count its tokens and its chain).
  Config config(const std::string& overrides) {
    return load_config(dir_.file("model.yaml"), split_words(overrides));
  }

  // A pipeline or data-parallel bf16 step against the single-process bf16 step. Each
  // microbatch's forward and dgrad are the same kernels on the same bf16 inputs in both
  // runs, so every bf16 rounding is identical by construction; only the fp32 sums of the
  // weight gradients over microbatches, replicas and the tied-embedding stages run in
  // another order. The fp32 chain bound covers that (it counts those sums and more), and
  // the values after AdamW follow from that gradient noise (adamw_value_allowance).
  Verdict fp32_order_only(const GlobalDump& got, const GlobalDump& want, const std::string& overrides) {
    const Config cfg = config(overrides);
    const StepBounds bounds = fp32_step_bounds(cfg);
    Verdict v = compare_gradients(got, want, bounds);
    v.add(compare_adamw_values(got, want, adamw_step(cfg, 1), bounds.gradient));
    return v;
  }

  TempDir dir_;
  std::string last_output_;
};

}  // namespace

const char* kZbv = "parallel.pp=2 parallel.schedule=zbv parallel.stages_per_rank=2";
const char* kDp = "parallel.dp=2 parallel.microbatches=2";

TEST_F(Bf16Train, PipelineAndDataParallelStepsEqualTheSingleProcessRun) {
  GlobalDump single = run(1, "single", "");
  // ZB-V runs W late: the fp32 weight gradients of the microbatches are summed in another
  // order; the same bf16 tensors cross stage boundaries as bytes.
  GlobalDump pipeline = run(2, "zbv", kZbv);
  Verdict v = fp32_order_only(pipeline, single, kZbv);
  EXPECT_TRUE(v.passed()) << v.failures("zbv");
  std::cout << "bf16 zbv against single: " << v.summary() << "\n";
  GlobalDump data_parallel = run(2, "dp", kDp, 1, 1);
  v = fp32_order_only(data_parallel, single, kDp);
  EXPECT_TRUE(v.passed()) << v.failures("dp");
  std::cout << "bf16 dp against single: " << v.summary() << "\n";
}

TEST_F(Bf16Train, PlantedGradientErrorIsRejected) {
  // One gradient 1e-2 off on one rank of the pipeline: the same comparison must reject it.
  GlobalDump single = run(1, "single", "");
  const std::string fault = "grad_scale@0:h.0.mlp.fc.weight:1.01";
  GlobalDump planted = run(2, "planted", kZbv, 1, -1, "PPTRAIN_FAULTS=" + fault + " ");
  const Verdict v = fp32_order_only(planted, single, kZbv);
  EXPECT_FALSE(v.passed());
  EXPECT_GE(v.worst().ratio(), 3.0) << v.summary();
  std::cout << "planted " << fault << " (bf16 zbv pp2): " << v.summary() << "\n";
}

TEST_F(Bf16Train, TensorParallelStepStaysWithinTheBf16Bound) {
  // Row-parallel layers round each rank's partial product to bf16 before the all-reduce,
  // so tp=2 differs from tp=1 by bf16 rounding, not by fp32 reordering: two runs with
  // independent bf16 errors along the chain.
  GlobalDump single = run(1, "single", "");
  GlobalDump tp = run(2, "tp", "parallel.tp=2");
  const Verdict v = compare_gradients(tp, single, bf16_against_bf16_bounds(config("parallel.tp=2")));
  EXPECT_TRUE(v.passed()) << v.failures("tp");
  std::cout << "bf16 tp2 against single: " << v.summary() << "\n";
}

TEST_F(Bf16Train, CopiesWrittenByAdamWEqualRefreshingEveryStep) {
  // Exact by construction: AdamW rounds the fp32 value it stores to the master to nearest
  // even, which is what cast() does with that master before the next step. The fault
  // refresh_bf16 re-rounds every copy before each step (the path before AdamW wrote them);
  // four steps with clipping (grad_clip 0.05 is below this model's gradient norm, so the
  // clip factor folded into AdamW is ≠ 1 on every step) must agree in every loss, master
  // and gradient. The pp=2 ZB-V run covers copies on two ranks and the tied embedding.
  for (const std::string& layout : {std::string(""), std::string(kZbv)}) {
    const int ranks = layout.empty() ? 1 : 2;
    const std::string overrides = "training.steps=4 training.grad_clip=0.05 " + layout;
    GlobalDump fused = run(ranks, "fused" + std::to_string(ranks), overrides, 4);
    EXPECT_NE(last_output_.find("grad_norm"), std::string::npos) << last_output_;
    GlobalDump refreshed = run(ranks, "refreshed" + std::to_string(ranks), overrides, 4, -1,
                               "PPTRAIN_FAULTS=refresh_bf16 ");
    const Verdict v = compare_exact(fused, refreshed);
    EXPECT_TRUE(v.passed()) << v.failures("fused bf16 copy, " + overrides);
    EXPECT_EQ(fused.loss, refreshed.loss);
  }
}

TEST_F(Bf16Train, ResumedRunEqualsTheUninterruptedOneBitForBit) {
  // Exact by construction: the resumed run rounds the same fp32 masters to the same bf16
  // copies and runs the same kernels on the same data.
  const std::string steps = "training.steps=4 ";
  GlobalDump straight = run(1, "straight", steps, 4);
  // Dies at step 3, after the step-2 checkpoint; the same command then resumes.
  const std::string resumable = steps + "checkpoint.dir=" + dir_.file("ck") + " checkpoint.every=2";
  const std::string cmd = "PPTRAIN_FAULTS=fail_at@0:3 " + mpirun(1) + pptrain_emu_bin() + " train " +
                          dir_.file("model.yaml") + " " + resumable;
  auto r = run_command(cmd, 180);
  ASSERT_NE(r.exit_code, 0) << r.output;
  ASSERT_NE(r.output.find("injected failure"), std::string::npos) << r.output;
  GlobalDump resumed = run(1, "resumed", resumable, 4);
  EXPECT_NE(last_output_.find("resumed from step 2"), std::string::npos) << last_output_;
  const Verdict v = compare_exact(resumed, straight);
  EXPECT_TRUE(v.passed()) << v.failures("resumed");
}

TEST_F(Bf16Train, ABf16CheckpointResumesInFp32) {
  // Checkpoints hold the fp32 masters only, so the precision may change at a resume.
  const std::string steps = "training.steps=4 ";
  GlobalDump straight = run(1, "straight", steps, 3);
  const std::string resumable = steps + "checkpoint.dir=" + dir_.file("ck") + " checkpoint.every=2";
  auto r = run_command("PPTRAIN_FAULTS=fail_at@0:3 " + mpirun(1) + pptrain_emu_bin() + " train " +
                           dir_.file("model.yaml") + " " + resumable,
                       180);
  ASSERT_NE(r.output.find("injected failure"), std::string::npos) << r.output;
  GlobalDump fp32 = run(1, "fp32", resumable + " training.precision=fp32", 3);
  EXPECT_NE(last_output_.find("resumed from step 2"), std::string::npos) << last_output_;
  EXPECT_NE(last_output_.find("backend cuda fp32"), std::string::npos) << last_output_;
  // The loss of step 3 is the forward of the same loaded masters in fp32 and in bf16: they
  // differ (the precision changed) within the bf16-against-fp32 forward bound.
  EXPECT_NE(fp32.loss, straight.loss);
  const double bound = bf16_against_fp32_bounds(config(steps)).loss * std::fabs(fp32.loss);
  EXPECT_LE(std::fabs(fp32.loss - straight.loss), bound) << "fp32 " << fp32.loss << ", bf16 " << straight.loss;
  std::cout << "loss of step 3, fp32 after a bf16 checkpoint against bf16: diff/bound "
            << std::fabs(fp32.loss - straight.loss) / bound << "\n";
}
