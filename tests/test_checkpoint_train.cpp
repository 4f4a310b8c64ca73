// Checkpoints through real training runs (tests/mpi/checkpoint_train: Trainer +
// CheckpointManager, under mpirun with a timeout):
//   - bit-exact resume: 2k steps uninterrupted equal k steps, save, exit, resume, k more
//     (every loss and every final parameter bitwise), single process and pp=2 x tp=2 zbv;
//   - resharding: a checkpoint written under pp=2 x tp=2 loads under pp=1 tp=1, pp=4 and
//     tp=2 x dp=2 with parameters bitwise as stored and the next loss within the derived
//     fp32 forward bound;
//   - crash safety: a save killed mid-write or before the rename leaves the previous
//     checkpoint and `latest` intact, and the next run resumes from it;
//   - bad files: one clear message on every rank and a non-zero exit;
//   - rollback under pp=2: resuming from an older checkpoint with another lr moves the
//     abandoned run's later checkpoints aside, and `latest`, keep_last and resume: auto
//     follow the new run;
//   (failed saves: test_checkpoint_save_failures.cpp);
//   - planted faults (core/faults.h): a resume that loses an optimizer moment, or loads a
//     tensor wrongly, is rejected by the same comparisons.
// Resume is compared bit for bit, and that is exact by construction: the resumed run
// executes the same operations on the same bits as the uninterrupted one (same binary,
// layout, one thread per rank, data), the checkpoint restores the fp32 masters and AdamW
// moments bitwise, and nothing depends on time or memory addresses. A file's datasets and
// a load's shards are compared bitwise too: a save and a load copy bits. The resharded runs
// change the layout, so their next loss differs by rounding: the fp32 forward chain bound
// (support/tolerances.h).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <regex>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checksum.h"
#include "checkpoint/hdf5_io.h"
#include "support/checkpoint_train_run.h"
#include "support/checkpoint_util.h"
#include "support/dump_compare.h"
#include "support/test_util.h"
#include "train/param_dump.h"

using namespace pptrain;
using namespace pptrain::testing;
namespace fs = std::filesystem;

namespace {

class CheckpointTrain : public CheckpointTrainSuite {
 protected:
  // The merged parameter dumps DIR/<what>.rankR.bin of `ranks` ranks.
  static GlobalDump dumps(const std::string& dir, const char* what, int ranks) {
    std::vector<std::string> paths;
    for (int r = 0; r < ranks; ++r) paths.push_back(cat_path(dir, what, r));
    return read_param_dumps(paths);
  }
  static std::string cat_path(const std::string& dir, const char* what, int rank) {
    return dir + "/" + what + ".rank" + std::to_string(rank) + ".bin";
  }

  static void expect_bitwise_equal(const GlobalDump& got, const GlobalDump& want, const std::string& what) {
    const Verdict v = compare_exact(got, want);
    EXPECT_TRUE(v.passed()) << v.failures(what);
  }

  // k = 3 of 2k = 6 steps: uninterrupted, then stop after 3 (saved at 3) and resume (with
  // `resume_env` before the resumed run: planted faults). Every loss as printed (%.17g) and
  // every final value, compared exactly.
  static Verdict bit_exact_resume(int ranks, const std::string& layout, const std::string& tag,
                                  const std::string& resume_env = "") {
    Verdict v;
    TrainRun whole = train(ranks, layout + " --dump-final " + dir_->file(tag + "_whole"));
    EXPECT_EQ(whole.result.exit_code, 0) << whole.result.output;
    EXPECT_EQ(whole.losses.size(), 6u) << whole.result.output;

    const std::string ck = " checkpoint.dir=" + dir_->file(tag + "_ck") + " checkpoint.every=3";
    TrainRun first = train(ranks, layout + ck + " --stop-after 3");
    EXPECT_EQ(first.result.exit_code, 0) << first.result.output;
    EXPECT_EQ(first.resumed_from, 0);
    EXPECT_EQ(read_file(dir_->file(tag + "_ck/latest")), "step_00000003.h5\n");
    TrainRun second = train(ranks, layout + ck + " --dump-final " + dir_->file(tag + "_resumed"), resume_env);
    EXPECT_EQ(second.result.exit_code, 0) << second.result.output;
    EXPECT_EQ(second.resumed_from, 3) << second.result.output;
    EXPECT_EQ(second.losses.size(), 3u);
    if (::testing::Test::HasFailure()) return v;

    for (int s = 1; s <= 6; ++s) {
      const auto& run = s <= 3 ? first : second;
      // %.17g round-trips a double: equal text is equal bits.
      double diff = INFINITY;
      if (run.losses.count(s) && whole.losses.count(s))
        diff = run.losses.at(s) == whole.losses.at(s)
                   ? 0.0
                   : std::max(std::fabs(std::stod(run.losses.at(s)) - std::stod(whole.losses.at(s))), 1e-300);
      v.checks.push_back({"loss of step " + std::to_string(s), diff, 0.0});
    }
    v.add(compare_exact(dumps(dir_->file(tag + "_resumed"), "final", ranks),
                        dumps(dir_->file(tag + "_whole"), "final", ranks)));
    return v;
  }
  static void check_bit_exact_resume(int ranks, const std::string& layout) {
    const std::string tag = "bitexact" + std::to_string(ranks);
    const Verdict v = bit_exact_resume(ranks, layout, tag);
    EXPECT_TRUE(v.passed()) << v.failures(tag);
  }

