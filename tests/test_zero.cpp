// ZeRO-1 (parallel.zero: 1): the flat parameter arenas, the ranges each dp rank owns, the
// sharded optimizer state, and training under it.
//
// Bound. With dp = 2 the reduce-scatter sums each gradient element over two ranks, one
// addition a + b, which IEEE arithmetic makes equal to b + a: every element of the summed
// range is the same bits as the all-reduce gives zero: 0. AdamW is elementwise, so
// updating a range computes the same bits as updating the whole tensor, and the
// all-gather copies bits. With grad_clip 0 nothing else enters the update, so the bound
// that tests/support/tolerances.h derives for this pair of runs is 0: losses, gradients
// and parameters are compared bit for bit (compare_exact). Under clipping the gradient
// norm's sum of squares is added in another order (each dp rank's range, then the ranks),
// so the clip factor may differ by rounding: that comparison runs from identical state
// with the fp32 step bounds (fp32_step_bounds, adamw_value_allowance). Checkpoints moved
// between zero: 0 and zero: 1 layouts are compared the same way (one step from the same
// stored state, the layouts' reduction orders differing).
//
// Under training.precision: bf16 the fp32 masters are sharded too (each dp rank keeps its
// range's; the store itself: test_cuda_backend_model, the cpu backend has no bf16) and the
// bf16 copies are all-gathered. Against zero: 0 the bound is again 0:
// the dp = 2 sums are a + b = b + a; AdamW is elementwise, so the rank owning an element
// computes the same new master from the same fp32 inputs, and its bf16 copy (written by
// AdamW with the rounding of cast) is the rounding of the same fp32 value, the same bits;
// the all-gather copies those bits to the other rank. So the next step's bf16 weights, its
// loss and gradients, and the masters (gathered for the dump) are the same bits.
//
// A planted bug (zero_keep_stale: the weights outside the rank's range, masters under
// fp32 or bf16 copies under bf16, are not replaced by the gathered ones) must be rejected.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <numeric>
#include <set>

#include "core/config.h"
#include "job/memory_estimate.h"
#include "model/optimizer_state.h"
#include "partition/partition.h"
#include "model/param.h"
#include "support/dump_compare.h"
#include "support/test_util.h"

using namespace pptrain;
using namespace pptrain::testing;

namespace {

// ---------------------------------------------------------------- layout, ranges, state

// Tensors of every sharding kind, tp = 2: a padded vocab-parallel matrix (19 rows -> 20),
// a fused QKV (Rows3), a row-parallel matrix (Cols), replicated vectors of odd sizes.
std::vector<ParamSpec> specs() {
  std::vector<ParamSpec> s;
  ParamSpec wte{"wte.weight", {19, 6}, Shard::Rows, Init::Normal, 0.02f, true};
  wte.padded_rows = 20;
  s.push_back(wte);
  s.push_back({"h.0.attn.qkv.weight", {12, 6}, Shard::Rows3, Init::Normal, 0.02f, true});
  s.push_back({"h.0.attn.proj.weight", {6, 4}, Shard::Cols, Init::Normal, 0.02f, true});
  s.push_back({"h.0.ln_1.weight", {7}, Shard::Replicated, Init::Ones});
  s.push_back({"ln_f.bias", {33}, Shard::Replicated, Init::Zeros});
  return s;
}

struct Store {
  std::unique_ptr<Ops> ops = make_cpu_ops();
  std::unique_ptr<ParamStore> params;
  explicit Store(int shards, int tp = 2, int tp_rank = 1) {
    params = std::make_unique<ParamStore>(*ops, tp, tp_rank, 7);
    for (const ParamSpec& s : specs()) params->get_or_create(s);
    if (shards > 0) params->flatten(shards);
  }
};

TEST(ZeroLayout, ArenaKeepsTheValuesAndAlignsTensorsAndShards) {
  Store plain(0), flat(3);
  const FlatLayout& l = flat.params->flat_layout();
  EXPECT_EQ(l.shard_size % kFlatAlign, 0u);
  EXPECT_EQ(l.total(), 3 * l.shard_size);
  EXPECT_GE(l.total(), l.used);
  EXPECT_LT(l.total() - l.used, 3 * kFlatAlign + 3);  // at most one aligned block per shard of padding
  size_t next = 0;
  for (auto& [name, p] : flat.params->all()) {
    EXPECT_EQ(p->flat_offset % kFlatAlign, 0u) << name;
    EXPECT_EQ(p->flat_offset, next) << name << ": tensors follow each other in name order";
    next = p->flat_offset + (p->numel() + kFlatAlign - 1) / kFlatAlign * kFlatAlign;
    EXPECT_EQ(p->value.data(), flat.params->value_arena() + p->flat_offset) << name;
    EXPECT_EQ(p->grad.data(), flat.params->grad_arena() + p->flat_offset) << name;
    EXPECT_FALSE(p->value.owned());
    EXPECT_EQ(p->value.to_host(), plain.params->find(name)->value.to_host()) << name << ": values moved intact";
  }
  EXPECT_EQ(next, l.used);
}

// The local elements a set of slabs covers, as global index -> local index.
std::map<int64_t, int64_t> coverage(const Param& p, const std::vector<Slab>& slabs) {
  std::map<int64_t, int64_t> out;
  for (const Slab& s : slabs)
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < s.cols; ++c) {
        const int64_t g = (s.global_row + r) * p.global_cols() + s.global_col + c;
        EXPECT_TRUE(out.emplace(g, (s.local_row + r) * p.local_cols + s.local_col + c).second)
            << p.spec.name << ": global element " << g << " covered twice";
      }
  return out;
}

