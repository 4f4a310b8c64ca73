// training.recompute on the cuda backend (the emulated build: kernels under the SIMT
// emulator, cuBLAS on OpenBLAS), fp32 and bf16, GPT-2 and Llama, naive and flash
// attention: attention and full give none's losses and gradients bit for bit over a
// zero-bubble order of F, I and W (the recompute launches the same kernels on the same
// inputs), the bytes allocated are the predicted slots, and the planted stale scratch is
// caught. The cpu backend and the trainer's layouts: test_recompute.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "support/dump_compare.h"
#include "support/recompute_run.h"
#include "support/single_rank_model.h"
#include "support/test_util.h"
#include "train/param_dump.h"

using namespace pptrain;
using namespace pptrain::testing;

namespace {

constexpr int kMicrobatches = 3;
constexpr int kBatch = 2;

// 2 blocks, 4 query heads over 2 key/value heads, head size 4 (llama), or the tiny GPT-2;
// flash attention's kernels take head size 32: 2 heads (llama: over 1 key/value head) of 32.
ModelConfig model(bool llama, bool flash) {
  ModelConfig m = tiny_model();
  if (llama) {
    m.arch = "llama";
    m.n_head = 4;
    m.n_kv_head = 2;
    m.d_model = 16;
    m.ffn_hidden = 24;
    m.rope_theta = 100.0;
    m.norm_eps = 1e-5;
    m.tie_embeddings = false;
  }
  if (flash) {
    m.attention = "flash";
    m.n_head = 2;
    m.d_model = 64;
    if (llama) m.n_kv_head = 1;
  }
  return m;
}

bool same_bits(const RecomputeRun& a, const RecomputeRun& b, std::string* first_difference) {
  for (size_t mb = 0; mb < a.losses.size(); ++mb)
    if (std::memcmp(&a.losses[mb], &b.losses[mb], sizeof(double))) {
      *first_difference = "loss of microbatch " + std::to_string(mb);
      return false;
    }
  for (const auto& [name, g] : a.grads)
    if (std::memcmp(g.data(), b.grads.at(name).data(), g.size() * sizeof(float))) {
      *first_difference = "gradient of " + name;
      return false;
    }
  return true;
}

TEST(CudaRecompute, EqualsNoneBitwiseAndAllocatesThePredictedSlots) {
  for (Precision precision : {Precision::fp32, Precision::bf16})
    for (bool llama : {false, true})
      for (bool flash : {false, true}) {
        const std::string what = std::string(precision == Precision::bf16 ? "bf16" : "fp32") +
                                 (llama ? " llama" : " gpt2") + (flash ? " flash" : " naive");
        const ModelConfig m = model(llama, flash);
        const RecomputeRun none = run_recompute(make_cuda_ops(0), m, kBatch, "none", precision, kMicrobatches);
        const size_t element = precision == Precision::bf16 ? 2 : 4;
        const size_t io = 2 * size_t(m.n_layer + 1) * kBatch * m.seq_len * m.d_model * element;
        for (const std::string mode : {"attention", "full"}) {
          const RecomputeRun got = run_recompute(make_cuda_ops(0), m, kBatch, mode, precision, kMicrobatches);
          std::string difference;
          EXPECT_TRUE(same_bits(got, none, &difference)) << what << " recompute " << mode << ": " << difference;
          // m + 1 microbatches from F (one discarded), 2 from I, one scratch (recompute_run.h).
          EXPECT_EQ(got.peak_bytes - got.baseline_bytes,
                    (kMicrobatches + 1) * (io + got.layer_slot_bytes) + 2 * got.layer_slot_bytes_from_input +
                        got.scratch_bytes)
              << what << " recompute " << mode;
        }
        const RecomputeRun full = run_recompute(make_cuda_ops(0), m, kBatch, "full", precision, kMicrobatches);
        EXPECT_LT(full.peak_bytes, none.peak_bytes) << what;
      }
}

TEST(CudaRecompute, PlantedStaleScratchIsCaught) {
  const Faults fault = Faults::parse("skip_recompute");
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    const ModelConfig m = model(false, false);
    const RecomputeRun none = run_recompute(make_cuda_ops(0), m, kBatch, "none", precision, kMicrobatches);
    for (const std::string mode : {"attention", "full"}) {
      const RecomputeRun planted = run_recompute(make_cuda_ops(0), m, kBatch, mode, precision, kMicrobatches, fault);
      std::string difference;
      EXPECT_FALSE(same_bits(planted, none, &difference)) << mode << ": the planted stale scratch went unseen";
    }
  }
}

// The trainer (pptrain-emu) in bf16 on a pp 2 ZB-V pipeline, I and W split over two stages
// per rank: full gives none's gradients and updated parameters bit for bit.
TEST(CudaRecompute, Bf16PipelineStepEqualsNoneBitwise) {
  TempDir dir;
  auto r = prepare_markov_corpus(dir.file("data"), 19, 6000, 5);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  write_file(dir.file("c.yaml"),
             "device: cuda\n"
             "model: {n_layer: 4, n_head: 2, d_model: 16, seq_len: 8, vocab_size: 19}\n"
             "parallel: {pp: 2, schedule: zbv, stages_per_rank: 2, microbatches: 4}\n"
             "training: {steps: 1, micro_batch_size: 2, lr: 1.0e-2, warmup_steps: 0, eval_every: 0,"
             " precision: bf16}\n"
             "data: {train: '" + dir.file("data") + "/train_*.bin'}\n"
             "logging: {every: 1, sample_tokens: 0}\n");
  auto dumps = [&](const std::string& mode) {
    const std::string out = dir.file("dump_" + mode);
    auto run = run_command(mpirun(2) + pptrain_emu_bin() + " train " + dir.file("c.yaml") +
                               " training.recompute=" + mode + " --dump " + out, 120);
    EXPECT_EQ(run.exit_code, 0) << run.output;
    return read_param_dumps({out + "/step1.rank0.bin", out + "/step1.rank1.bin"});
  };
  const GlobalDump none = dumps("none"), full = dumps("full");
  const Verdict v = compare_exact(full, none);
  EXPECT_TRUE(v.passed()) << v.failures("bf16 zbv full");
}

}  // namespace