  // The run written under pp=2 x tp=2 at step 2, which goes on to step 3: the file the
  // resharding tests load, and that run's loss of step 3.
  struct Original {
    std::string file, loss3;
  };
  static const Original& reshard_original() {
    static Original original;
    if (original.file.empty()) {
      const std::string ck = dir_->file("reshard_ck");
      TrainRun run = train(4, "parallel.pp=2 parallel.tp=2 checkpoint.every=2 checkpoint.dir=" + ck + " --stop-after 3");
      EXPECT_EQ(run.result.exit_code, 0) << run.result.output;
      EXPECT_TRUE(run.losses.count(3)) << run.result.output;
      original = {ck + "/step_00000002.h5", run.losses[3]};
    }
    return original;
  }
  struct ReshardLayout {
    const char* name;
    int ranks;
    const char* args;
  };
  // Loads the original's step-2 checkpoint under `l` and takes step 3. Every rank's loaded
  // shard, DP replicas included, must be bitwise the stored tensor (a load copies bits);
  // the loss of step 3 is the original's up to rounding, computed from the same parameters
  // in another order: within the fp32 forward chain bound.
  static Verdict resharded(const ReshardLayout& l, const std::string& env = "") {
    const Original& original = reshard_original();
    const std::string dump = dir_->file(std::string("reshard_") + l.name);
    TrainRun run = train(l.ranks, std::string(l.args) + " checkpoint.resume=" + original.file +
                                      " --stop-after 3 --dump-loaded " + dump, env);
    Verdict v;
    EXPECT_EQ(run.result.exit_code, 0) << l.name << "\n" << run.result.output;
    EXPECT_EQ(run.resumed_from, 2) << l.name;
    if (!run.losses.count(3)) {
      ADD_FAILURE() << l.name << ": no step 3\n" << run.result.output;
      return v;
    }
    const Config cfg = load_config(dir_->file("model.yaml"), split_words(l.args));
    const double got = std::stod(run.losses.at(3)), want = std::stod(original.loss3);
    v.checks.push_back({"loss of step 3", std::fabs(got - want), fp32_step_bounds(cfg).loss * std::fabs(want)});

    GlobalDump loaded = dumps(dump, "loaded", l.ranks);
    EXPECT_EQ(loaded.tensors.size(), 2u + 4u * 12u + 2u) << l.name;  // wte, wpe, 12 per block, ln_f
    GlobalDump stored = loaded;
    for (auto& [name, t] : stored.tensors) t.value = read_h5_floats(original.file, "/model/" + name);
    v.add(compare_exact(loaded, stored));
    return v;
  }
};

const char* kPp2Tp2Zbv = "parallel.pp=2 parallel.tp=2 parallel.schedule=zbv parallel.stages_per_rank=2";

}  // namespace

TEST_F(CheckpointTrain, BitExactResumeSingleProcess) { check_bit_exact_resume(1, ""); }

TEST_F(CheckpointTrain, BitExactResumePp2Tp2Zbv) { check_bit_exact_resume(4, kPp2Tp2Zbv); }

TEST_F(CheckpointTrain, BitExactResumeWithStagesOfNoBlock) {
  // V placement: rank 0 holds the embedding alone (stage 0) and the head alone (stage 3).
  check_bit_exact_resume(2, "parallel.pp=2 parallel.schedule=zbv parallel.stages_per_rank=2"
                            " parallel.layers_per_stage=[0,2,2,0]");
}

