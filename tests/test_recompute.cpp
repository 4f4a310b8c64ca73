// training.recompute: attention and full give the losses and gradients of none bit for bit
// (the recompute runs the same ops in the same order on the same inputs, so the same bits
// on the cpu backend), GPT-2 and Llama, naive and flash attention, in one process over a
// zero-bubble order of F, I and W and through the trainer on one rank, pp 2 (ZB-V and
// ZB-H1: I and W split) and tp 2; the bytes a stage allocates are what it reports and what
// job/memory_estimate.h predicts, and full's drop as predicted; the planted fault
// skip_recompute (I reads a stale scratch) is caught by the same comparisons. The cuda
// backend's fp32 and bf16 are in test_cuda_backend_recompute.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "job/memory_estimate.h"
#include "support/dump_compare.h"
#include "support/recompute_run.h"
#include "support/single_rank_model.h"
#include "support/test_util.h"
#include "train/param_dump.h"

using namespace pptrain;
using namespace pptrain::testing;
namespace fs = std::filesystem;

namespace {

constexpr int kMicrobatches = 4;
constexpr int kBatch = 2;

// 2 blocks of 4 query heads over 2 key/value heads, head size 4, SwiGLU width 24.
ModelConfig tiny_llama() {
  ModelConfig m = tiny_model();
  m.arch = "llama";
  m.n_head = 4;
  m.n_kv_head = 2;
  m.d_model = 16;
  m.ffn_hidden = 24;
  m.rope_theta = 100.0;
  m.norm_eps = 1e-5;
  m.tie_embeddings = false;
  return m;
}

// Bitwise: every loss and every gradient element.
void expect_same_bits(const RecomputeRun& got, const RecomputeRun& want, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t mb = 0; mb < got.losses.size(); ++mb)
    EXPECT_EQ(std::memcmp(&got.losses[mb], &want.losses[mb], sizeof(double)), 0)
        << what << ": loss of microbatch " << mb << " " << got.losses[mb] << " vs " << want.losses[mb];
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (const auto& [name, g] : want.grads) {
    const std::vector<float>& h = got.grads.at(name);
    ASSERT_EQ(h.size(), g.size()) << name;
    EXPECT_EQ(std::memcmp(h.data(), g.data(), g.size() * sizeof(float)), 0) << what << ": gradient of " << name;
  }
}

bool same_bits(const RecomputeRun& a, const RecomputeRun& b) {
  for (size_t mb = 0; mb < a.losses.size(); ++mb)
    if (std::memcmp(&a.losses[mb], &b.losses[mb], sizeof(double))) return false;
  for (const auto& [name, g] : a.grads)
    if (std::memcmp(g.data(), b.grads.at(name).data(), g.size() * sizeof(float))) return false;
  return true;
}

struct ModelCase {
  const char* name;
  ModelConfig model;
};

std::vector<ModelCase> model_cases() {
  ModelConfig flash = tiny_model();
  flash.attention = "flash";
  ModelConfig llama_flash = tiny_llama();
  llama_flash.attention = "flash";
  return {{"gpt2", tiny_model()}, {"gpt2 flash", flash}, {"llama", tiny_llama()}, {"llama flash", llama_flash}};
}

TEST(Recompute, GradientsAndLossesEqualNoneBitwise) {
  for (const ModelCase& c : model_cases()) {
    const RecomputeRun none = run_recompute(make_cpu_ops(), c.model, kBatch, "none", Precision::fp32, kMicrobatches);
    for (const std::string mode : {"attention", "full"}) {
      const RecomputeRun got = run_recompute(make_cpu_ops(), c.model, kBatch, mode, Precision::fp32, kMicrobatches);
      expect_same_bits(got, none, std::string(c.name) + " recompute " + mode);
    }
  }
}

TEST(Recompute, PlantedStaleScratchIsCaught) {
  // skip_recompute: I runs on what earlier passes (other microbatches, other blocks) left
  // in the scratch. The comparison above must see it, with either mode that recomputes.
  const Faults fault = Faults::parse("skip_recompute");
  for (const ModelCase& c : {model_cases()[0], model_cases()[2]}) {
    const RecomputeRun none = run_recompute(make_cpu_ops(), c.model, kBatch, "none", Precision::fp32, kMicrobatches);
    for (const std::string mode : {"attention", "full"}) {
      const RecomputeRun planted =
          run_recompute(make_cpu_ops(), c.model, kBatch, mode, Precision::fp32, kMicrobatches, fault);
      EXPECT_FALSE(same_bits(planted, none)) << c.name << " " << mode << ": the planted stale scratch went unseen";
    }
    // It changes nothing where nothing is recomputed.
    const RecomputeRun clean =
        run_recompute(make_cpu_ops(), c.model, kBatch, "none", Precision::fp32, kMicrobatches, fault);
    expect_same_bits(clean, none, std::string(c.name) + " none with skip_recompute");
  }
}

