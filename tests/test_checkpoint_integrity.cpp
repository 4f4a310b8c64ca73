// What a checkpoint file's contents are worth, in one process: damaged files never load
// different parameters (checksums, full type checks, bounded attribute reads), non-finite
// values are neither written nor loaded, a failed save (a planted ENOSPC, or a real full
// tmpfs where mounting is permitted) removes its .tmp and keeps the previous checkpoint
// and `latest`, stray file names are ignored with a warning, and a rollback keeps the new
// run's checkpoints and moves the abandoned ones aside. The same under mpirun:
// test_checkpoint_train. Every comparison of loaded values is bitwise, exact by
// construction: a load copies the stored bits.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>

#include "checkpoint/checkpoint_manager.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checksum.h"
#include "checkpoint/hdf5_io.h"
#include "checkpoint/lineage.h"
#include "support/checkpoint_model.h"
#include "support/checkpoint_util.h"
#include "support/test_util.h"

using namespace pptrain;
using namespace pptrain::testing;
namespace fs = std::filesystem;

namespace {

// Every value of a model and its moments, in a fixed order.
std::vector<float> all_values(Model& model) {
  std::vector<float> out;
  for (auto& [name, p] : model.params->all())
    for (Buffer<float>* b : {&p->value, &model.optimizer->m(name), &model.optimizer->v(name)}) {
      const std::vector<float> v = b->to_host();
      out.insert(out.end(), v.begin(), v.end());
    }
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Loads `path` into host vectors with the reader the manager uses (no optimizer or
// device code runs: the corruption test forks it). Returns "" and fills `values` (the
// order of all_values) and `meta`, or the error.
std::string load(const std::string& path, Model& layout, std::vector<float>& values, CheckpointMeta& meta) {
  const std::vector<ShardedTensor> tensors = sharded_tensors(*layout.params);
  std::vector<std::vector<float>> by_section[3];
  for (auto& v : by_section) v.resize(tensors.size());
  IoGroup io = IoGroup::single();
  try {
    meta = read_checkpoint_file(path, tensors, [&](Section s, int i, const float* host) {
      by_section[int(s)][i].assign(host, host + tensors[i].local_numel());
    }, tiny_config(""), true, io);
  } catch (const Error& e) {
    return e.what();
  }
  values.clear();
  for (size_t i = 0; i < tensors.size(); ++i)
    for (auto& section : by_section) values.insert(values.end(), section[i].begin(), section[i].end());
  return "";
}

CheckpointMeta meta_of(const std::string& path) {
  IoGroup io = IoGroup::single();
  return read_checkpoint_meta(path, io);
}

// The root attributes a load returns, compared field by field.
bool same_meta(const CheckpointMeta& a, const CheckpointMeta& b) { return meta_text(a) == meta_text(b); }

class Integrity : public ::testing::Test {
 protected:
  void SetUp() override {
    model_.randomise(3);
    CheckpointManager manager(tiny_config(dir_.file("ck")), single_process());
    path_ = manager.save(*model_.params, *model_.optimizer, 7);
  }
  std::string resume_error(const std::string& path) {
    Config cfg = tiny_config("");
    cfg.checkpoint.resume = path;
    Model fresh(tiny_model(), 1);
    CheckpointManager manager(cfg, single_process());
    return error_of([&] { manager.resume(*fresh.params, *fresh.optimizer); });
  }
  TempDir dir_;
  Model model_{tiny_model(), 42};
  std::string path_;
};

// How one damaged file fared: loaded the original exactly, failed with one pptrain line,
// or something that must never happen (different values, a crash, several lines).
enum class Outcome { Identical, Error, Wrong };

// Loads `path` in a forked child (a crash inside HDF5 must fail the test, not end it) and
// classifies the result. `detail` gets the error line or what went wrong.
Outcome load_in_child(const std::string& path, Model& layout, const std::vector<float>& want,
                      const CheckpointMeta& want_meta, std::string& detail) {
  int fds[2];
  if (pipe(fds) != 0) return detail = "pipe failed", Outcome::Wrong;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    std::vector<float> got;
    CheckpointMeta meta;
    const std::string error = load(path, layout, got, meta);
    const std::string verdict = !error.empty()                                   ? "E" + error
                                : same_bits(got, want) && same_meta(meta, want_meta) ? std::string("I")
                                                                                   : std::string("W");
    (void)!write(fds[1], verdict.data(), verdict.size());
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string verdict;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) verdict.append(buf, size_t(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return detail = cat("the load ended by signal ", WIFSIGNALED(status) ? WTERMSIG(status) : -1), Outcome::Wrong;
  if (verdict == "I") return Outcome::Identical;
  if (verdict == "W") return detail = "loaded different values or attributes", Outcome::Wrong;
  detail = verdict.substr(1);
  const bool one_line = detail.find('\n') == std::string::npos && detail.rfind("checkpoint " + path, 0) == 0;
  return one_line ? Outcome::Error : Outcome::Wrong;
}

}  // namespace

TEST_F(Integrity, RandomByteCorruptionsLoadIdenticallyOrFailWithOneLine) {
  // 200 damaged copies, each with 1 to 4 bytes set to other random values at random
  // places (fixed seed). Each must load bit-identical values and attributes or fail with
  // one line naming the file; never different values, never a crash.
  const std::string original = read_file(path_);
  std::vector<float> want;
  CheckpointMeta want_meta;
  ASSERT_EQ(load(path_, model_, want, want_meta), "");
  ASSERT_TRUE(same_bits(want, all_values(model_)));
  std::mt19937_64 gen(20261125);
  int identical = 0, errors = 0;
  const std::string damaged = dir_.file("damaged.h5");
  for (int trial = 0; trial < 200; ++trial) {
    std::string bytes = original;
    const int flips = 1 + int(gen() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t at = gen() % bytes.size();
      bytes[at] = char(uint8_t(bytes[at]) ^ uint8_t(1 + gen() % 255));  // always a different byte
    }
    write_file(damaged, bytes);
    std::string detail;
    switch (load_in_child(damaged, model_, want, want_meta, detail)) {
      case Outcome::Identical: ++identical; break;
      case Outcome::Error: ++errors; break;
      case Outcome::Wrong: ADD_FAILURE() << "trial " << trial << ": " << detail; break;
    }
  }
  std::cout << "200 damaged files: " << identical << " loaded identically (damage in unused bytes), " << errors
            << " failed with one line\n";
  // A sanity bound, not a tolerance: the file is mostly bytes a load reads (tensor data,
  // attributes, object headers); if fewer than half the trials hit them, the trials
  // would exercise little (measured with HDF5 1.10.8: 196 of 200).
  EXPECT_GT(errors, 100);
}

TEST_F(Integrity, DamagedDataIsNamedByItsChecksum) {
  // One element of /model/wpe.weight changed in place (HDF5 sees a valid file): only the
  // checksum can tell.
  edit_h5(path_, [](hid_t f) {
    hid_t d = H5Dopen2(f, "/model/wpe.weight", H5P_DEFAULT);
    std::vector<float> v(size_t(tiny_model().seq_len) * tiny_model().d_model);
    H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    v[5] = std::nextafter(v[5], 1e30f);  // one unit in the last place
    H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    H5Dclose(d);
  });
  EXPECT_EQ(resume_error(path_),
            "checkpoint " + path_ + ": dataset /model/wpe.weight does not match its checksum (the file is damaged)");
  CommandResult r = run_command(pptrain_bin() + " inspect --verify " + path_);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output, "checkpoint " + path_ + ": dataset /model/wpe.weight does not match its checksum (the file is "
                      "damaged)\n");
}

TEST_F(Integrity, DamagedRootAttributeIsNamedByTheMetaChecksum) {
  // A step of 8 instead of 7 is a valid integer: only meta_checksum can tell.
  edit_h5(path_, [](hid_t f) {
    hid_t a = H5Aopen(f, "step", H5P_DEFAULT);
    const int64_t eight = 8;
    H5Awrite(a, H5T_NATIVE_INT64, &eight);
    H5Aclose(a);
  });
  EXPECT_EQ(resume_error(path_), "checkpoint " + path_ +
                                     ": the root attributes do not match their checksum (attribute 'meta_checksum'): "
                                     "the file is damaged");
}

TEST_F(Integrity, VerifyNamesAMissingMoment) {
  edit_h5(path_, [](hid_t f) { H5Ldelete(f, "/optim/m/h.0.ln_1.bias", H5P_DEFAULT); });
  CommandResult r = run_command(pptrain_bin() + " inspect --verify " + path_);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output, "checkpoint " + path_ + ": dataset /optim/m/h.0.ln_1.bias is missing (the other groups hold "
                      "h.0.ln_1.bias)\n");
}

TEST_F(Integrity, VerifyPassesAnIntactFile) {
  CommandResult r = run_command(pptrain_bin() + " inspect --verify " + path_);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // /model, /optim/m and /optim/v of the tiny model's 28 tensors.
  EXPECT_EQ(r.output, "ok: " + path_ + ": 84 datasets verified (type, checksum, finite values)\n");
}

TEST_F(Integrity, ChecksumIsTheSameForAnyPartitionOfATensor) {
  // The hash of a [4, 6] tensor from one slab equals the sum of the hashes of any cover
  // by disjoint rectangles (here: a column split into two and a row split of one half):
  // exact, modulo 2^64 integer sums in any order.
  std::vector<float> t(24);
  for (int i = 0; i < 24; ++i) t[i] = float(i) * 0.37f - 3.0f;
  const uint64_t whole = digest_slabs(t.data(), 6, {Slab{0, 0, 0, 0, 4, 6}}, 6).sum;
  const uint64_t parts = digest_slabs(t.data(), 6, {Slab{0, 0, 0, 0, 4, 3}}, 6).sum +
                         digest_slabs(t.data(), 6, {Slab{0, 3, 0, 3, 1, 3}}, 6).sum +
                         digest_slabs(t.data(), 6, {Slab{1, 3, 1, 3, 3, 3}}, 6).sum;
  EXPECT_EQ(whole, parts);
  std::swap(t[1], t[2]);  // swapped elements are caught: the index is part of each term
  EXPECT_NE(digest_slabs(t.data(), 6, {Slab{0, 0, 0, 0, 4, 6}}, 6).sum, whole);
}

TEST_F(Integrity, FloatTypeWithAnotherLayoutIsRejected) {
  // Class float, 4 bytes, but an exponent bias of 100 instead of 127: the same bits mean
  // other numbers, so it must not be read as float32.
  edit_h5(path_, [](hid_t f) {
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_ebias(t, 100);
    replace_dataset(f, "/model/wpe.weight", t, {hsize_t(tiny_model().seq_len), hsize_t(tiny_model().d_model)});
    H5Tclose(t);
  });
  EXPECT_EQ(resume_error(path_), "checkpoint " + path_ +
                                     ": dataset /model/wpe.weight is a 32-bit float whose layout (byte order, "
                                     "precision, offset, exponent or mantissa) is not IEEE binary32, expected float32");
}

TEST_F(Integrity, VariableLengthStringWithADamagedLengthIsRefusedNotFollowed) {
  // The crash this guards against: a variable-length string attribute whose length in
  // the global heap is damaged made HDF5 read far beyond the file (SIGSEGV in inspect and
  // train). Rewrite 'config' as such a string, then set its 8-byte heap length to 2^40.
  const std::string config = meta_of(path_).config_yaml;
  edit_h5(path_, [&](hid_t f) {
    H5Adelete(f, "config");
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, "config", t, s, H5P_DEFAULT, H5P_DEFAULT);
    const char* text = config.c_str();
    H5Awrite(a, t, &text);
    H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
  });
  std::string bytes = read_file(path_);
  // A global heap object: index (2 bytes), references (2), reserved (4), size (8), data.
  const size_t at = bytes.rfind(config.substr(0, 32));
  ASSERT_NE(at, std::string::npos);
  uint64_t size = 0;
  std::memcpy(&size, bytes.data() + at - 8, 8);
  ASSERT_EQ(size, config.size()) << "not the heap object's length field";
  size = uint64_t(1) << 40;
  std::memcpy(bytes.data() + at - 8, &size, 8);
  write_file(path_, bytes);