TEST_F(CheckpointTrain, PlantedLostMomentIsRejected) {
  // The resumed run loses one AdamW moment of one tensor on one rank (zeroed after the
  // load): the exact comparison of the resumed run must reject it.
  for (const char* moment : {"m", "v"}) {
    const std::string fault = std::string("resume_zero@1:optim/") + moment + "/h.3.mlp.fc.weight";
    const Verdict v = bit_exact_resume(4, kPp2Tp2Zbv, std::string("planted_") + moment, "PPTRAIN_FAULTS=" + fault);
    EXPECT_FALSE(v.passed()) << fault << " was not caught";
    std::cout << "planted " << fault << " (pp2 tp2 zbv): " << v.summary() << "\n";
  }
}

TEST_F(CheckpointTrain, ReshardingLoadsUnderOtherLayouts) {
  std::vector<hsize_t> shape;
  read_h5_floats(reshard_original().file, "/model/wte.weight", &shape);
  EXPECT_EQ(shape, (std::vector<hsize_t>{19, 16})) << "the vocabulary padding of tp=2 is not stored";
  for (const ReshardLayout& l : {ReshardLayout{"pp1tp1", 1, ""}, ReshardLayout{"pp4", 4, "parallel.pp=4"},
                                 ReshardLayout{"tp2dp2", 4, "parallel.tp=2 parallel.dp=2 parallel.microbatches=2"},
                                 ReshardLayout{"pp2_head_alone", 2, "parallel.pp=2 parallel.layers_per_stage=[4,0]"}}) {
    const Verdict v = resharded(l);
    EXPECT_TRUE(v.passed()) << v.failures(l.name);
    std::cout << "resharded to " << l.name << ": " << v.summary() << "\n";
  }
}

TEST_F(CheckpointTrain, PlantedWrongLoadIsRejected) {
  // A load that loses one tensor (zeroed after reading) under another layout: the bitwise
  // check of the loaded shards and the loss of the next step must both reject it.
  const ReshardLayout pp4{"pp4_planted", 4, "parallel.pp=4"};
  const Verdict v = resharded(pp4, "PPTRAIN_FAULTS=resume_zero:model/h.1.mlp.fc.weight");
  EXPECT_FALSE(v.passed());
  Verdict loss;
  for (const Check& c : v.checks)
    if (c.what == "loss of step 3") loss.checks.push_back(c);
  ASSERT_EQ(loss.checks.size(), 1u);
  EXPECT_GE(loss.worst().ratio(), 3.0) << loss.summary();
  std::cout << "planted resume_zero:model/h.1.mlp.fc.weight (resharded to pp4): " << v.summary() << "; "
            << loss.summary() << "\n";
}

TEST_F(CheckpointTrain, FileWrittenUnderTp2Dp2HoldsTheTrainedModel) {
  // DP replica 1 holds copies of everything and writes nothing; tp-replicated tensors
  // are written by tp rank 0 only. The file must still hold every tensor exactly.
  const std::string ck = dir_->file("tp2dp2_ck");
  TrainRun run = train(4, "parallel.tp=2 parallel.dp=2 parallel.microbatches=2 training.steps=2 checkpoint.dir=" + ck +
                              " --dump-final " + ck + "_dump");
  ASSERT_EQ(run.result.exit_code, 0) << run.result.output;
  GlobalDump trained = dumps(ck + "_dump", "final", 4);
  EXPECT_EQ(trained.max_replica_diff, 0.0);
  for (const auto& [name, t] : trained.tensors)
    EXPECT_EQ(read_h5_floats(ck + "/step_00000002.h5", "/model/" + name), t.value) << name;
}

