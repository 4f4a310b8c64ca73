// The linear layers' products on oneDNN's matmul with packed weights
// (backend/cpu/packed_weights.h): forward (a·wᵀ, with a bias or added onto c) and dgrad (a·w,
// written or added) within a float sum's rounding bound of a double product, on a shape whose
// weight fills the kernel's blocks exactly (copied by packed_weights.cpp) and one that does not
// (oneDNN's reorder, padded); each window packs the weights anew and frees those it did not
// use; nothing runs outside a window; the cpu backend takes the packed path only in a window
// of enough rows (below them its dgrad runs on oneDNN's sgemm); and a training run on packed weights follows the same losses as one on
// OpenBLAS alone, and on two pipeline stages those of one process. Where oneDNN's matmul has no brgemm kernel (no AVX-512) or libdnnl2 is
// missing, the packed path does not run and these tests say so and skip.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/packed_weights.h"
#include "backend/ops.h"
#include "support/test_util.h"

namespace pptrain {
namespace {

using cpu::PackedWeights;
using Use = PackedWeights::Use;

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& e : v) e = u(gen);
  return v;
}

struct Product {
  Use use;
  int n, k, cols;
  const float* a;   // [n, k]
  const float* w;   // forward: [cols, k]; dgrad: [k, cols]
  const float* b;   // [cols] or null
  const float* c0;  // c before, where the product is added; null where it is written
};

// Largest |c − ref| over its bound, ref = a·op(w) (+ b) (+ c0) in double: a length-k float sum
// rounds at most k times (γ_k ≈ k·u, u = 2⁻²⁴, of Σ|a·w|), a blocked order (the kernel adds
// panels' partial sums) at most doubles that, and the bias and c0 are a rounding each more:
// 2(k + 2)·u·(Σ|a·w| + |b| + |c0|).
double worst_error(const Product& p, const std::vector<float>& c) {
  double worst = 0;
  for (int i = 0; i < p.n; ++i)
    for (int j = 0; j < p.cols; ++j) {
      double ref = 0, magnitude = 0;
      for (int q = 0; q < p.k; ++q) {
        const float wv = p.use == Use::forward ? p.w[size_t(j) * p.k + q] : p.w[size_t(q) * p.cols + j];
        const double prod = double(p.a[size_t(i) * p.k + q]) * wv;
        ref += prod;
        magnitude += std::fabs(prod);
      }
      if (p.b) ref += p.b[j], magnitude += std::fabs(p.b[j]);
      if (p.c0) ref += p.c0[size_t(i) * p.cols + j], magnitude += std::fabs(p.c0[size_t(i) * p.cols + j]);
      const double bound = 2.0 * (p.k + 2) * std::ldexp(1.0, -24) * magnitude + 1e-30;
      const double got = c[size_t(i) * p.cols + j];
      worst = std::max(worst, std::isfinite(got) ? std::fabs(got - ref) / bound : INFINITY);
    }
  return worst;
}

std::vector<float> run(PackedWeights& packed, const Product& p) {
  std::vector<float> c = p.c0 ? std::vector<float>(p.c0, p.c0 + size_t(p.n) * p.cols)
                              : std::vector<float>(size_t(p.n) * p.cols, NAN);  // written, never read
  packed.run(p.use, c.data(), p.a, p.w, p.b, p.n, p.k, p.cols, p.c0 != nullptr);
  return c;
}

// DIR/data, a Markov corpus of 64 tokens, and DIR/model.yaml: `layers` blocks of d_model 64,
// seq_len 128, 4 steps of `microbatches` of 2 sequences at lr 1e-2, with the given parallel
// keys and the training's evaluation keys (and the validation shards where `val`). Each
// microbatch runs 256 rows through every weight, so 8 of them a window pack
// (PackedWeights::kMinRows).
void write_model(const testing::TempDir& dir, int layers, const std::string& parallel, const std::string& evaluation,
                 bool val) {
  auto data = testing::prepare_markov_corpus(dir.file("data"), 64, 40000, 7);
  ASSERT_EQ(data.exit_code, 0) << data.output;
  testing::write_file(
      dir.file("model.yaml"),
      "model: {n_layer: " + std::to_string(layers) + ", n_head: 2, d_model: 64, seq_len: 128, vocab_size: 64}\n" +
          "parallel: {" + parallel + "}\n" +
          "training: {steps: 4, micro_batch_size: 2, lr: 1.0e-2, warmup_steps: 0, " + evaluation + "}\n" +
          "data: {train: \"" + dir.file("data") + "/train_*.bin\"" +
          (val ? ", val: \"" + dir.file("data") + "/val_*.bin\"" : std::string()) + "}\n" +
          "logging: {every: 1, sample_tokens: 0}\n");
}