TEST(ZeroLayout, RangesOfATensorTileItsSlabsExactly) {
  // Every split of each tensor's local elements into three runs: the runs' rectangles,
  // intersected with the slabs, cover what the slabs cover, each element once, each at the
  // same local place, and only local elements inside the run.
  Store store(0);
  for (auto& [name, p] : store.params->all()) {
    const std::map<int64_t, int64_t> want = coverage(*p, p->slabs);
    const size_t n = p->numel();
    for (size_t a = 0; a <= n; a += 5)
      for (size_t b = a; b <= n; b += 7) {
        std::map<int64_t, int64_t> got;
        for (LocalRange r : {LocalRange{0, a}, LocalRange{a, b}, LocalRange{b, n}}) {
          for (const auto& [g, local] : coverage(*p, slabs_in_range(*p, r))) {
            EXPECT_TRUE(size_t(local) >= r.begin && size_t(local) < r.end) << name;
            EXPECT_TRUE(got.emplace(g, local).second) << name << ": element " << g << " in two runs";
          }
          EXPECT_LE(slabs_in_range(*p, r).size(), 3 * p->slabs.size()) << name;
        }
        EXPECT_EQ(got, want) << name << " split at " << a << ", " << b;
      }
  }
}

TEST(ZeroLayout, ShardedMomentsAreOneDpthOfTheFullState) {
  for (int dp : {2, 3, 4}) {
    Store store(dp);
    ParamStore& params = *store.params;
    const OptimizerState full(params);
    size_t numel = 0;
    for (auto& [name, p] : params.all()) numel += p->numel();
    EXPECT_EQ(full.bytes(), 8 * numel);
    std::map<std::string, size_t> covered;
    size_t bytes = 0;
    for (int shard = 0; shard < dp; ++shard) {
      OptimizerState state(params, shard);
      EXPECT_TRUE(state.sharded());
      // Measured from the state: every shard holds the same bytes, 1/dp of the padded total.
      EXPECT_EQ(state.bytes(), 8 * params.flat_layout().total() / size_t(dp)) << "dp " << dp << " shard " << shard;
      bytes += state.bytes();
      for (auto& [name, p] : params.all()) {
        const LocalRange r = state.range(name);
        EXPECT_EQ(state.m(name).size(), r.size());
        covered[name] += r.size();
      }
    }
    EXPECT_EQ(bytes, 8 * params.flat_layout().total());
    EXPECT_LE(bytes - full.bytes(), 8 * (params.all().size() + size_t(dp)) * kFlatAlign) << "only padding is added";
    for (auto& [name, p] : params.all()) EXPECT_EQ(covered[name], p->numel()) << name << ": ranges tile the tensor";
  }
}