TEST_F(CheckpointTrain, KilledSaveLeavesPreviousCheckpointAndResumes) {
  struct Case { const char* name; int ranks; const char* layout; const char* point; };
  for (const Case& c : {Case{"single_mid_write", 1, "", "model_written"},
                        Case{"pp2_before_rename", 2, "parallel.pp=2", "before_rename"}}) {
    const std::string ck = dir_->file(std::string("crash_") + c.name);
    const std::string args = std::string(c.layout) + " checkpoint.every=2 checkpoint.dir=" + ck;
    TrainRun crashed = train(c.ranks, args, std::string("PPTRAIN_FAULTS=checkpoint_crash@0:") + c.point + ":4");
    EXPECT_NE(crashed.result.exit_code, 0) << c.name << "\n" << crashed.result.output;
    EXPECT_NE(crashed.result.output.find(std::string("injected crash at '") + c.point + "' of step 4"),
              std::string::npos) << crashed.result.output;
    EXPECT_TRUE(fs::exists(ck + "/step_00000004.h5.tmp")) << c.name;
    EXPECT_FALSE(fs::exists(ck + "/step_00000004.h5")) << c.name;
    EXPECT_EQ(read_file(ck + "/latest"), "step_00000002.h5\n") << c.name;

    TrainRun resumed = train(c.ranks, args + " --dump-final " + ck + "_resumed");
    ASSERT_EQ(resumed.result.exit_code, 0) << c.name << "\n" << resumed.result.output;
    EXPECT_EQ(resumed.resumed_from, 2) << c.name;
    EXPECT_FALSE(fs::exists(ck + "/step_00000004.h5.tmp")) << c.name << ": the leftover is removed by the next save";
    EXPECT_EQ(read_file(ck + "/latest"), "step_00000006.h5\n") << c.name;
    TrainRun whole = train(c.ranks, std::string(c.layout) + " --dump-final " + ck + "_whole");
    ASSERT_EQ(whole.result.exit_code, 0) << whole.result.output;
    for (int s = 3; s <= 6; ++s) EXPECT_EQ(resumed.losses[s], whole.losses[s]) << c.name << " step " << s;
    expect_bitwise_equal(dumps(ck + "_resumed", "final", c.ranks), dumps(ck + "_whole", "final", c.ranks), c.name);
  }
}

TEST_F(CheckpointTrain, LlamaResumesBitExactReshardsAndRefusesAGpt2File) {
  // Grouped-query q, k, v stacked in one tensor split by sections over tp, an untied head.
  const std::string llama = "model.arch=llama model.n_kv_head=2 model.ffn_hidden=24";
  const Verdict v = bit_exact_resume(4, std::string(kPp2Tp2Zbv) + " " + llama, "llama");
  EXPECT_TRUE(v.passed()) << v.failures("llama pp2 tp2 zbv");

  // Written under tp=2 x dp=2: the file holds the trained model, each tensor in its global shape.
  const std::string ck = dir_->file("llama_tp2dp2_ck");
  TrainRun run = train(4, llama + " parallel.tp=2 parallel.dp=2 parallel.microbatches=2 training.steps=2"
                              " checkpoint.dir=" + ck + " --dump-final " + ck + "_dump");
  ASSERT_EQ(run.result.exit_code, 0) << run.result.output;
  const GlobalDump trained = dumps(ck + "_dump", "final", 4);
  EXPECT_EQ(trained.tensors.size(), 3u + 4u * 7u);  // wte, ln_f, lm_head, 7 per block
  for (const auto& [name, t] : trained.tensors)
    EXPECT_EQ(read_h5_floats(ck + "/step_00000002.h5", "/model/" + name), t.value) << name;
  std::vector<hsize_t> shape;
  read_h5_floats(ck + "/step_00000002.h5", "/model/h.0.attn.qkv.weight", &shape);
  EXPECT_EQ(shape, (std::vector<hsize_t>{32, 16}));  // (4 + 2·2) heads of 4

  // Loaded by one process (another layout): the step-3 loss of the tp=2 x dp=2 run.
  TrainRun whole = train(4, llama + " parallel.tp=2 parallel.dp=2 parallel.microbatches=2 training.steps=3");
  TrainRun single = train(1, llama + " parallel.microbatches=4 training.steps=3 checkpoint.resume=" + ck +
                                 "/step_00000002.h5");
  ASSERT_EQ(single.result.exit_code, 0) << single.result.output;
  ASSERT_TRUE(single.losses.count(3) && whole.losses.count(3)) << single.result.output << whole.result.output;
  const Config cfg = load_config(dir_->file("model.yaml"), split_words(llama));
  EXPECT_NEAR(std::stod(single.losses.at(3)), std::stod(whole.losses.at(3)),
              fp32_step_bounds(cfg).loss * std::fabs(std::stod(whole.losses.at(3))));

  // A GPT-2 file does not load into a Llama model (nor the other way), on every rank.
  TrainRun gpt2 = train(1, "training.steps=1 checkpoint.dir=" + dir_->file("gpt2_for_llama_ck"));
  ASSERT_EQ(gpt2.result.exit_code, 0) << gpt2.result.output;
  const std::string file = dir_->file("gpt2_for_llama_ck/step_00000001.h5");
  TrainRun refused = train(2, "parallel.pp=2 " + llama + " checkpoint.resume=" + file);
  EXPECT_NE(refused.result.exit_code, 0) << refused.result.output;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string line = "[rank " + std::to_string(rank) + "] error: checkpoint " + file +
                             ": model.arch is gpt2 in the file but llama in " + dir_->file("model.yaml");
    EXPECT_EQ(count_occurrences(refused.result.output, line), 1) << line << "\n" << refused.result.output;
  }
}