#define SKIP_WITHOUT_PACKED_WEIGHTS()                                                            \
  if (!PackedWeights::why_not().empty())                                                         \
    GTEST_SKIP() << "weights are not packed on this machine: " << PackedWeights::why_not();

TEST(PackedWeights, ProductsMatchADoubleReference) {
  SKIP_WITHOUT_PACKED_WEIGHTS();
  auto packed = PackedWeights::make();
  ASSERT_TRUE(packed);
  // k = 64, cols = 128: whole blocks of the brgemm layouts (16 × 64 on AVX-512), copied by
  // packed_weights.cpp; k = 70, cols = 29: padded, oneDNN's reorder.
  struct Shape {
    int n, k, cols;
  };
  for (const Shape s : {Shape{37, 64, 128}, Shape{29, 70, 29}}) {
    const std::vector<float> a = random_values(size_t(s.n) * s.k, 1), w = random_values(size_t(s.k) * s.cols, 2),
                             b = random_values(s.cols, 3), c0 = random_values(size_t(s.n) * s.cols, 4);
    packed->hold(true);
    for (const Use use : {Use::forward, Use::dgrad}) {
      const char* name = use == Use::forward ? "forward" : "dgrad";
      for (const bool bias : {false, true})
        for (const bool add : {false, true}) {
          if (bias && add) continue;  // the linear layers add a bias to a written c only
          const Product p{use, s.n, s.k, s.cols, a.data(), w.data(), bias ? b.data() : nullptr,
                          add ? c0.data() : nullptr};
          EXPECT_LE(worst_error(p, run(*packed, p)), 1.0)
              << name << " n=" << s.n << " k=" << s.k << " cols=" << s.cols << " bias " << bias << " add " << add;
        }
      // The check can fail: the weight read the other way round (its k·cols floats as [k, cols]
      // for forward, [cols, k] for dgrad) gives unrelated sums, off by about their magnitude
      // Σ|a·w| while the bound is 2(k + 2)·u of it (~1e-5): near 1e5 of the bound; 100 leaves
      // room for an unlucky entry.
      Product p{use, s.n, s.k, s.cols, a.data(), w.data(), nullptr, nullptr};
      const std::vector<float> c = run(*packed, p);
      p.use = use == Use::forward ? Use::dgrad : Use::forward;
      EXPECT_GT(worst_error(p, c), 100.0) << name << " read as the other";
    }
    packed->hold(false);
  }
}

TEST(PackedWeights, EachWindowPacksTheWeightsAnewAndFreesThoseItDidNotUse) {
  SKIP_WITHOUT_PACKED_WEIGHTS();
  auto packed = PackedWeights::make();
  ASSERT_TRUE(packed);
  const int n = 16, k = 64, cols = 128;
  const std::vector<float> a = random_values(size_t(n) * k, 1);
  std::vector<float> w = random_values(size_t(k) * cols, 2), other = random_values(size_t(k) * cols, 5),
                     third = random_values(size_t(k) * cols, 6);
  auto product = [&](const std::vector<float>& weight) {
    return Product{Use::forward, n, k, cols, a.data(), weight.data(), nullptr, nullptr};
  };
  // A window that uses the given weights, each product checked; the bytes held after it.
  auto window = [&](std::initializer_list<const std::vector<float>*> weights) {
    packed->hold(true);
    for (const std::vector<float>* weight : weights)
      EXPECT_LE(worst_error(product(*weight), run(*packed, product(*weight))), 1.0) << "a stale packed copy";
    packed->hold(false);
    return packed->packed_bytes();
  };
  const size_t one = window({&w});
  EXPECT_GE(one, size_t(k) * cols * sizeof(float));
  EXPECT_EQ(window({&w, &other}), 2 * one);
  // An update between windows, as AdamW's: the next window reads the new values. `other`,
  // unused for a window, stays...
  for (float& e : w) e = -0.5f * e + 0.25f;
  EXPECT_EQ(window({&w}), 2 * one);
  // ... and `third` takes its storage: nothing more is held.
  EXPECT_EQ(window({&w, &third}), 2 * one);
  // Unused for a window, `third`'s copy stays; unused for another, it is freed.
  EXPECT_EQ(window({&w}), 2 * one);
  EXPECT_EQ(window({&w}), one);
  // Weights that move between windows (the masters' two arenas under post-validation) take
  // the storage of the copies of those not used since: still one copy's bytes, each window.
  for (int step = 0; step < 3; ++step) {
    EXPECT_EQ(window({&other}), one) << "step " << step;
    EXPECT_EQ(window({&w}), one) << "step " << step;
  }
  // A weight whose copy was taken earlier in the same window is packed again, right.
  EXPECT_EQ(window({&third, &w}), 2 * one);
  EXPECT_THROW(run(*packed, product(w)), std::logic_error) << "outside a window";
}

