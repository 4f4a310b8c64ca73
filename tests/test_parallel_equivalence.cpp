// Every schedule on every layout it supports computes what a single process computes,
// step by step for three optimizer steps: the loss and every parameter gradient of step k,
// and every parameter after its AdamW update, equal the single-process step k within
// bounds derived from the arithmetic (support/tolerances.h), which hold on any x86-64 CPU.
//
// Each step is compared from identical state. Step 1 starts from the common
// initialisation (counter-based, layout-independent); steps 2 and 3 of the layout start
// from the single-process checkpoint after step k−1 (checkpoints hold the global fp32
// masters and AdamW moments, loaded bitwise under any layout): one run of the layout does
// all three, loading the reference's state before each step (`train --step-from`), which
// one test shows gives the bits of a run resumed from that checkpoint. Comparing three steps of
// two free-running trajectories instead would not be well posed: an element whose gradient
// is at rounding-noise level moves by ±lr in step 1, and how that moves every later
// gradient depends on the model's curvature, which no rounding count bounds. From
// identical state a step differs only by rounding: gradients normwise per tensor by the
// fp32 chain bound, values elementwise by what AdamW makes of that gradient noise
// (adamw_value_allowance: ±lr·U_t at the noise level, Lipschitz above it). By induction the
// layout's three steps are the single process's, and the checkpoint suite shows that a
// resumed run continues an uninterrupted one bit for bit.
//
// Planted faults (core/faults.h) show the same comparison rejects a real bug by a clear
// margin; their diff/bound ratios are printed (--gtest_filter='*Planted*').
// Runs the real executable under mpirun (oversubscribed, one thread per rank, timeout).
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <map>
#include <sstream>

#include "core/config.h"
#include "support/dump_compare.h"
#include "support/markov_model.h"
#include "support/test_util.h"

using namespace pptrain;
using namespace pptrain::testing;

namespace {

struct Layout {
  const char* name;
  int pp, tp, dp;
};

const Layout kPp2{"pp2", 2, 1, 1}, kPp4{"pp4", 4, 1, 1}, kTp2{"tp2", 1, 2, 1}, kPp2Tp2{"pp2tp2", 2, 2, 1},
    kPp2Dp2{"pp2dp2", 2, 1, 2}, kPp2Tp2Dp2{"pp2tp2dp2", 2, 2, 2}, kTp4{"tp4", 1, 4, 1};
const Layout kLayouts[] = {kPp2, kPp4, kTp2, kPp2Tp2, kPp2Dp2, kPp2Tp2Dp2};
constexpr int kMicrobatches = 8;  // per DP replica; zbv and dualpipev need >= 2·pp
constexpr int kSteps = 3;
// A planted bug must exceed its bound by this factor at least: far from the boundary, so
// no CPU's rounding decides whether the bug is seen.
constexpr double kClearMargin = 3.0;

int stages_per_rank(const std::string& schedule) {
  return (schedule == "zbv" || schedule == "dualpipev" || schedule == "interleaved-1f1b" ||
          schedule == "looped-bfs") ? 2 : 1;
}

// The single-process run a layout is compared with (m·dp microbatches: the same global
// batch), with its checkpoint after every step and its config, from which the bounds are
// computed.
struct Reference {
  Config cfg;
  std::string checkpoints;
  std::map<int, GlobalDump> steps;
};

class Equivalence : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    // 8 blocks so pp=4 with 2 stages per rank still has a block per stage; grad_clip 0
    // keeps the comparison direct (the clipping factor would carry the norm's rounding into
    // every element).
    MarkovModel m;
    m.n_layer = 8;
    m.training = "steps: 3, warmup_steps: 0, grad_clip: 0.0, weight_decay: 0.1";
    auto r = write_markov_model(*dir_, m);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { delete dir_; }