// The peak the run allocates above its parameters is, exactly: the stage's [N,C] tensors
// and the F-to-W slots of m + 1 microbatches (the discarded one is taken while all m are
// live), the I-to-W slots of 2 (microbatch k's I comes before k−1's W), and one scratch.
// Those bytes are what memory_estimate's stage_slot_bytes predicts; full's F-to-W bytes
// are the head's alone (its blocks keep nothing from F), attention's lack the probabilities.
TEST(Recompute, AllocationsAreThePredictedSlotsAndFullKeepsLess) {
  for (const ModelCase& c : model_cases()) {
    const ModelDims plain = ModelDims::from(c.model, kBatch, 1, 0);
    const StageSpec spec{0, 0, c.model.n_layer, true, true};
    const size_t io = 2 * size_t(c.model.n_layer + 1) * plain.rows() * plain.d_model * sizeof(float);
    std::map<std::string, RecomputeRun> runs;
    for (const std::string mode : {"none", "attention", "full"}) {
      SCOPED_TRACE(std::string(c.name) + " recompute " + mode);
      const RecomputeRun r = run_recompute(make_cpu_ops(), c.model, kBatch, mode, Precision::fp32, kMicrobatches);
      const size_t m = kMicrobatches;
      EXPECT_EQ(r.peak_bytes - r.baseline_bytes,
                (m + 1) * (io + r.layer_slot_bytes) + 2 * r.layer_slot_bytes_from_input + r.scratch_bytes);
      ModelDims dims = plain;
      dims.recompute = ModelDims::recompute_of(mode, dims.fused_attention);
      const StageSlotBytes predicted = stage_slot_bytes(dims, spec, Precision::fp32);
      EXPECT_EQ(predicted.io, double(io));
      EXPECT_EQ(predicted.layers, double(r.layer_slot_bytes));
      EXPECT_EQ(predicted.layers_from_input, double(r.layer_slot_bytes_from_input));
      EXPECT_EQ(predicted.scratch, double(r.scratch_bytes));
      runs[mode] = r;
    }
    const RecomputeRun &none = runs["none"], &attention = runs["attention"], &full = runs["full"];
    EXPECT_EQ(none.layer_slot_bytes_from_input + none.scratch_bytes, 0u) << c.name;
    // full: F keeps only the head's slot; what I keeps for W is less than none's whole slot.
    const StageSlotBytes head_only = stage_slot_bytes(plain, {0, 0, 0, false, true}, Precision::fp32);
    EXPECT_EQ(double(full.layer_slot_bytes), head_only.layers) << c.name;
    EXPECT_LT(full.layer_slot_bytes_from_input, none.layer_slot_bytes - full.layer_slot_bytes) << c.name;
    EXPECT_LT(full.peak_bytes, none.peak_bytes) << c.name;
    if (plain.fused_attention) {
      // attention is none under fused attention (no probabilities to drop).
      EXPECT_EQ(attention.peak_bytes, none.peak_bytes) << c.name;
    } else {
      // The probabilities [B,NHL,T,T] of every block leave the slot; one block's are the scratch.
      const size_t probs = size_t(kBatch) * plain.local_heads() * plain.seq_len * plain.seq_len * sizeof(float);
      EXPECT_EQ(none.layer_slot_bytes - attention.layer_slot_bytes, size_t(c.model.n_layer) * probs) << c.name;
      EXPECT_EQ(attention.scratch_bytes, probs) << c.name;
    }
  }
}