// A copy made ahead (prepare, which the pipeline calls while it waits) serves the window's
// products of the same shape in every form (a bias, added onto c, written): none of them packs
// again, and each is right. On a weight that fills the kernel's blocks (the register
// transposes of the forward layout) and one that does not (oneDNN's reorder). A weight
// changed between windows is packed anew by the next window's prepare.
TEST(PackedWeights, PreparedCopiesServeTheProducts) {
  SKIP_WITHOUT_PACKED_WEIGHTS();
  auto packed = PackedWeights::make();
  ASSERT_TRUE(packed);
  for (const auto& [n, k, cols] : {std::tuple{24, 64, 128}, std::tuple{24, 70, 29}}) {
    const std::vector<float> a_fwd = random_values(size_t(n) * k, 1), a_dgrad = random_values(size_t(n) * cols, 2);
    std::vector<float> w = random_values(size_t(k) * cols, 3);  // [cols, k] forward, [k, cols] as dgrad's
    const std::vector<float> b = random_values(cols, 4), c_fwd = random_values(size_t(n) * cols, 5),
                             c_dgrad = random_values(size_t(n) * k, 6);
    for (int window = 0; window < 2; ++window) {
      const std::string at = "n " + std::to_string(n) + " k " + std::to_string(k) + " cols " + std::to_string(cols) +
                             ", window " + std::to_string(window);
      packed->hold(true);
      const uint64_t before = packed->packings();
      packed->prepare(Use::forward, w.data(), n, k, cols);
      // The dgrad reads the same storage as a [cols, k] matrix: its k is the forward's cols.
      packed->prepare(Use::dgrad, w.data(), n, cols, k);
      EXPECT_EQ(packed->packings(), before + 2) << at;
      packed->prepare(Use::forward, w.data(), n, k, cols);  // made already: nothing
      EXPECT_EQ(packed->packings(), before + 2) << at;
      for (const Product& p : {Product{Use::forward, n, k, cols, a_fwd.data(), w.data(), b.data(), nullptr},
                               Product{Use::forward, n, k, cols, a_fwd.data(), w.data(), nullptr, c_fwd.data()},
                               Product{Use::forward, n, k, cols, a_fwd.data(), w.data(), nullptr, nullptr},
                               Product{Use::dgrad, n, cols, k, a_dgrad.data(), w.data(), nullptr, c_dgrad.data()},
                               Product{Use::dgrad, n, cols, k, a_dgrad.data(), w.data(), nullptr, nullptr}})
        EXPECT_LE(worst_error(p, run(*packed, p)), 1.0) << at << ", use " << int(p.use) << ", bias " << !!p.b;
      EXPECT_EQ(packed->packings(), before + 2) << at << ": a product packed again";
      packed->hold(false);
      for (float& e : w) e = 0.5f * e - 0.125f;  // an update between windows
    }
    EXPECT_THROW(packed->prepare(Use::forward, w.data(), n, k, cols), std::logic_error) << "outside a window";
  }
}