  // Runs `pptrain train` on a layout with `extra` overrides and `env` before the command,
  // dumping every step into a fresh directory, which it returns; with `step_from`, each step
  // k > 1 starts from that folder's checkpoint of step k − 1.
  static std::string train(const std::string& schedule, const Layout& l, int m, const std::string& extra,
                           const std::string& env = "", const std::string& step_from = "") {
    const std::string out = dir_->file("run" + std::to_string(runs_++));
    const int world = l.pp * l.tp * l.dp;
    const std::string cmd = env + " " + (world > 1 ? mpirun(world) : std::string("OMP_NUM_THREADS=1 ")) +
                            pptrain_bin() + " train " + dir_->file("model.yaml") + " parallel.schedule=" + schedule +
                            " parallel.pp=" + std::to_string(l.pp) + " parallel.tp=" + std::to_string(l.tp) +
                            " parallel.dp=" + std::to_string(l.dp) + " parallel.microbatches=" + std::to_string(m) +
                            " parallel.stages_per_rank=" + std::to_string(l.pp > 1 ? stages_per_rank(schedule) : 1) +
                            " " + extra + " --dump " + out + (step_from.empty() ? "" : " --step-from " + step_from);
    auto r = run_command(cmd, 180);
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
    return out;
  }

  // Step `step` of a run's dumps: one file per rank of DP replica 0 (the others hold copies
  // and write none).
  static GlobalDump dump(const std::string& out, const Layout& l, int step) {
    std::vector<std::string> files;
    for (int rank = 0; rank < l.pp * l.tp; ++rank)
      files.push_back(out + "/step" + std::to_string(step) + ".rank" + std::to_string(rank) + ".bin");
    return read_param_dumps(files);
  }

  // `model`: overrides that change the model itself (e.g. model.tie_embeddings=false; several
  // separated by spaces), given to the reference and the layout alike.
  static const Reference& reference(int m, const std::string& model = "") {
    static std::map<std::pair<int, std::string>, Reference> cache;
    const auto key = std::make_pair(m, model);
    if (!cache.count(key)) {
      Reference& ref = cache[key];
      std::vector<std::string> overrides = {"parallel.microbatches=" + std::to_string(m)};
      std::istringstream words(model);
      for (std::string word; words >> word;) overrides.push_back(word);
      ref.cfg = load_config(dir_->file("model.yaml"), overrides);
      ref.checkpoints = dir_->file("reference" + std::to_string(runs_));
      const Layout single{"single", 1, 1, 1};
      const std::string out = train("1f1b", single, m,
                                    model + " checkpoint.dir=" + ref.checkpoints +
                                        " checkpoint.every=1 checkpoint.keep_last=" + std::to_string(kSteps));
      for (int k = 1; k <= kSteps; ++k) ref.steps[k] = dump(out, single, k);
    }
    return cache.at(key);
  }

  // The dumps of steps 1..kSteps of a layout, each step from the reference's state after
  // the step before (one run: --step-from); `extra`: more overrides. Runs once per argument
  // set in this process.
  static const std::string& layout_steps(const std::string& schedule, const Layout& l, const std::string& env = "",
                                         const std::string& extra = "", const std::string& model = "") {
    static std::map<std::string, std::string> runs;
    const std::string key = schedule + "|" + l.name + "|" + env + "|" + extra + "|" + model;
    if (!runs.count(key))
      runs[key] = train(schedule, l, kMicrobatches, extra + " " + model, env,
                        reference(kMicrobatches * l.dp, model).checkpoints);
    return runs.at(key);
  }
  static GlobalDump layout_step(const std::string& schedule, const Layout& l, int k, const std::string& env = "",
                                const std::string& extra = "", const std::string& model = "") {
    return dump(layout_steps(schedule, l, env, extra, model), l, k);
  }

  // The one comparison of the suite: gradients and loss, then the values after AdamW.
  static Verdict compare_step(const GlobalDump& got, const Layout& l, int k, const std::string& model = "") {
    const Reference& ref = reference(kMicrobatches * l.dp, model);
    const StepBounds bounds = fp32_step_bounds(ref.cfg);
    Verdict v = compare_gradients(got, ref.steps.at(k), bounds);
    v.add(compare_adamw_values(got, ref.steps.at(k), adamw_step(ref.cfg, k), bounds.gradient));
    return v;
  }