TEST(ZeroLayout, MomentsGoToAndFromTheWholeLocalShard) {
  Store store(2);
  ParamStore& params = *store.params;
  OptimizerState state(params, 1);
  for (auto& [name, p] : params.all()) {
    std::vector<float> local(p->numel());
    std::iota(local.begin(), local.end(), 1.0f);
    state.upload_local(name, state.m(name), local.data());
    std::vector<float> back(p->numel(), -1.0f);
    state.download_local(name, state.m(name), back.data());
    const LocalRange r = state.range(name);
    for (size_t i = 0; i < p->numel(); ++i)
      EXPECT_EQ(back[i], i >= r.begin && i < r.end ? local[i] : 0.0f) << name << " element " << i;
  }
}

// ---------------------------------------------------------------- training under mpirun

struct Layout {
  const char* name;
  int pp, tp, dp, microbatches;
};
const Layout kDp2{"dp2", 1, 1, 2, 4}, kPp2Dp2{"pp2dp2", 2, 1, 2, 4}, kDp2Tp2{"dp2tp2", 1, 2, 2, 4},
    kPp2{"pp2", 2, 1, 1, 8};  // the same global batch of 8 microbatches
constexpr int kSteps = 3;
constexpr double kClearMargin = 3.0;

class ZeroTraining : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto r = prepare_markov_corpus(dir_->file("data"), 19, 20000, 5);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // vocab 19 is padded under tp = 2; 4 blocks so pp 2 with 2 stages per rank has blocks.
    write_file(dir_->file("model.yaml"),
               "model: {n_layer: 4, n_head: 4, d_model: 16, seq_len: 8, vocab_size: 19}\n"
               "training: {steps: 3, micro_batch_size: 2, lr: 1.0e-2, warmup_steps: 0, grad_clip: 0.0,"
               " eval_every: 0, weight_decay: 0.1}\n"
               "data: {train: '" + dir_->file("data") + "/train_*.bin'}\n"
               "logging: {every: 1, sample_tokens: 0}\n");
  }
  static void TearDownTestSuite() { delete dir_; }

  // `pptrain train` on a layout with zero 0 or 1 and `extra` overrides, dumping every
  // step; returns the dump directory.
  static std::string train(const Layout& l, int zero, const std::string& schedule, const std::string& extra = "",
                           const std::string& env = "", const std::string& bin = pptrain_bin()) {
    const std::string out = dir_->file("run" + std::to_string(runs_++));
    const int v = schedule == "zbv" ? 2 : 1;
    const std::string cmd = env + " " + mpirun(l.pp * l.tp * l.dp) + bin + " train " +
                            dir_->file("model.yaml") + " parallel.schedule=" + schedule +
                            " parallel.pp=" + std::to_string(l.pp) + " parallel.tp=" + std::to_string(l.tp) +
                            " parallel.dp=" + std::to_string(l.dp) + " parallel.microbatches=" +
                            std::to_string(l.microbatches) + " parallel.stages_per_rank=" + std::to_string(v) +
                            " parallel.zero=" + std::to_string(zero) + " " + extra + " --dump " + out;
    auto r = run_command(cmd, 120);
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
    return out;
  }

  // Step `step` of a run's dumps (dp replica 0 writes them).
  static GlobalDump dump(const std::string& out, const Layout& l, int step) {
    std::vector<std::string> files;
    for (int rank = 0; rank < l.pp * l.tp; ++rank)
      files.push_back(out + "/step" + std::to_string(step) + ".rank" + std::to_string(rank) + ".bin");
    return read_param_dumps(files);
  }

  // One step from the same state, two layouts (reduction orders differ): loss and
  // gradients within the fp32 step bounds, values within what AdamW makes of that noise.
  static Verdict compare_step(const GlobalDump& got, const GlobalDump& want, int step, const std::string& extra = "") {
    const Config cfg = load_config(dir_->file("model.yaml"), split_words(extra));
    const StepBounds bounds = fp32_step_bounds(cfg);
    Verdict v = compare_gradients(got, want, bounds);
    v.add(compare_adamw_values(got, want, adamw_step(cfg, step), bounds.gradient));
    return v;
  }

  // Bitwise equality of losses, gradients and values.
  static Verdict same_bits(const GlobalDump& got, const GlobalDump& want) {
    Verdict v = compare_exact(got, want);
    v.add(compare_gradients(got, want, StepBounds{0.0, 0.0}));
    return v;
  }

  // One bf16 step from the same state, two layouts: bf16 roundings of the same microbatches
  // are the same, the fp32 reductions run in other orders; bf16_against_bf16_bounds covers
  // that (and more: partial results rounded differently).
  static Verdict compare_bf16_step(const GlobalDump& got, const GlobalDump& want, int step, const std::string& extra) {
    const Config cfg = load_config(dir_->file("model.yaml"), split_words(kBf16 + " " + extra));
    const StepBounds bounds = bf16_against_bf16_bounds(cfg);
    Verdict v = compare_gradients(got, want, bounds);
    v.add(compare_adamw_values(got, want, adamw_step(cfg, step), bounds.gradient));
    return v;
  }

  // "parameters X MiB" of the first memory report line in `output`.
  static double masters_mib(const std::string& output) {
    const size_t at = output.find("  pp 0 tp 0: parameters ");
    EXPECT_NE(at, std::string::npos) << output;
    return at == std::string::npos ? -1.0 : std::stod(output.substr(at + 24));
  }

  static inline const std::string kBf16 = "device=cuda training.precision=bf16";

  static std::string checkpoint(const std::string& dir, int step) {
    char name[32];
    std::snprintf(name, sizeof name, "/step_%08d.h5", step);
    return dir + name;
  }

  static TempDir* dir_;
  static int runs_;
};
TempDir* ZeroTraining::dir_ = nullptr;
int ZeroTraining::runs_ = 0;

}  // namespace