TEST_F(CheckpointTrain, BadFilesFailOnEveryRankWithOneClearMessage) {
  const std::string ck = dir_->file("bad_ck");
  TrainRun good = train(1, "training.steps=2 checkpoint.dir=" + ck);
  ASSERT_EQ(good.result.exit_code, 0) << good.result.output;
  const std::string file = ck + "/step_00000002.h5";
  const std::string bytes = read_file(file);

  write_file(dir_->file("bad_text.h5"), "not hdf5\n");
  write_file(dir_->file("bad_cut.h5"), bytes.substr(0, bytes.size() / 3));
  write_file(dir_->file("bad_missing.h5"), bytes);
  edit_h5(dir_->file("bad_missing.h5"), [](hid_t f) { H5Ldelete(f, "/optim/m/h.3.mlp.fc.bias", H5P_DEFAULT); });
  write_file(dir_->file("bad_shape.h5"), bytes);
  edit_h5(dir_->file("bad_shape.h5"), [](hid_t f) { replace_dataset(f, "/model/wpe.weight", H5T_IEEE_F32LE, {9, 16}); });

  struct Case { std::string path, extra, message; };
  const std::vector<Case> cases = {
      {dir_->file("bad_nofile.h5"), "", ": no such file"},
      {dir_->file("bad_text.h5"), "", ": not an HDF5 file"},
      {dir_->file("bad_cut.h5"), "", ": cannot open the HDF5 file, it is truncated or damaged"},
      {dir_->file("bad_missing.h5"), "", ": dataset /optim/m/h.3.mlp.fc.bias is missing (the model expects shape [64])"},
      {dir_->file("bad_shape.h5"), "",
       ": dataset /model/wpe.weight has shape [9, 16] in the file but the model expects [8, 16]"},
      {file, "model.n_layer=2", ": model.n_layer is 4 in the file but 2 in " + dir_->file("model.yaml")}};
  for (const Case& c : cases) {
    TrainRun run = train(2, "parallel.pp=2 " + c.extra + " checkpoint.resume=" + c.path);
    EXPECT_NE(run.result.exit_code, 0) << c.path << "\n" << run.result.output;
    EXPECT_EQ(run.result.exit_code == 124, false) << c.path << ": hung";
    for (int rank = 0; rank < 2; ++rank) {
      const std::string line = "[rank " + std::to_string(rank) + "] error: checkpoint " + c.path + c.message;
      EXPECT_EQ(count_occurrences(run.result.output, line), 1) << line << "\n" << run.result.output;
    }
    EXPECT_EQ(run.losses.size(), 0u) << c.path << ": trained despite a bad checkpoint";
  }
}

