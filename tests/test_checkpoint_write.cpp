// A checkpoint directory through failed saves and rollbacks, in one process: a non-finite
// value is never written; a failed save (a planted ENOSPC, or a real full tmpfs where
// mounting is permitted) removes its .tmp and keeps the previous checkpoint and `latest`;
// stray file names are ignored with a warning; the lineage rule; and resuming from an
// older checkpoint keeps the new run's checkpoints and moves the abandoned run's aside.
// Loaded values are compared bitwise (a load copies the stored bits).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_manager.h"
#include "checkpoint/lineage.h"
#include "core/faults.h"
#include "support/checkpoint_model.h"
#include "support/checkpoint_util.h"
#include "support/test_util.h"

using namespace pptrain;
using namespace pptrain::testing;
namespace fs = std::filesystem;

TEST(CheckpointWrite, NonFiniteValueIsNeverWrittenAndTheGoodCheckpointStays) {
  TempDir dir;
  Config cfg = tiny_config(dir.file("ck"));
  cfg.checkpoint.keep_last = 1;
  Model model(tiny_model(), 1);
  CheckpointManager manager(cfg, single_process());
  manager.save(*model.params, *model.optimizer, 2);
  std::vector<float> v = model.params->find("h.0.attn.proj.weight")->value.to_host();
  v[9] = NAN;  // row 1, column 1 of [8, 8]
  model.params->find("h.0.attn.proj.weight")->value.upload(v.data());
  const std::string step4 = dir.file("ck/step_00000004.h5");
  EXPECT_EQ(error_of([&] { manager.save(*model.params, *model.optimizer, 4); }),
            "checkpoint " + step4 + ".tmp: dataset /model/h.0.attn.proj.weight holds a non-finite value (nan at [1, "
            "1]); refusing to write a checkpoint that cannot be trained from");
  EXPECT_FALSE(fs::exists(step4 + ".tmp"));
  EXPECT_FALSE(fs::exists(step4));
  EXPECT_EQ(read_file(dir.file("ck/latest")), "step_00000002.h5\n") << "keep_last 1 must not prune the good one";
  EXPECT_TRUE(fs::exists(dir.file("ck/step_00000002.h5")));
}

TEST(CheckpointWrite, PlantedWriteFailureRemovesTheTmpAndKeepsThePreviousCheckpoint) {
  TempDir dir;
  Config cfg = tiny_config(dir.file("ck"));
  Model model(tiny_model(), 1);
  model.randomise(5);
  const std::vector<float> saved = model.all_values();
  CheckpointManager(cfg, single_process()).save(*model.params, *model.optimizer, 2);
  CheckpointManager failing(cfg, single_process(), Faults::parse("checkpoint_write_fail:optim/m/h.1.mlp.fc.weight"));
  model.randomise(6);
  const std::string step4 = dir.file("ck/step_00000004.h5");
  EXPECT_EQ(error_of([&] { failing.save(*model.params, *model.optimizer, 4); }),
            "checkpoint " + step4 + ".tmp: dataset /optim/m/h.1.mlp.fc.weight: write failed: No space left on device "
            "(planted fault checkpoint_write_fail)");
  EXPECT_FALSE(fs::exists(step4 + ".tmp"));
  EXPECT_FALSE(fs::exists(step4));
  EXPECT_EQ(read_file(dir.file("ck/latest")), "step_00000002.h5\n");
  Config resume = cfg;
  Model fresh(tiny_model(), 9);
  EXPECT_EQ(CheckpointManager(resume, single_process()).resume(*fresh.params, *fresh.optimizer), 2);
  EXPECT_TRUE(same_bits(fresh.all_values(), saved));
}