TEST_F(ZeroTraining, SameBitsAsFullMomentsUnderEveryLayout) {
  struct Case {
    Layout layout;
    const char* schedule;
  };
  for (const Case& c : {Case{kDp2, "1f1b"}, Case{kPp2Dp2, "1f1b"}, Case{kPp2Dp2, "zb-h1"}, Case{kPp2Dp2, "zbv"},
                        Case{kPp2Dp2, "gpipe"}, Case{kDp2Tp2, "1f1b"}}) {
    const std::string full = train(c.layout, 0, c.schedule), zero = train(c.layout, 1, c.schedule);
    for (int k = 1; k <= kSteps; ++k) {
      const Verdict v = compare_exact(dump(zero, c.layout, k), dump(full, c.layout, k));
      EXPECT_TRUE(v.passed()) << v.failures(std::string(c.schedule) + " on " + c.layout.name + " step " +
                                            std::to_string(k));
    }
  }
}

TEST_F(ZeroTraining, EmulatedCudaBf16ShardedMastersSameBits) {
  // The cuda backend under the emulator, bf16: sharded masters, NcclComm's reduce-scatter
  // and the all-gather of the bf16 copies (over the emulated NCCL). The bound is 0 (see the
  // top): losses, gradients and the gathered masters, bit for bit, on dp 2 and on pp 2 x
  // dp 2 under a zero-bubble schedule.
  struct Case {
    Layout layout;
    const char* schedule;
  };
  for (const Case& c : {Case{kDp2, "1f1b"}, Case{kPp2Dp2, "zbv"}}) {
    const std::string full = train(c.layout, 0, c.schedule, kBf16, "", pptrain_emu_bin());
    const std::string zero = train(c.layout, 1, c.schedule, kBf16, "", pptrain_emu_bin());
    for (int k = 1; k <= kSteps; ++k) {
      const Verdict v = same_bits(dump(zero, c.layout, k), dump(full, c.layout, k));
      EXPECT_TRUE(v.passed()) << v.failures(std::string("emulated cuda bf16 ") + c.schedule + " on " + c.layout.name +
                                            " step " + std::to_string(k));
    }
  }
}