TEST_F(CheckpointTrain, DamageInOneTpShardFailsEveryRank) {
  // Under tp=2 each rank reads only its rows of h.1.attn.qkv.weight [48, 16]; element
  // (40, 3) is in tp rank 1's part of the v section. The group's summed checksum must
  // still see it, and every rank must report it. Then the same element made NaN with a
  // checksum that matches (as a writer without the finiteness check would store it):
  // rank 1 finds it, every rank reports it.
  const std::string ck = dir_->file("tp_damage_ck");
  TrainRun good = train(1, "training.steps=2 checkpoint.dir=" + ck);
  ASSERT_EQ(good.result.exit_code, 0) << good.result.output;
  const std::string file = ck + "/step_00000002.h5";
  struct Case { std::string name; float value; bool fix_checksum; std::string message; };
  const std::vector<Case> cases = {
      {"tp_flip.h5", 0.25f, false, ": dataset /model/h.1.attn.qkv.weight does not match its checksum (the file is damaged, or the dataset was written under another name)"},
      {"tp_nan.h5", NAN, true,
       ": dataset /model/h.1.attn.qkv.weight holds a non-finite value (nan at element 643 in row-major order)"}};
  for (const Case& c : cases) {
    const std::string path = dir_->file(c.name);
    fs::copy_file(file, path, fs::copy_options::overwrite_existing);
    edit_h5(path, [&](hid_t f) {
      hid_t d = H5Dopen2(f, "/model/h.1.attn.qkv.weight", H5P_DEFAULT);
      std::vector<float> v(48 * 16);
      H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
      v[40 * 16 + 3] = c.value;
      H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
      if (c.fix_checksum)
        h5::write_attribute(d, "checksum",
                            digest_range(v.data(), int64_t(v.size()), 0).sum +
                                dataset_binding("/model/h.1.attn.qkv.weight", {48, 16}),
                            "test");
      H5Dclose(d);
    });
    TrainRun run = train(2, "parallel.tp=2 checkpoint.resume=" + path, "", 60);
    EXPECT_NE(run.result.exit_code, 0) << run.result.output;
    EXPECT_NE(run.result.exit_code, 124) << "hung\n" << run.result.output;
    for (int rank = 0; rank < 2; ++rank) {
      const std::string line = "[rank " + std::to_string(rank) + "] error: checkpoint " + path + c.message;
      EXPECT_EQ(count_occurrences(run.result.output, line), 1) << line << "\n" << run.result.output;
    }
    EXPECT_EQ(run.losses.size(), 0u) << c.name << ": trained from a damaged checkpoint";
  }
}

TEST_F(CheckpointTrain, RollbackUnderPp2FollowsTheNewRun) {
  const std::string ck = dir_->file("rollback_ck"), step2 = dir_->file("rollback_step2.h5");
  const std::string args = "parallel.pp=2 checkpoint.every=2 checkpoint.keep_last=2 checkpoint.dir=" + ck;
  // Run A to step 6 (its step 2 copied aside first: keep_last 2 prunes it), then run B
  // from A's step 2 with half the learning rate, to step 6.
  ASSERT_EQ(train(2, args + " --stop-after 2").result.exit_code, 0);
  fs::copy_file(ck + "/step_00000002.h5", step2);
  ASSERT_EQ(train(2, args).result.exit_code, 0);
  TrainRun b = train(2, args + " training.lr=5.0e-3 checkpoint.resume=" + step2);
  ASSERT_EQ(b.result.exit_code, 0) << b.result.output;
  EXPECT_EQ(b.resumed_from, 2);
  EXPECT_NE(b.result.output.find("the later checkpoints step_00000004.h5, step_00000006.h5 belong to an abandoned "
                                 "run: moved into " + ck + "/abandoned (nothing deleted)"),
            std::string::npos)
      << b.result.output;
  EXPECT_EQ(read_file(ck + "/latest"), "step_00000006.h5\n");
  IoGroup io = IoGroup::single();
  auto lr_of = [&](const std::string& file) {
    return parse_config(read_checkpoint_meta(file, io).config_yaml, file).training.lr;
  };
  EXPECT_EQ(lr_of(ck + "/step_00000004.h5"), 5.0e-3) << "run B's checkpoint was deleted or replaced";
  EXPECT_EQ(lr_of(ck + "/step_00000006.h5"), 5.0e-3);
  EXPECT_EQ(lr_of(ck + "/abandoned/step_00000004.h5"), 1.0e-2) << "run A's checkpoints must stay on disk";
  EXPECT_EQ(lr_of(ck + "/abandoned/step_00000006.h5"), 1.0e-2);
  // resume: auto continues run B (its lineage, extended by the new run).
  TrainRun c = train(2, args + " training.lr=5.0e-3 training.steps=8");
  ASSERT_EQ(c.result.exit_code, 0) << c.result.output;
  EXPECT_EQ(c.resumed_from, 6);
  const std::string b_line = read_checkpoint_meta(ck + "/step_00000006.h5", io).lineage;
  const std::string c_line = read_checkpoint_meta(ck + "/step_00000008.h5", io).lineage;
  EXPECT_EQ(c_line.rfind(b_line + "/", 0), 0u) << c_line << " does not continue " << b_line;
}
