// model.attention on the cuda backend inside the trainer, on the CPU (pptrain-emu: the
// kernels under the SIMT emulator, cuBLAS on OpenBLAS, NCCL on MPI):
//  - flash against naive, one step from the common initialisation: in fp32 the loss and every
//    gradient within the fp32 chain bound of the flash config, the values after AdamW within
//    what AdamW makes of that noise; in bf16 within the bound of two bf16 steps that round
//    different partial results (flash never stores the probabilities in bf16, naive does);
//  - pp=2 ZB-V and tp=2 with flash against the single-process flash run (fp32);
// Bounds: support/tolerances.h, computed from the test's config.
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "support/dump_compare.h"
#include "support/test_util.h"

using namespace pptrain;
using namespace pptrain::testing;
namespace fs = std::filesystem;

namespace {

class CudaFlashTrain : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(pptrain_emu_bin())) << pptrain_emu_bin() << " not built";
    auto r = prepare_markov_corpus(dir_.file("data"), 19, 6000, 5);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // 4 blocks (one per stage of a pp=2 V), 2 heads of 32 (one per tp=2 rank; 32 is the
    // smallest head size the flash kernels take), T = 16 (a partial key tile); grad_clip 0
    // compares raw gradients.
    write_file(dir_.file("model.yaml"),
               "device: cuda\n"
               "model: {n_layer: 4, n_head: 2, d_model: 64, seq_len: 16, vocab_size: 19}\n"
               "parallel: {microbatches: 4}\n"
               "training: {steps: 1, micro_batch_size: 2, lr: 1.0e-2, warmup_steps: 0, grad_clip: 0.0,"
               " eval_every: 0}\n"
               "data: {train: '" + dir_.file("data") + "/train_*.bin'}\n"
               "logging: {every: 1, sample_tokens: 0}\n");
  }
  // pptrain-emu on `ranks` ranks with `overrides`; the dumps of step 1 of world ranks
  // 0 .. ranks-1 (all in dp replica 0 here).
  GlobalDump run(int ranks, const std::string& name, const std::string& overrides) {
    const std::string out = dir_.file("dump_" + name);
    const std::string cmd = mpirun(ranks) + pptrain_emu_bin() + " train " + dir_.file("model.yaml") + " " +
                            overrides + " --dump " + out;
    auto r = run_command(cmd, 180);
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
    const std::string attention = config(overrides).model.attention;  // named by the startup line
    EXPECT_NE(r.output.find("| attention " + attention), std::string::npos) << r.output;
    std::vector<std::string> files;
    for (int i = 0; i < ranks; ++i) files.push_back(out + "/step1.rank" + std::to_string(i) + ".bin");
    return read_param_dumps(files);
  }
  Config config(const std::string& overrides) {
    return load_config(dir_.file("model.yaml"), split_words(overrides));
  }
  // Loss, gradients and the values after AdamW of step 1 within `bounds`.
  void expect_equal(const GlobalDump& got, const GlobalDump& want, const Config& cfg, const StepBounds& bounds,
                    const std::string& what) {
    Verdict v = compare_gradients(got, want, bounds);
    v.add(compare_adamw_values(got, want, adamw_step(cfg, 1), bounds.gradient));
    EXPECT_TRUE(v.passed()) << v.failures(what);
    std::cout << what << " (normwise bounds: loss " << bounds.loss << ", gradient " << bounds.gradient
              << "): " << v.summary() << "\n";
  }
  TempDir dir_;
};

const char* kFlash = "model.attention=flash";

}  // namespace

TEST_F(CudaFlashTrain, Fp32FlashEqualsNaive) {
  GlobalDump naive = run(1, "naive", "model.attention=naive");
  GlobalDump flash = run(1, "flash", kFlash);
  const Config cfg = config(kFlash);
  expect_equal(flash, naive, cfg, fp32_step_bounds(cfg), "cuda fp32 flash against naive");
}

TEST_F(CudaFlashTrain, Bf16FlashEqualsNaiveWithinTheBf16Bound) {
  const std::string bf16 = " training.precision=bf16";
  GlobalDump naive = run(1, "naive_bf16", "model.attention=naive" + bf16);
  GlobalDump flash = run(1, "flash_bf16", kFlash + bf16);
  const Config cfg = config(kFlash + bf16);
  expect_equal(flash, naive, cfg, bf16_against_bf16_bounds(cfg), "cuda bf16 flash against naive");
}

TEST_F(CudaFlashTrain, PipelineAndTensorParallelFlashEqualTheSingleProcessFlashRun) {
  GlobalDump single = run(1, "single", kFlash);
  const std::pair<std::string, std::string> layouts[] = {
      {"zbv", "parallel.pp=2 parallel.schedule=zbv parallel.stages_per_rank=2"}, {"tp2", "parallel.tp=2"}};
  for (const auto& [name, layout] : layouts) {
    const std::string overrides = cat(kFlash, " ", layout);
    const Config cfg = config(overrides);
    expect_equal(run(2, name, overrides), single, cfg, fp32_step_bounds(cfg), "cuda flash " + name + " against single");
  }
}