TEST_F(ZeroTraining, EmulatedCudaBf16MastersTakeHalfTheBytes) {
  // The fp32 masters each rank holds, as the log counts them after the first step (the
  // masters arena) and as --dry-run predicts them: under zero: 1 the range's shard_size
  // elements, exactly half the arena of zero: 0 (the arena is padded to dp equal ranges,
  // each tensor to kFlatAlign elements: both are counted, and printed below against the
  // unpadded parameter count). d_model 64 so that the MiB printed with three decimals
  // resolve the figures to 0.1%.
  const std::string bigger = kBf16 + " model.d_model=64 training.steps=1";
  const Config cfg = load_config(dir_->file("model.yaml"), split_words(bigger + " parallel.dp=2"));
  const std::vector<StageSpec> stages = stage_specs(cfg);
  const FlatLayout arena = flat_layout_of(rank_tensor_numels(cfg, stages, 0), 2);
  const double params = rank_parameter_count(cfg, stages, 0), mib = double(1 << 20);
  double measured[2], predicted[2];
  for (int zero : {0, 1}) {
    const std::string args = " train " + dir_->file("model.yaml") + " " + bigger + " parallel.dp=2" +
                             " parallel.microbatches=4 parallel.zero=" + std::to_string(zero);
    const auto run = run_command(mpirun(2) + pptrain_emu_bin() + args, 120);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const auto dry = run_command(pptrain_emu_bin() + args + " --dry-run", 60);
    ASSERT_EQ(dry.exit_code, 0) << dry.output;
    measured[zero] = masters_mib(run.output);
    predicted[zero] = masters_mib(dry.output);
    EXPECT_NEAR(predicted[zero], measured[zero], 0.001) << "--dry-run against the log, zero " << zero;
  }
  EXPECT_NEAR(measured[0], 4 * double(arena.total()) / mib, 0.0005);
  EXPECT_NEAR(measured[1], 4 * double(arena.shard_size) / mib, 0.0005);
  EXPECT_NEAR(measured[1], measured[0] / 2, 0.001) << "the masters did not halve";
  std::cout << "fp32 masters per rank: zero 0 " << measured[0] << " MiB, zero 1 " << measured[1] << " MiB; "
            << params << " parameters, arena " << arena.total() << " elements (padding " << double(arena.total()) - params
            << ")\n";
}

TEST_F(ZeroTraining, ClippedAndPostValidatedStepsAgree) {
  // Clipping active (grad_clip below the norm): the norm's summation order differs, so one
  // step from the same state is compared within the bounds. Post-validation rolls every
  // such step back and redoes it clipped: the same bits as the synchronous zero: 1 run.
  const std::string clip = "training.grad_clip=0.3";
  const std::string full = train(kPp2Dp2, 0, "1f1b", clip), zero = train(kPp2Dp2, 1, "1f1b", clip);
  const Verdict v = compare_step(dump(zero, kPp2Dp2, 1), dump(full, kPp2Dp2, 1), 1, clip);
  EXPECT_TRUE(v.passed()) << v.failures("clipped step 1");
  const std::string validated = train(kPp2Dp2, 1, "1f1b", clip + " training.post_validation=true");
  for (int k = 1; k <= kSteps; ++k) {
    const Verdict e = compare_exact(dump(validated, kPp2Dp2, k), dump(zero, kPp2Dp2, k));
    EXPECT_TRUE(e.passed()) << e.failures("post-validation step " + std::to_string(k));
  }
}