TEST(PackedWeights, TheCpuBackendPacksOnlyInAWindowOfEnoughRows) {
  SKIP_WITHOUT_PACKED_WEIGHTS();
  auto ops = make_cpu_ops();
  const int n = 256, in = 64, out = 128;
  const std::vector<float> x = random_values(size_t(n) * in, 1), b = random_values(out, 3);
  std::vector<float> w = random_values(size_t(out) * in, 2);
  const std::vector<float> w0 = w;
  auto forward = [&] {
    std::vector<float> y(size_t(n) * out);
    ops->linear_forward(y.data(), x.data(), w.data(), b.data(), n, in, out);
    return y;
  };
  const Product p{Use::forward, n, in, out, x.data(), w.data(), b.data(), nullptr};
  // Which path ran shows by breaking the window's promise: the weight changed after its first
  // use is seen by the plain path and not by a packed copy.
  auto first_and_after_a_change = [&](int microbatches) {
    w = w0;
    WeightsHeld held(*ops, microbatches);
    std::vector<float> first = forward();
    EXPECT_LE(worst_error(p, first), 1.0) << microbatches << " microbatches";
    for (float& e : w) e = -e;
    return std::make_pair(first, forward());
  };
  // 256 rows × 4 microbatches: below PackedWeights::kMinRows, plain.
  static_assert(256 * 4 < PackedWeights::kMinRows && 256 * 8 >= PackedWeights::kMinRows);
  auto [first4, changed4] = first_and_after_a_change(4);
  EXPECT_NE(first4, changed4) << "4 microbatches of 256 rows: packed";
  // × 8: packed, so the change is not seen in the window.
  auto [first8, changed8] = first_and_after_a_change(8);
  EXPECT_EQ(first8, changed8) << "8 microbatches of 256 rows: not packed";
  // The next window packs the changed weight: its product is the negated one (b kept).
  {
    WeightsHeld held(*ops, 8);
    const std::vector<float> y = forward();
    EXPECT_LE(worst_error(p, y), 1.0) << "a stale copy in the next window";
  }
  // Outside a window: plain again.
  w = w0;
  EXPECT_LE(worst_error(p, forward()), 1.0);
  // The dgrad, written and added, outside a window (OpenBLAS), below the rows to pack
  // (oneDNN's sgemm) and above (packed): dx[n, in] (+)= dy[n, out] · w[out, in].
  const std::vector<float> dy = random_values(size_t(n) * out, 7), dx0 = random_values(size_t(n) * in, 8);
  for (const int microbatches : {0, 4, 8})
    for (const bool add : {false, true}) {
      std::optional<WeightsHeld> held;
      if (microbatches) held.emplace(*ops, microbatches);
      std::vector<float> dx = add ? dx0 : std::vector<float>(dx0.size(), NAN);
      ops->linear_backward_input(dx.data(), dy.data(), w.data(), n, in, out, add);
      const Product d{Use::dgrad, n, out, in, dy.data(), w.data(), nullptr, add ? dx0.data() : nullptr};
      EXPECT_LE(worst_error(d, dx), 1.0) << "dgrad, " << microbatches << " microbatches, add " << add;
    }
}