  EXPECT_EQ(resume_error(path_), "checkpoint " + path_ +
                                     ": attribute 'config' is a variable-length string, which pptrain does not read "
                                     "(checkpoints of format version 2 and later store fixed-length strings)");
  for (const char* mode : {" inspect ", " inspect --verify "}) {
    CommandResult r = run_command(pptrain_bin() + mode + path_);
    EXPECT_LT(r.exit_code, 128) << mode << ": killed by a signal\n" << r.output;
    EXPECT_EQ(r.output.find("Segmentation"), std::string::npos) << r.output;
  }
}

TEST_F(Integrity, FormatVersion1IsAClearError) {
  edit_h5(path_, [](hid_t f) {
    int64_t one = 1;
    H5Adelete(f, "format_version");
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, "format_version", H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &one);
    H5Aclose(a);
    H5Sclose(s);
  });
  EXPECT_EQ(resume_error(path_), "checkpoint " + path_ +
                                     ": checkpoint format version 1 (written by an older pptrain) has no checksums "
                                     "and cannot be verified; this pptrain reads version 2");
}

TEST_F(Integrity, NonFiniteValueInAFileIsNamedOnLoad) {
  // A NaN stored with a checksum that matches it (as a writer without the finiteness
  // check would store it): only the finiteness check can refuse it.
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    CheckpointManager manager(tiny_config(dir_.file("nan")), single_process());
    const std::string path = manager.save(*model_.params, *model_.optimizer, 9);
    edit_h5(path, [&](hid_t f) {
      hid_t d = H5Dopen2(f, "/optim/v/h.1.mlp.fc.bias", H5P_DEFAULT);
      std::vector<float> v(size_t(4) * tiny_model().d_model);
      H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
      v[3] = bad;
      H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
      h5::write_attribute(d, "checksum", digest_range(v.data(), int64_t(v.size()), 0).sum, "test");
      H5Dclose(d);
    });
    const std::string message = cat("checkpoint ", path, ": dataset /optim/v/h.1.mlp.fc.bias holds a non-finite "
                                    "value (", bad, " at element 3 in row-major order)");
    EXPECT_EQ(resume_error(path), message);
    CommandResult r = run_command(pptrain_bin() + " inspect --verify " + path);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(r.output, message + "\n");
  }
}

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
  const std::vector<float> saved = all_values(model);
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
  EXPECT_TRUE(same_bits(all_values(fresh), saved));
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
  const std::vector<float> saved = all_values(model);
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
  EXPECT_TRUE(same_bits(all_values(fresh), saved));
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
    a6 = all_values(ma);
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
    b6 = all_values(mb);
  }
  std::vector<std::string> names, aside;
  for (const auto& e : fs::directory_iterator(ck)) names.push_back(e.path().filename().string());
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(ck + "/abandoned", ec)) aside.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  std::sort(aside.begin(), aside.end());
  EXPECT_EQ(names, (std::vector<std::string>{"abandoned", "latest", "step_00000004.h5", "step_00000006.h5"}));
  EXPECT_EQ(aside, (std::vector<std::string>{"step_00000004.h5", "step_00000006.h5"}));
  EXPECT_EQ(read_file(ck + "/latest"), "step_00000006.h5\n");
  std::vector<float> got;
  CheckpointMeta meta;
  ASSERT_EQ(load(ck + "/step_00000006.h5", mb, got, meta), "");
  EXPECT_TRUE(same_bits(got, b6)) << "the directory's step 6 is not run B's";
  EXPECT_EQ(parse_config(meta.config_yaml, "stored").training.lr, b.training.lr);
  ASSERT_EQ(load(ck + "/abandoned/step_00000006.h5", ma, got, meta), "");
  EXPECT_TRUE(same_bits(got, a6)) << "run A's step 6 was not kept aside";

  // resume: auto continues run B, and its pruning leaves run A's files alone.
  Config c = b;
  c.checkpoint.resume = "auto";
  c.training.steps = 8;
  Model mc(tiny_model(), 3);
  CheckpointManager run(c, single_process());
  ASSERT_EQ(run.resume(*mc.params, *mc.optimizer), 6);
  EXPECT_TRUE(same_bits(all_values(mc), b6));
  for (int s = 7; s <= 8; ++s) run.after_step(*mc.params, *mc.optimizer, s, s == 8);
  names.clear();
  for (const auto& e : fs::directory_iterator(ck)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"abandoned", "latest", "step_00000006.h5", "step_00000008.h5"}));
  EXPECT_TRUE(fs::exists(ck + "/abandoned/step_00000004.h5"));
  EXPECT_TRUE(fs::exists(ck + "/abandoned/step_00000006.h5"));
}