  static void check(const std::string& schedule, const Layout& l, const std::string& extra = "",
                    const std::string& model = "") {
    for (int k = 1; k <= kSteps; ++k) {
      const std::string what = schedule + " on " + l.name + (extra.empty() ? "" : " " + extra) +
                               (model.empty() ? "" : " " + model) + " step " + std::to_string(k);
      const Verdict v = compare_step(layout_step(schedule, l, k, "", extra, model), l, k, model);
      EXPECT_TRUE(v.passed()) << v.failures(what);
      const Check w = v.worst();
      if (w.ratio() >= worst_clean_.ratio()) {
        worst_clean_ = w;
        worst_clean_.what = what + ": " + w.what;
      }
    }
  }

  // A layout with planted faults: step `k` must be rejected by the comparison above.
  static void expect_rejected(const std::string& faults, const std::string& schedule, const Layout& l, int k = 1) {
    const Verdict v = compare_step(layout_step(schedule, l, k, "PPTRAIN_FAULTS=" + faults), l, k);
    const std::string what = "planted " + faults + " (" + schedule + " on " + l.name + ", step " + std::to_string(k) + ")";
    EXPECT_FALSE(v.passed()) << what << " was not caught: " << v.summary();
    EXPECT_GE(v.worst().ratio(), kClearMargin) << what << ": " << v.summary();
    std::cout << what << ": " << v.summary() << "\n";
  }

  static TempDir* dir_;
  static int runs_;
  static Check worst_clean_;  // over every clean comparison so far
};
TempDir* Equivalence::dir_ = nullptr;
int Equivalence::runs_ = 0;
Check Equivalence::worst_clean_{"(none)", 0, 1};

}  // namespace

// One test per schedule, over the layouts with pipeline parallelism.
#define SCHEDULE_TEST(Name, schedule)           \
  TEST_F(Equivalence, Name) {                   \
    for (const Layout& l : kLayouts)            \
      if (l.pp > 1) check(schedule, l);         \
  }
SCHEDULE_TEST(GPipe, "gpipe")
SCHEDULE_TEST(OneFOneB, "1f1b")
SCHEDULE_TEST(Interleaved1F1B, "interleaved-1f1b")
SCHEDULE_TEST(LoopedBFS, "looped-bfs")
SCHEDULE_TEST(ZBH1, "zb-h1")
SCHEDULE_TEST(ZBH2, "zb-h2")
SCHEDULE_TEST(ZBV, "zbv")
SCHEDULE_TEST(DualPipeV, "dualpipev")

TEST_F(Equivalence, TensorParallelOnly) { check("1f1b", kTp2); }

TEST_F(Equivalence, EachStepFromTheReferenceIsARunResumedFromItsCheckpoint) {
  // What makes one run of a layout stand for one run per step: step 2 of a --step-from run
  // and step 2 of a run resumed from the reference's checkpoint of step 1 are the same bits
  // (pp 2 × dp 2 under ZB-H1: pipeline, data-parallel reduction and W split alike).
  const std::string resumed = train("zb-h1", kPp2Dp2, kMicrobatches,
                                    "checkpoint.resume=" + reference(kMicrobatches * kPp2Dp2.dp).checkpoints +
                                        "/step_00000001.h5");
  const Verdict v = compare_exact(layout_step("zb-h1", kPp2Dp2, 2), dump(resumed, kPp2Dp2, 2));
  EXPECT_TRUE(v.passed()) << v.failures("step 2 from --step-from vs resumed");
  // The loss and every tensor were compared (the model has 8 blocks of 12 tensors): more
  // than two checks means the dumps were not empty on either side.
  EXPECT_GT(v.checks.size(), 2u);
}