TEST_F(ZeroTraining, PlantedStaleMastersAreCaught) {
  const std::string full = train(kDp2, 0, "1f1b");
  const std::string bad = train(kDp2, 1, "1f1b", "", "PPTRAIN_FAULTS=zero_keep_stale");
  const Verdict v = compare_step(dump(bad, kDp2, 1), dump(full, kDp2, 1), 1);
  EXPECT_FALSE(v.passed()) << "zero_keep_stale was not caught: " << v.summary();
  EXPECT_GE(v.worst().ratio(), kClearMargin) << v.summary();
  std::cout << "planted zero_keep_stale: " << v.summary() << "\n";
}

TEST_F(ZeroTraining, NonFiniteGradientIsNamedFromTheRanges) {
  // Each dp rank scans the summed part of its range; together they name the tensor.
  const std::string cmd = "PPTRAIN_FAULTS=nan_grad:h.2.mlp.fc.weight:2 " + mpirun(2) + pptrain_bin() + " train " +
                          dir_->file("model.yaml") + " parallel.dp=2 parallel.microbatches=4 parallel.zero=1";
  const auto r = run_command(cmd, 60);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step 2: loss"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("first non-finite gradient: h.2.mlp.fc.weight;"), std::string::npos) << r.output;
}

TEST_F(ZeroTraining, CheckpointsMoveBetweenZeroAndFullMoments) {
  // Saved under zero: 1 (each dp rank writes its ranges of /model and /optim), resumed
  // under zero: 0 on pp 2 and under zero: 1 on dp 2 x tp 2; and saved under zero: 0 on
  // pp 2, resumed under zero: 1 on dp 2. The step after the resume equals the uninterrupted
  // run's step 3 within the bounds (same stored state, other reduction orders).
  const std::string zero_dir = dir_->file("ck_zero"), full_dir = dir_->file("ck_full");
  const std::string every = " checkpoint.every=1 checkpoint.keep_last=3";
  const std::string zero_run = train(kDp2, 1, "1f1b", "checkpoint.dir=" + zero_dir + every);
  const std::string full_run = train(kPp2, 0, "1f1b", "checkpoint.dir=" + full_dir + every);
  struct Case {
    std::string from, uninterrupted;
    Layout uninterrupted_layout, layout;
    int zero;
  };
  for (const Case& c : {Case{zero_dir, zero_run, kDp2, kPp2, 0}, Case{zero_dir, zero_run, kDp2, kDp2Tp2, 1},
                        Case{full_dir, full_run, kPp2, kDp2, 1}}) {
    const std::string resumed = train(c.layout, c.zero, "1f1b", "checkpoint.resume=" + checkpoint(c.from, 2));
    const GlobalDump got = dump(resumed, c.layout, 3), want = dump(c.uninterrupted, c.uninterrupted_layout, 3);
    const Verdict v = compare_step(got, want, 3);
    // compare_gradients checks the loss of the step first (relative, the fp32 loss bound).
    EXPECT_TRUE(v.passed()) << v.failures(c.from + " resumed on " + c.layout.name + " zero " + std::to_string(c.zero));
  }
}

