// ZeRO-1 (parallel.zero: 1): training under it (the arenas, buckets, ranges and sharded
// state themselves: test_zero_layout).
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

#include <iostream>
#include <regex>
#include <string>
#include <vector>

#include "core/config.h"
#include "job/memory_estimate.h"
#include "partition/partition.h"
#include "model/param.h"
#include "support/dump_compare.h"
#include "support/markov_model.h"
#include "support/test_util.h"

using namespace pptrain;
using namespace pptrain::testing;

namespace {

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
    // 4 blocks so pp 2 with 2 stages per rank has blocks.
    MarkovModel m;
    m.training = "steps: 3, warmup_steps: 0, grad_clip: 0.0, weight_decay: 0.1";
    auto r = write_markov_model(*dir_, m);
    ASSERT_EQ(r.exit_code, 0) << r.output;
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
  // masters arena) and as --dry-run predicts them: under zero: 1 the shard's shard_size
  // elements, exactly half the arena of zero: 0 (each bucket is padded to dp equal parts,
  // each tensor to kFlatAlign elements: both are counted, and printed below against the
  // unpadded parameter count). On dp 2 (one bucket) and pp 2 x dp 2 under ZB-V (pp rank 0:
  // stage 0's bucket, stage 3's, the tied embedding's), where the Job's buckets and the
  // estimate's (rank_flat_layout) must agree. d_model 64 so that the MiB printed with three
  // decimals resolve the figures to 0.1%.
  struct Case {
    Layout layout;
    const char* schedule;
    std::vector<int> rank0_stages;
  };
  for (const Case& c : {Case{kDp2, "1f1b", {0}}, Case{kPp2Dp2, "zbv", {0, 3}}}) {
    const std::string bigger = kBf16 + " model.d_model=64 training.steps=1 parallel.dp=2 parallel.pp=" +
                               std::to_string(c.layout.pp) + " parallel.schedule=" + c.schedule +
                               " parallel.stages_per_rank=" + std::to_string(c.rank0_stages.size() > 1 ? 2 : 1);
    const Config cfg = load_config(dir_->file("model.yaml"), split_words(bigger));
    std::vector<StageSpec> stages;
    for (const StageSpec& spec : stage_specs(cfg))
      if (std::count(c.rank0_stages.begin(), c.rank0_stages.end(), spec.index)) stages.push_back(spec);
    const FlatLayout arena = rank_flat_layout(cfg, stages, 0);
    EXPECT_EQ(arena.buckets.size(), c.rank0_stages.size() + (c.layout.pp > 1 ? 1 : 0)) << c.schedule;
    const double params = rank_parameter_count(cfg, stages, 0), mib = double(1 << 20);
    double measured[2], predicted[2];
    for (int zero : {0, 1}) {
      const std::string args = " train " + dir_->file("model.yaml") + " " + bigger +
                               " parallel.microbatches=4 parallel.zero=" + std::to_string(zero);
      const auto run = run_command(mpirun(2 * c.layout.pp) + pptrain_emu_bin() + args, 120);
      ASSERT_EQ(run.exit_code, 0) << run.output;
      const auto dry = run_command(pptrain_emu_bin() + args + " --dry-run", 60);
      ASSERT_EQ(dry.exit_code, 0) << dry.output;
      measured[zero] = masters_mib(run.output);
      predicted[zero] = masters_mib(dry.output);
      EXPECT_NEAR(predicted[zero], measured[zero], 0.001) << "--dry-run against the log, zero " << zero;
    }
    EXPECT_NEAR(measured[0], 4 * double(arena.total()) / mib, 0.0005) << c.schedule;
    EXPECT_NEAR(measured[1], 4 * double(arena.shard_size) / mib, 0.0005) << c.schedule;
    EXPECT_NEAR(measured[1], measured[0] / 2, 0.001) << c.schedule << ": the masters did not halve";
    std::cout << c.layout.name << " " << c.schedule << ": fp32 masters of pp rank 0: zero 0 " << measured[0]
              << " MiB, zero 1 " << measured[1] << " MiB; " << params << " parameters, " << arena.buckets.size()
              << " buckets, arena " << arena.total() << " elements (padding " << double(arena.total()) - params << ")\n";
  }
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

TEST_F(ZeroTraining, AStagesReduceScatterRunsWhileTheStepGoesOn) {
  // pp 2 x dp 2 under ZB-V: each rank holds two stages, whose buckets are reduce-scattered
  // separately. The trace (logging.trace) shows, on track 1 of every rank, each stage's
  // reduce-scatter started after that stage's last W, and on track 0 compute actions of the
  // same step starting after it began: the collective ran beside them. (That its sums are
  // those of the whole step: SameBitsAsFullMomentsUnderEveryLayout, bit for bit.)
  const std::string trace = dir_->file("overlap_trace.json");
  train(kPp2Dp2, 1, "zbv", "training.steps=1 logging.trace=" + trace);
  const std::string json = read_file(trace);
  const std::regex event("\\{\"name\": \"([^\"]*)\", \"cat\": \"[a-z]*\", \"ph\": \"X\", \"pid\": ([0-9]+), "
                         "\"tid\": ([0-9]+), \"ts\": ([0-9.e+-]+), \"dur\": ([0-9.e+-]+)");
  struct Slice {
    std::string name;
    int pid, tid;
    double ts, dur;
  };
  std::vector<Slice> slices;
  for (auto it = std::sregex_iterator(json.begin(), json.end(), event); it != std::sregex_iterator(); ++it)
    slices.push_back({(*it)[1], std::stoi((*it)[2]), std::stoi((*it)[3]), std::stod((*it)[4]), std::stod((*it)[5])});
  ASSERT_FALSE(slices.empty()) << json.substr(0, 400);
  for (int pid = 0; pid < 4; ++pid) {
    int early = 0, overlapped = 0, shared = 0;
    for (const Slice& rs : slices) {
      if (rs.pid != pid || rs.name.rfind("reduce-scatter ", 0) != 0) continue;
      EXPECT_EQ(rs.tid, 1) << rs.name;
      if (rs.name.find("shared") != std::string::npos) ++shared;
      if (rs.name.find("(started after its last W)") == std::string::npos) continue;
      ++early;
      for (const Slice& c : slices)
        if (c.pid == pid && c.tid == 0 && std::regex_match(c.name, std::regex("[0-9]+[FIWB][0-9]+")) && c.ts > rs.ts &&
            c.ts < rs.ts + rs.dur)
          ++overlapped;
    }
    EXPECT_EQ(early, 2) << "rank " << pid << ": both stages' reduce-scatters start after their last W";
    EXPECT_EQ(shared, pid % 2 == 0 ? 1 : 0) << "rank " << pid << ": the tied embedding's bucket (pp rank 0 only)";
    EXPECT_GT(overlapped, 0) << "rank " << pid << ": no action of the step ran while a reduce-scatter was in flight";
    std::cout << "rank " << pid << ": " << overlapped << " actions ran beside the early reduce-scatters\n";
  }
}

TEST_F(ZeroTraining, UndumpedRunsWaitForEachStagesWeights) {
  // Without --dump nothing between steps waits for the all-gathers (a dump or a save does):
  // the next step's pipeline waits for each stage's bucket before its first F. Losses and
  // gradient norms of every step equal zero: 0's (bound 0, as above; printed to 1e-6), on
  // dp 2 and on pp 2 x dp 2 under ZB-V with and without post-validation.
  struct Case {
    Layout layout;
    const char* schedule;
    const char* extra;
  };
  auto steps = [](const std::string& metrics) {
    std::vector<std::string> out;
    const std::regex line("\"loss\": ([^,]*), \"lr\": [^,]*, \"grad_norm\": ([^,]*),");
    for (auto it = std::sregex_iterator(metrics.begin(), metrics.end(), line); it != std::sregex_iterator(); ++it)
      out.push_back((*it)[1].str() + " " + (*it)[2].str());
    return out;
  };
  for (const Case& c : {Case{kDp2, "1f1b", ""}, Case{kPp2Dp2, "zbv", ""},
                        Case{kPp2Dp2, "zbv", "training.post_validation=true"}}) {
    std::vector<std::string> got[2];
    for (int zero : {0, 1}) {
      const std::string metrics = dir_->file("undumped" + std::to_string(runs_++) + ".jsonl");
      const std::string cmd = mpirun(c.layout.pp * c.layout.dp) + pptrain_bin() + " train " + dir_->file("model.yaml") +
                              " training.steps=5 parallel.schedule=" + c.schedule + " parallel.pp=" +
                              std::to_string(c.layout.pp) + " parallel.dp=" + std::to_string(c.layout.dp) +
                              " parallel.microbatches=4 parallel.stages_per_rank=" +
                              (std::string(c.schedule) == "zbv" ? "2" : "1") + " parallel.zero=" + std::to_string(zero) +
                              " logging.metrics=" + metrics + " " + c.extra;
      const auto r = run_command(cmd, 120);
      ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
      got[zero] = steps(read_file(metrics));
    }
    ASSERT_EQ(got[0].size(), 5u) << c.schedule << " " << c.extra;
    EXPECT_EQ(got[1], got[0]) << c.schedule << " on " << c.layout.name << " " << c.extra
                              << ": zero 1 (losses, norms) against zero 0";
  }
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