TEST_F(Equivalence, TiedEmbeddingSummedAcrossFirstAndLastStage) {
  // pp=2 with 1F1B: stage 0 (embedding) and stage 1 (head) are on different ranks, each
  // with a copy of wte. Both copies must carry the full single-process gradient.
  const GlobalDump got = layout_step("1f1b", kPp2, 1);
  const GlobalDump& want = reference(kMicrobatches).steps.at(1);
  GlobalDump wte_only = want, got_wte = got;
  wte_only.tensors = {{"wte.weight", want.tensors.at("wte.weight")}};
  got_wte.tensors = {{"wte.weight", got.tensors.at("wte.weight")}};
  const Verdict v = compare_gradients(got_wte, wte_only, fp32_step_bounds(reference(kMicrobatches).cfg));
  EXPECT_TRUE(v.passed()) << v.failures("pp2 wte");
  EXPECT_GT(v.checks.size(), 2u);
  EXPECT_EQ(got.max_replica_diff, 0.0);  // the two ranks' copies are identical
}

TEST_F(Equivalence, UntiedOutputHeadOnEveryKindOfLayout) {
  // model.tie_embeddings: false: the head's lm_head.weight lives on the last stage only (no
  // embedding group), vocab-parallel under tp; wte gets the embedding's gradient alone.
  const std::string untied = "model.tie_embeddings=false";
  check("1f1b", kPp2, "", untied);
  check("zbv", kPp2, "", untied);  // V placement: embedding and head both on rank 0
  check("1f1b", kPp2Tp2, "", untied);
  check("zb-h1", kPp2Dp2, "", untied);
  const GlobalDump& ref = reference(kMicrobatches, untied).steps.at(1);
  EXPECT_EQ(ref.tensors.at("lm_head.weight").shape, (std::vector<int64_t>{19, 16}));
  EXPECT_EQ(ref.tensors.count("lm_head.weight"), 1u);
  EXPECT_EQ(reference(kMicrobatches).steps.at(1).tensors.count("lm_head.weight"), 0u);
}

// The Llama family on the same layouts: 4 query heads sharing 2 key/value heads (one per tp
// rank under tp = 2), SwiGLU width 24 (12 per tp rank), untied head, a small rope_theta so
// the 8 positions turn by clearly different angles.
const std::string kLlama = "model.arch=llama model.n_kv_head=2 model.ffn_hidden=24 model.rope_theta=100";

#define LLAMA_SCHEDULE_TEST(Name, schedule)          \
  TEST_F(Equivalence, Llama##Name) {                 \
    for (const Layout& l : {kPp2, kPp2Tp2, kPp2Dp2}) \
      check(schedule, l, "", kLlama);                \
  }
LLAMA_SCHEDULE_TEST(GPipe, "gpipe")
LLAMA_SCHEDULE_TEST(OneFOneB, "1f1b")
LLAMA_SCHEDULE_TEST(Interleaved1F1B, "interleaved-1f1b")
LLAMA_SCHEDULE_TEST(LoopedBFS, "looped-bfs")
LLAMA_SCHEDULE_TEST(ZBH1, "zb-h1")
LLAMA_SCHEDULE_TEST(ZBH2, "zb-h2")
LLAMA_SCHEDULE_TEST(ZBV, "zbv")
LLAMA_SCHEDULE_TEST(DualPipeV, "dualpipev")

TEST_F(Equivalence, LlamaMultiQueryAndMultiHeadAttentionUnderTensorParallelism) {
  // One key/value head (tp = 1 only: tp must divide n_kv_head) and four (multi-head).
  check("1f1b", kPp2, "", kLlama + " model.n_kv_head=1");
  check("zb-h1", kPp2Tp2, "", kLlama + " model.n_kv_head=4");
  EXPECT_EQ(reference(kMicrobatches, kLlama).steps.at(1).tensors.at("h.0.attn.qkv.weight").shape,
            (std::vector<int64_t>{32, 16}));  // (4 + 2·2) heads of 4
}