TEST_F(ZeroTraining, EmulatedCudaBf16CheckpointsMoveBetweenShardedAndWholeMasters) {
  // Saved under bf16 zero: 1 on dp 2 (each dp rank writes the range of masters it holds),
  // resumed under zero: 0 on dp 2 (the same arithmetic: the uninterrupted run's step 3 bit
  // for bit) and on pp 2 (other reduction orders: within the bf16 step bounds); and saved
  // under zero: 0 on pp 2, resumed under zero: 1 on dp 2 (loaded masters rounded into the
  // whole bf16 copy on every dp rank).
  const std::string zero_dir = dir_->file("ck_bf16_zero"), full_dir = dir_->file("ck_bf16_full");
  const std::string every = kBf16 + " checkpoint.every=1 checkpoint.keep_last=3";
  const std::string emu = pptrain_emu_bin();
  const std::string zero_run = train(kDp2, 1, "1f1b", every + " checkpoint.dir=" + zero_dir, "", emu);
  const std::string full_run = train(kPp2, 0, "1f1b", every + " checkpoint.dir=" + full_dir, "", emu);
  auto resume = [&](const Layout& l, int zero, const std::string& from) {
    return dump(train(l, zero, "1f1b", kBf16 + " checkpoint.resume=" + checkpoint(from, 2), "", emu), l, 3);
  };
  const Verdict exact = same_bits(resume(kDp2, 0, zero_dir), dump(zero_run, kDp2, 3));
  EXPECT_TRUE(exact.passed()) << exact.failures("bf16 zero 1 dp 2 resumed under zero 0 dp 2");
  const Verdict to_pp = compare_bf16_step(resume(kPp2, 0, zero_dir), dump(zero_run, kDp2, 3), 3, "");
  EXPECT_TRUE(to_pp.passed()) << to_pp.failures("bf16 zero 1 dp 2 resumed under zero 0 pp 2");
  const Verdict to_zero = compare_bf16_step(resume(kDp2, 1, full_dir), dump(full_run, kPp2, 3), 3, "");
  EXPECT_TRUE(to_zero.passed()) << to_zero.failures("bf16 zero 0 pp 2 resumed under zero 1 dp 2");
}

TEST_F(ZeroTraining, EmulatedCudaBf16PostValidationRollsBackShardedMasters) {
  // Post-validation restores the range's masters and re-rounds their copies. Clipped steps
  // (grad_clip below every step's norm) roll back and redo the update: AdamW rewrites the
  // range's copies and the all-gather the rest. A NaN gradient at step 2 under skip drops
  // the update: the restored copies of the other ranges come from an all-gather of their
  // own. Both equal the synchronous zero: 1 run bit for bit (step 2's NaN gradients, the
  // same on both sides, compared by values and loss only).
  struct Case {
    std::string extra, env;
  };
  for (const Case& c : {Case{kBf16 + " training.grad_clip=0.3", ""},
                        Case{kBf16 + " training.on_nonfinite=skip", "PPTRAIN_FAULTS=nan_grad:h.1.mlp.fc.weight:2"}}) {
    const std::string sync = train(kDp2, 1, "1f1b", c.extra, c.env, pptrain_emu_bin());
    const std::string validated =
        train(kDp2, 1, "1f1b", c.extra + " training.post_validation=true", c.env, pptrain_emu_bin());
    for (int k = 1; k <= kSteps; ++k) {
      const bool nan_step = !c.env.empty() && k == 2;
      const GlobalDump got = dump(validated, kDp2, k), want = dump(sync, kDp2, k);
      const Verdict v = nan_step ? compare_exact(got, want) : same_bits(got, want);
      EXPECT_TRUE(v.passed()) << v.failures(c.extra + " " + c.env + ": post-validation step " + std::to_string(k));
    }
  }
}

TEST_F(ZeroTraining, EmulatedCudaBf16PlantedStaleCopiesAreCaught) {
  // zero_keep_stale under bf16: each rank keeps its old bf16 copies outside its range, so
  // step 2 computes with half the weights a step old. The masters (each rank's range) are
  // right, so step 1's dump passes; step 2's loss and gradients must not.
  const std::string full = train(kDp2, 0, "1f1b", kBf16, "", pptrain_emu_bin());
  const std::string bad = train(kDp2, 1, "1f1b", kBf16, "PPTRAIN_FAULTS=zero_keep_stale", pptrain_emu_bin());
  EXPECT_TRUE(same_bits(dump(bad, kDp2, 1), dump(full, kDp2, 1)).passed());
  const Verdict v = compare_bf16_step(dump(bad, kDp2, 2), dump(full, kDp2, 2), 2, "");
  EXPECT_FALSE(v.passed()) << "zero_keep_stale under bf16 was not caught: " << v.summary();
  EXPECT_GE(v.worst().ratio(), kClearMargin) << v.summary();
  std::cout << "planted zero_keep_stale (bf16): " << v.summary() << "\n";
}