TEST(CheckpointWrite, FullTmpfsFailsCleanlyAndKeepsThePreviousCheckpoint) {
  TempDir dir;
  // Values of about 5 MB, so that the space a save reserves (the values plus a bound on
  // HDF5's metadata, about 100 KB here) is close to the file's size.
  ModelConfig mc = tiny_model();
  mc.d_model = 128;
  mc.vocab_size = 512;
  mc.seq_len = 16;
  Model model(mc, 1);
  model.randomise(5);
  const std::vector<float> saved = model.all_values();
  // One checkpoint's size, then a file system with room for it and half another.
  Config probe_cfg = tiny_config(dir.file("probe"));
  probe_cfg.model = mc;
  const std::string probe = CheckpointManager(probe_cfg, single_process()).save(*model.params, *model.optimizer, 1);
  const uint64_t one = fs::file_size(probe);
  SmallTmpfs tmpfs(dir.file("fs"), (one * 3 / 2 + 4095) / 4096 * 4096);
  if (!tmpfs.mounted()) GTEST_SKIP() << tmpfs.error;
  Config cfg = tiny_config(dir.file("fs/ck"));
  cfg.model = mc;
  CheckpointManager manager(cfg, single_process());
  manager.save(*model.params, *model.optimizer, 2);
  const std::string step4 = dir.file("fs/ck/step_00000004.h5");
  const std::string error = error_of([&] { manager.save(*model.params, *model.optimizer, 4); });
  EXPECT_EQ(error.rfind("checkpoint " + step4 + ".tmp: ", 0), 0u) << error;
  EXPECT_NE(error.find("No space left on device"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  std::cout << "full tmpfs: " << error << "\n";
  EXPECT_FALSE(fs::exists(step4 + ".tmp"));
  EXPECT_EQ(read_file(dir.file("fs/ck/latest")), "step_00000002.h5\n");
  Model fresh(mc, 9);
  EXPECT_EQ(CheckpointManager(cfg, single_process()).resume(*fresh.params, *fresh.optimizer), 2);
  EXPECT_TRUE(same_bits(fresh.all_values(), saved));
  // The space of the removed .tmp is free again: the same save now fails the same way,
  // not worse (no leftover fills the disk).
  EXPECT_EQ(error_of([&] { manager.save(*model.params, *model.optimizer, 4); }), error);
}

TEST(CheckpointDirectory, StrayNamesAreIgnoredWithAWarning) {
  TempDir dir;
  Config cfg = tiny_config(dir.file("ck"));
  Model model(tiny_model(), 1);
  const std::string good = CheckpointManager(cfg, single_process()).save(*model.params, *model.optimizer, 3);
  fs::remove(dir.file("ck/latest"));  // so that resume lists the directory
  for (const char* stray : {"step_99999999999999999999.h5", "step_abc.h5", "step_.h5", "step_-5.h5"})
    write_file(dir.file(std::string("ck/") + stray), "stray");
  ::testing::internal::CaptureStderr();
  std::string path, error = error_of([&] { path = CheckpointManager(cfg, single_process()).resume_path(); });
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(error, "(no error)");
  EXPECT_EQ(path, good);
  for (const char* stray : {"step_99999999999999999999.h5", "step_abc.h5", "step_.h5", "step_-5.h5"})
    EXPECT_EQ(count_occurrences(warnings, "checkpoint: ignoring " + dir.file(std::string("ck/") + stray) +
                                              ": not a checkpoint name step_<step>.h5 with a step of at most 2147483647"),
              1)
        << warnings;
}

TEST(CheckpointLineage, LineageRule) {
  EXPECT_TRUE(in_lineage("a:0", 6, "a:0"));               // the run's own checkpoints
  EXPECT_TRUE(in_lineage("a:0", 2, "a:0/b:2"));           // the ancestor up to the branch point
  EXPECT_FALSE(in_lineage("a:0", 4, "a:0/b:2"));          // the ancestor after it: abandoned
  EXPECT_FALSE(in_lineage("a:0/c:2", 4, "a:0/b:2"));      // a sibling branch
  EXPECT_FALSE(in_lineage("x:0", 1, "a:0/b:2"));          // another line
  EXPECT_TRUE(in_lineage("a:0/b:2", 4, "a:0/b:2/c:4"));
  EXPECT_FALSE(in_lineage("garbage", 1, "a:0"));
  // Dropped oldest entries: a run beyond the kept window still matches on what is kept.
  EXPECT_EQ(extend_lineage("a:0/b:2", "c", 4, 2), "b:2/c:4");
  EXPECT_TRUE(in_lineage("a:0/b:2", 3, "b:2/c:4"));
}

TEST(CheckpointLineage, RollbackKeepsTheNewRunAndMovesTheAbandonedOneAside) {
  TempDir dir;
  const std::string ck = dir.file("ck");
  Config a = tiny_config(ck);
  a.checkpoint.every = 2;
  a.checkpoint.keep_last = 2;
  a.training.steps = 6;
  // Run A: steps 1..6 (values changed every step, as training would), saves at 2, 4, 6;
  // its step-2 checkpoint is copied aside to roll back to (keep_last 2 prunes it).
  Model ma(tiny_model(), 1);
  std::vector<float> a6;
  {
    CheckpointManager run(a, single_process());
    ASSERT_EQ(run.resume(*ma.params, *ma.optimizer), 0);
    for (int s = 1; s <= 6; ++s) {
      ma.randomise(100 + s);
      run.after_step(*ma.params, *ma.optimizer, s, s == 6);
      if (s == 2) fs::copy_file(ck + "/step_00000002.h5", dir.file("a_step2.h5"));
    }
    a6 = ma.all_values();
  }
  // Run B: resumes from A's step 2 with another learning rate and trains to step 6.
  Config b = a;
  b.training.lr = a.training.lr / 2;
  b.checkpoint.resume = dir.file("a_step2.h5");
  Model mb(tiny_model(), 2);
  std::vector<float> b6;
  {
    CheckpointManager run(b, single_process());
    ::testing::internal::CaptureStderr();
    ASSERT_EQ(run.resume(*mb.params, *mb.optimizer), 2);
    const std::string warning = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(warning.find("the later checkpoints step_00000004.h5, step_00000006.h5 belong to an abandoned run: "
                           "moved into " + ck + "/abandoned (nothing deleted)"),
              std::string::npos)
        << warning;
    for (int s = 3; s <= 6; ++s) {
      mb.randomise(200 + s);
      run.after_step(*mb.params, *mb.optimizer, s, s == 6);
    }
    b6 = mb.all_values();
  }
  std::vector<std::string> names, aside;
  for (const auto& e : fs::directory_iterator(ck)) names.push_back(e.path().filename().string());
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(ck + "/abandoned", ec)) aside.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  std::sort(aside.begin(), aside.end());
  // .lock: the run's hold on the folder (checkpoint/dir_lock.h).
  EXPECT_EQ(names, (std::vector<std::string>{".lock", "abandoned", "latest", "step_00000004.h5", "step_00000006.h5"}));
  EXPECT_EQ(aside, (std::vector<std::string>{"step_00000004.h5", "step_00000006.h5"}));
  EXPECT_EQ(read_file(ck + "/latest"), "step_00000006.h5\n");
  std::vector<float> got;
  CheckpointMeta meta;
  ASSERT_EQ(load_values(ck + "/step_00000006.h5", mb, got, meta), "");
  EXPECT_TRUE(same_bits(got, b6)) << "the directory's step 6 is not run B's";
  EXPECT_EQ(parse_config(meta.config_yaml, "stored").training.lr, b.training.lr);
  ASSERT_EQ(load_values(ck + "/abandoned/step_00000006.h5", ma, got, meta), "");
  EXPECT_TRUE(same_bits(got, a6)) << "run A's step 6 was not kept aside";

  // resume: auto continues run B, and its pruning leaves run A's files alone.
  Config c = b;
  c.checkpoint.resume = "auto";
  c.training.steps = 8;
  Model mc(tiny_model(), 3);
  CheckpointManager run(c, single_process());
  ASSERT_EQ(run.resume(*mc.params, *mc.optimizer), 6);
  EXPECT_TRUE(same_bits(mc.all_values(), b6));
  for (int s = 7; s <= 8; ++s) run.after_step(*mc.params, *mc.optimizer, s, s == 8);
  names.clear();
  for (const auto& e : fs::directory_iterator(ck)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{".lock", "abandoned", "latest", "step_00000006.h5", "step_00000008.h5"}));
  EXPECT_TRUE(fs::exists(ck + "/abandoned/step_00000004.h5"));
  EXPECT_TRUE(fs::exists(ck + "/abandoned/step_00000006.h5"));
}