// The trainer: one optimizer step's gradients and the parameters after it, on one rank, on
// pp 2 with ZB-V (two stages per rank, I and W split) and with ZB-H1 (Llama), and on tp 2
// (the recompute's all-reduce runs again on both ranks): with attention and full exactly
// none's dumps of the same layout.
class RecomputeTrain : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto r = prepare_markov_corpus(dir_->file("data"), 19, 6000, 5);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // 4 blocks: one per stage of a pp 2 V; evaluation on, so full's F without slots runs
    // through the forward-only path too.
    write_file(dir_->file("c.yaml"),
               "model: {n_layer: 4, n_head: 4, d_model: 16, seq_len: 8, vocab_size: 19}\n"
               "parallel: {microbatches: 4}\n"
               "training: {steps: 2, micro_batch_size: 2, lr: 1.0e-2, warmup_steps: 0, eval_every: 1,"
               " eval_batches: 1}\n"
               "data: {train: '" + dir_->file("data") + "/train_*.bin', val: '" + dir_->file("data") +
               "/val_*.bin'}\n"
               "logging: {every: 1, sample_tokens: 0}\n");
  }
  static void TearDownTestSuite() { delete dir_; }

  // Trains on `ranks` ranks with `overrides` (`env` before the command), dumping every step
  // under dump_<name>.
  static void train(int ranks, const std::string& name, const std::string& overrides, const std::string& env = "") {
    const std::string cmd = env + (ranks > 1 ? mpirun(ranks) : std::string("OMP_NUM_THREADS=1 ")) + pptrain_bin() +
                            " train " + dir_->file("c.yaml") + " " + overrides + " --dump " + dir_->file("dump_" + name);
    auto r = run_command(cmd, 90);
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  }
  // Step `step`'s dumps of run `name` from world ranks 0 .. ranks-1.
  static GlobalDump dumps(const std::string& name, int ranks, int step) {
    std::vector<std::string> files;
    for (int i = 0; i < ranks; ++i)
      files.push_back(dir_->file("dump_" + name) + "/step" + std::to_string(step) + ".rank" + std::to_string(i) + ".bin");
    return read_param_dumps(files);
  }

  static TempDir* dir_;
};
TempDir* RecomputeTrain::dir_ = nullptr;

const std::string kLlamaOverrides = "model.arch=llama model.n_kv_head=2 model.tie_embeddings=false ";

TEST_F(RecomputeTrain, EveryLayoutEqualsNoneBitwise) {
  struct Layout {
    const char* name;
    int ranks;
    std::string overrides;
  };
  const Layout layouts[] = {
      {"single", 1, ""},
      {"zbv", 2, "parallel.pp=2 parallel.schedule=zbv parallel.stages_per_rank=2"},
      {"tp2", 2, "parallel.tp=2"},
      {"llama-zbh1", 2, kLlamaOverrides + "parallel.pp=2 parallel.schedule=zb-h1"},
      {"llama-tp2", 2, kLlamaOverrides + "parallel.tp=2"},
  };
  for (const Layout& l : layouts) {
    const std::string none = std::string(l.name) + "_none";
    train(l.ranks, none, l.overrides + " training.recompute=none");
    for (const std::string mode : {"attention", "full"}) {
      const std::string name = std::string(l.name) + "_" + mode;
      train(l.ranks, name, l.overrides + " training.recompute=" + mode);
      for (int step : {1, 2}) {
        const Verdict v = compare_exact(dumps(name, l.ranks, step), dumps(none, l.ranks, step));
        EXPECT_TRUE(v.passed()) << v.failures(name + " step " + std::to_string(step));
      }
    }
  }
}

TEST_F(RecomputeTrain, PlantedStaleScratchIsRejected) {
  const std::string zbv = "parallel.pp=2 parallel.schedule=zbv parallel.stages_per_rank=2 ";
  train(2, "planted_none", zbv + "training.recompute=none");
  train(2, "planted_full", zbv + "training.recompute=full", "PPTRAIN_FAULTS=skip_recompute@1 ");
  const Verdict v = compare_exact(dumps("planted_full", 2, 1), dumps("planted_none", 2, 1));
  EXPECT_FALSE(v.passed()) << "skip_recompute on rank 1 went unseen";
  // On one rank of a tp group: it still joins the recompute's all-reduce (no hang), and is seen.
  train(2, "planted_tp_none", "parallel.tp=2 training.recompute=none");
  train(2, "planted_tp_full", "parallel.tp=2 training.recompute=full", "PPTRAIN_FAULTS=skip_recompute@1 ");
  const Verdict tp = compare_exact(dumps("planted_tp_full", 2, 1), dumps("planted_tp_none", 2, 1));
  EXPECT_FALSE(tp.passed()) << "skip_recompute on tp rank 1 went unseen";
}

TEST_F(RecomputeTrain, BadValueIsOneLine) {
  auto r = run_command(pptrain_bin() + " train " + dir_->file("c.yaml") + " training.recompute=some", 30);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("training.recompute"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("expected none, attention, full, auto or a list of one per stage, got 'some'"),
            std::string::npos)
      << r.output;
}