// The family's other classes and Llama 3.1's scaling on the layouts with tp: Qwen2's q, k,
// v biases (sliced with their rows, their gradients reduced like the weights'), Mistral's
// heads wider than d_model / n_head (8 of 4 heads over d_model 16: q 32 wide), the llama3
// frequency scaling (original context 4 of the 8 positions, so it acts).
TEST_F(Equivalence, Qwen2BiasesMistralHeadWidthAndLlama31ScalingUnderTensorParallelism) {
  check("zb-h1", kPp2Tp2, "", kLlama + " model.arch=qwen2");
  // Qwen3's head norms: each tp rank holds half the heads, so their gains' gradients are
  // summed over tp in W (a missing sum would halve them).
  check("zbv", kPp2Tp2, "", kLlama + " model.arch=qwen3 model.head_dim=8");
  check("zbv", kPp2Tp2, "", kLlama + " model.arch=mistral model.head_dim=8");
  check("1f1b", kPp2Tp2, "",
        kLlama + " model.rope_scaling=llama3 model.rope_factor=8 model.rope_original_max_positions=4");
  EXPECT_EQ(reference(kMicrobatches, kLlama + " model.arch=qwen2").steps.at(1).tensors.at("h.0.attn.qkv.bias").shape,
            (std::vector<int64_t>{32}));
  EXPECT_EQ(reference(kMicrobatches, kLlama + " model.arch=mistral model.head_dim=8")
                .steps.at(1).tensors.at("h.0.attn.proj.weight").shape,
            (std::vector<int64_t>{16, 32}));
}

TEST_F(Equivalence, VocabParallelCrossEntropyWithPaddedVocabulary) {
  // tp=4 splits vocab 19 into 4 shards of 5 (padded to 20): the last shard has 4 real
  // columns. Loss, gradients and the updated embedding match the single process.
  check("1f1b", kTp4);
  EXPECT_EQ(reference(kMicrobatches).steps.at(1).tensors.at("wte.weight").shape, (std::vector<int64_t>{19, 16}));
}

TEST_F(Equivalence, StagesOfOnlyTheEmbeddingOrOnlyTheHead) {
  // What a planner may choose when the head is costly: the first stage holds the embedding
  // alone, or the last the head alone (under V placement both sit on rank 0 with no block).
  check("1f1b", kPp2, "parallel.layers_per_stage=[0,8]");
  check("1f1b", kPp2, "parallel.layers_per_stage=[8,0]");
  check("zbv", kPp2, "parallel.layers_per_stage=[0,4,4,0]");
  check("interleaved-1f1b", kPp2, "parallel.layers_per_stage=[0,4,4,0]");
}

TEST_F(Equivalence, CleanRunsStayWellInsideTheBounds) {
  // Not a bound of its own: prints how much of its bound the worst clean comparison of
  // this run used (the headroom), and fails only if some comparison above failed.
  std::cout << "clean runs: worst diff/bound " << worst_clean_.ratio() << ": " << worst_clean_.what << " ("
            << worst_clean_.diff << " vs " << worst_clean_.bound << ")\n";
  EXPECT_LE(worst_clean_.ratio(), 1.0);
}

// ---- planted bugs: the comparison above must reject each ---------------------------------

TEST_F(Equivalence, PlantedGradientScaledOnOneRankIsRejected) {
  // 1 + 1e-3 on one tensor of one rank: 1e-3 relative against a bound of ~5e-5.
  expect_rejected("grad_scale@0:h.0.mlp.fc.weight:1.001", "1f1b", kPp2);
}

TEST_F(Equivalence, PlantedMissingTensorParallelAllReduceIsRejected) {
  expect_rejected("skip_tp_allreduce@1:row", "1f1b", kTp2);   // row-parallel output (forward)
  expect_rejected("skip_tp_allreduce@1:col", "zb-h1", kPp2Tp2);  // column-parallel input gradient (I)
}

TEST_F(Equivalence, PlantedDroppedMicrobatchIsRejected) {
  expect_rejected("drop_microbatch@0:3", "zb-h1", kPp2);  // its W skipped on the first pp rank
}

TEST_F(Equivalence, PlantedOptimizerBugsAreRejected) {
  // pp=4 rank 1 holds blocks 2 and 3 only, so the gradients stay right and only the AdamW
  // value comparison can see these (no tied-embedding copy to disagree).
  expect_rejected("skip_weight_decay@1", "1f1b", kPp4);
  expect_rejected("repeat_update@1", "1f1b", kPp4);
  expect_rejected("skip_weight_decay@1", "1f1b", kPp4, 3);  // with the moments of two steps
}