// A training run whose step runs 8 microbatches of 256 rows through every weight (packed)
// against the same run with PPTRAIN_CPU_GEMM=openblas (nothing packed): the same losses up to
// the different summation order's rounding, ~1e-6 of the loss a step. 1e-4 leaves that room
// over 4 steps and still catches stale weights: at lr 1e-2 one step's update moves this
// model's loss by ~1e-2, so a step run on the last step's packed copies is far outside it.
// And the same run on two pipeline stages (one layer each, a window per rank). Each run
// evaluates twice (the forward layouts packed in an evaluation's window, the dgrad ones kept
// for the next step).
TEST(PackedWeights, ATrainingRunFollowsTheLossesOfOneOnOpenBlasAloneAndTwoStagesThoseOfOneProcess) {
  SKIP_WITHOUT_PACKED_WEIGHTS();
  testing::TempDir dir;
  write_model(dir, 2, "microbatches: 8", "eval_every: 2, eval_batches: 2", true);
  auto train = [&](const std::string& launch, const std::string& name, const std::string& overrides = "") {
    // 4 steps of a 2-layer model: seconds; 300 s only turns a hang into a failure.
    auto r = testing::run_command(launch + testing::pptrain_bin() + " train " + dir.file("model.yaml") +
                                      " logging.metrics=" + dir.file(name) + overrides + " 2>&1",
                                  300);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r;
  };
  auto packed_run = train("env -u PPTRAIN_CPU_GEMM OMP_NUM_THREADS=1 ", "packed.jsonl");
  EXPECT_NE(packed_run.output.find("| weights packed from"), std::string::npos) << packed_run.output;
  auto plain_run = train("PPTRAIN_CPU_GEMM=openblas OMP_NUM_THREADS=1 ", "plain.jsonl");
  EXPECT_NE(plain_run.output.find("| weights not packed: PPTRAIN_CPU_GEMM=openblas"), std::string::npos)
      << plain_run.output;
  train("env -u PPTRAIN_CPU_GEMM " + testing::mpirun(2), "pp2.jsonl",
        " parallel.pp=2 parallel.schedule=1f1b parallel.layers_per_stage=[1,1]");
  // The training losses, then the evaluations' (steps 2 and 4: a window of 2 batches each).
  auto losses = [&](const std::string& name) {
    const std::string log = testing::read_file(dir.file(name));
    std::vector<double> all = testing::json_values(log, "loss");
    for (double v : testing::json_values(log, "val_loss")) all.push_back(v);
    return all;
  };
  const std::vector<double> packed = losses("packed.jsonl"), plain = losses("plain.jsonl"), pp2 = losses("pp2.jsonl");
  ASSERT_EQ(packed.size(), 6u);
  ASSERT_EQ(plain.size(), 6u);
  ASSERT_EQ(pp2.size(), 6u);
  for (size_t i = 0; i < packed.size(); ++i) {
    EXPECT_NEAR(packed[i], plain[i], 1e-4 * std::fabs(plain[i])) << "loss " << i;
    // Two stages run each layer's products on the same packed copies with the same rows as
    // the one process does (bitwise equal here); 1e-6 leaves room for rounding elsewhere and
    // is far below what a stale or misplaced copy moves.
    EXPECT_NEAR(pp2[i], packed[i], 1e-6 * std::fabs(packed[i])) << "pp 2, loss " << i;
  }
}

// While a pipeline rank waits for a receive it packs the weights its stages will read
// (runtime/executor.h): here pp 2 × dp 2 under ZB-V, where each rank holds two stages and
// waits for its first input before its second stage's first F. Under ZeRO-1 a stage's weights
// are gathered over the dp group only before that stage's first F, so a copy made ahead of it
// would be of the last step's weights: the losses and gradient norms of every step equal those
// of zero: 0 bit for bit (printed to 1e-6; the same products on the same copies), and the
// trace shows the packing done while waiting. (Here the gathers of so small a model are done
// long before; that no stage is prepared before its gather is pinned exactly, on stand-ins, by
// test_executor_prepare.)
TEST(PackedWeights, PipelineRanksPackWhileTheyWaitAndAfterZeroOnesGather) {
  SKIP_WITHOUT_PACKED_WEIGHTS();
  testing::TempDir dir;
  write_model(dir, 4, "pp: 2, dp: 2, microbatches: 8, schedule: zbv, stages_per_rank: 2", "eval_every: 0", false);
  auto steps = [&](int zero) {
    const std::string name = "zero" + std::to_string(zero);
    // 4 steps of a 4-layer model on 4 ranks: seconds; 300 s only turns a hang into a failure.
    auto r = testing::run_command("env -u PPTRAIN_CPU_GEMM OMP_NUM_THREADS=1 " + testing::mpirun(4) +
                                      testing::pptrain_bin() + " train " + dir.file("model.yaml") +
                                      " parallel.zero=" + std::to_string(zero) + " logging.metrics=" +
                                      dir.file(name + ".jsonl") + " logging.trace=" + dir.file(name + ".json") +
                                      " 2>&1",
                                  300);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("| weights packed from"), std::string::npos) << r.output;
    const std::string log = testing::read_file(dir.file(name + ".jsonl"));
    std::vector<double> out = testing::json_values(log, "loss");
    for (double v : testing::json_values(log, "grad_norm")) out.push_back(v);
    return out;
  };
  const std::vector<double> full = steps(0), sharded = steps(1);
  ASSERT_EQ(full.size(), 8u);
  EXPECT_EQ(sharded, full) << "zero 1 (losses, then gradient norms) against zero 0";
  EXPECT_NE(testing::read_file(dir.file("zero1.json")).find("\"name\": \"prepare\""), std::string::npos)
      << "no rank packed while it waited";
}

}  // namespace
}  // namespace pptrain