// training.recompute as a list: one mode per stage, bitwise none's gradients and parameters
// (the same arithmetic on every stage); the dry run and the running job show each stage's
// mode, and the activation bytes per stage counted from the job's buffers after the first
// step are what the dry run predicted for that stage.
TEST_F(RecomputeTrain, PerStageListEqualsNoneAndItsBytesMatchTheDryRun) {
  struct Layout {
    const char* name;
    std::string overrides, modes, shown;
  };
  const Layout layouts[] = {
      {"1f1b", "parallel.pp=2 parallel.schedule=1f1b", "[full,none]", "[full, none]"},
      {"zbv4", "parallel.pp=2 parallel.schedule=zbv parallel.stages_per_rank=2", "[full,attention,none,full]",
       "[full, attention, none, full]"},
  };
  for (const Layout& l : layouts) {
    const std::string none = std::string(l.name) + "_list_none", listed = std::string(l.name) + "_list";
    train(2, none, l.overrides + " training.recompute=none");
    const std::string key = " 'training.recompute=" + l.modes + "'";
    train(2, listed, l.overrides + key);
    for (int step : {1, 2}) {
      const Verdict v = compare_exact(dumps(listed, 2, step), dumps(none, 2, step));
      EXPECT_TRUE(v.passed()) << v.failures(listed + " step " + std::to_string(step));
    }
    const std::string args = " train " + dir_->file("c.yaml") + " " + l.overrides + key + " training.steps=1";
    auto dry = run_command(pptrain_bin() + args + " --dry-run", 60);
    ASSERT_EQ(dry.exit_code, 0) << dry.output;
    EXPECT_NE(dry.output.find("recompute per stage " + l.shown), std::string::npos) << dry.output;
    auto real = run_command(mpirun(2) + pptrain_bin() + args, 90);
    ASSERT_EQ(real.exit_code, 0) << real.output;
    EXPECT_NE(real.output.find("recompute per stage " + l.shown), std::string::npos) << real.output;
    // Per rank, the activations part of the report line: each stage's mode, bytes held
    // F->I and I->W per microbatch, live microbatches and scratch (rounded as printed).
    auto stage_part = [](const std::string& out, int pp) {
      const size_t line = out.find("  pp " + std::to_string(pp) + " tp 0: ");
      if (line == std::string::npos) return std::string("(no line)");
      const size_t from = out.find("| activations ", line), to = out.find(") | logits", line);
      const size_t open = out.find(" (", from);
      return out.substr(open, to - open);
    };
    for (int pp = 0; pp < 2; ++pp) {
      const std::string predicted = stage_part(dry.output, pp);
      EXPECT_NE(predicted.find("(recompute "), std::string::npos) << predicted;
      EXPECT_EQ(stage_part(real.output, pp), predicted) << l.name << " pp " << pp << "\n" << real.output;
    }
  }
}

TEST_F(RecomputeTrain, BadPerStageListsAreOneLine) {
  const std::string base = pptrain_bin() + " train " + dir_->file("c.yaml") + " parallel.pp=2";
  auto length = run_command(base + " 'training.recompute=[full,none,none]' --dry-run", 30);
  EXPECT_NE(length.exit_code, 0);
  EXPECT_NE(length.output.find("key 'training.recompute': expected 2 entries (pp x stages_per_rank), got 3"),
            std::string::npos)
      << length.output;
  auto entry = run_command(base + " 'training.recompute=[full,auto]' --dry-run", 30);
  EXPECT_NE(entry.exit_code, 0);
  EXPECT_NE(entry.output.find("key 'training.recompute[1]': expected none, attention or full, got 'auto'"),
            std::string::npos)
      << entry.output;
  auto nested = run_command(base + " 'training.recompute=[full,[none]]' --dry-run", 30);
  EXPECT_NE(nested.exit_code, 0);
  EXPECT_NE(nested.output.find("training.recompute'[1]: expected none, attention or full, got a list"),
            std::string::npos)
      << nested.output;
}

TEST_F(RecomputeTrain, AttentionWithFusedAttentionSaysItIsANoOp) {
  auto r = run_command("OMP_NUM_THREADS=1 " + pptrain_bin() + " train " + dir_->file("c.yaml") +
                           " training.recompute=attention model.attention=flash training.steps=1",
                       60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("training.recompute: attention does nothing with model.attention: flash"), std::string::npos)
      << r.output;
}

}  // namespace
