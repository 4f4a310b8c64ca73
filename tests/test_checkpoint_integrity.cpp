// What a checkpoint file's contents are worth, in one process: damaged files never load
// different parameters (checksums, full type checks, bounded attribute reads), non-finite
// values are neither written nor loaded, a failed save (a planted ENOSPC, or a real full
// tmpfs where mounting is permitted) removes its .tmp and keeps the previous checkpoint
// and `latest` (tests/test_checkpoint_write.cpp, with the directory's stray names and
// rollbacks). The same under mpirun: test_checkpoint_train. Every comparison of loaded
// values is bitwise, exact by construction: a load copies the stored bits.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <random>

#include "checkpoint/checkpoint_manager.h"
#include "checkpoint/checkpoint_format.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checksum.h"
#include "checkpoint/hdf5_io.h"
#include "support/checkpoint_model.h"
#include "support/checkpoint_util.h"
#include "support/test_util.h"

using namespace pptrain;
using namespace pptrain::testing;
namespace fs = std::filesystem;

namespace {

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
    const std::string error = load_values(path, layout, got, meta);
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
  ASSERT_EQ(load_values(path_, model_, want, want_meta), "");
  ASSERT_TRUE(same_bits(want, model_.all_values()));
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
            "checkpoint " + path_ + ": dataset /model/wpe.weight does not match its checksum (the file is damaged, or the dataset was written under another name)");
  CommandResult r = run_command(pptrain_bin() + " inspect --verify " + path_);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output, "checkpoint " + path_ + ": dataset /model/wpe.weight does not match its checksum (the file is "
                      "damaged, or the dataset was written under another name)\n");
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
  EXPECT_EQ(r.output, "checkpoint " + path_ + ": dataset /optim/m/h.0.ln_1.bias is missing (the model expects shape "
                      "[8])\n");
}

TEST_F(Integrity, VerifyPassesAnIntactFile) {
  CommandResult r = run_command(pptrain_bin() + " inspect --verify " + path_);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // /model, /optim/m and /optim/v of the tiny model's 28 tensors.
  EXPECT_EQ(r.output, "ok: " + path_ + ": 84 datasets verified (name, shape, type, checksum, values)\n");
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
                                     "and cannot be verified; this pptrain reads version 3");
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
      h5::write_attribute(d, "checksum",
                          digest_range(v.data(), int64_t(v.size()), 0).sum +
                              dataset_binding("/optim/v/h.1.mlp.fc.bias", {int64_t(4) * tiny_model().d_model}),
                          "test");
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

// ---- a checkpoint that verifies is the checkpoint it claims to be -------------------------
// Each edit below keeps every checksum consistent with the bytes it covers, as a careless
// tool or a hostile one could: only the binding of checksums to names and shapes, the
// link checks and the validated counters can tell. A resume and `inspect --verify` give
// the same line (checkpoint_checks.h: one function each, both call it).

namespace {

// Rewrites the root attributes after `edit`, with a meta_checksum that matches them.
template <typename Edit>
void rewrite_meta(const std::string& path, Edit edit) {
  CheckpointMeta m = meta_of(path);
  edit(m);
  edit_h5(path, [&](hid_t f) { write_meta(f, m, "test"); });
}

// A dataset of `shape` holding `values`, with the checksum a writer gives it under `name`.
void put_dataset(hid_t f, const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& values) {
  if (H5Lexists(f, name.c_str(), H5P_DEFAULT) > 0) H5Ldelete(f, name.c_str(), H5P_DEFAULT);
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  hid_t s = H5Screate_simple(int(dims.size()), dims.data(), nullptr);
  hid_t d = H5Dcreate2(f, name.c_str(), H5T_IEEE_F32LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
  h5::write_attribute(d, "checksum", digest_range(values.data(), int64_t(values.size()), 0).sum +
                                         dataset_binding(name, shape), "test");
  H5Dclose(d);
  H5Sclose(s);
}

}  // namespace

class Binding : public Integrity {
 protected:
  // The resume's error and inspect --verify's first line must both be `message` (verify
  // goes on to list every problem: a swap damages two datasets).
  void expect_refused(const std::string& message) {
    EXPECT_EQ(resume_error(path_), message);
    CommandResult r = run_command(pptrain_bin() + " inspect --verify " + path_);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(r.output.substr(0, r.output.find('\n')), message) << r.output;
  }
};

TEST_F(Binding, SameShapeDatasetsSwappedWithTheirChecksumsAreRefused) {
  edit_h5(path_, [](hid_t f) {
    H5Lmove(f, "/model/h.0.ln_1.weight", f, "/model/swap", H5P_DEFAULT, H5P_DEFAULT);
    H5Lmove(f, "/model/h.1.ln_1.weight", f, "/model/h.0.ln_1.weight", H5P_DEFAULT, H5P_DEFAULT);
    H5Lmove(f, "/model/swap", f, "/model/h.1.ln_1.weight", H5P_DEFAULT, H5P_DEFAULT);
  });
  expect_refused("checkpoint " + path_ + ": dataset /model/h.0.ln_1.weight does not match its checksum (the file is "
                 "damaged, or the dataset was written under another name)");
}

TEST_F(Binding, ADatasetHardLinkedUnderAnotherNameIsRefused) {
  edit_h5(path_, [](hid_t f) {
    H5Ldelete(f, "/model/h.1.mlp.fc.bias", H5P_DEFAULT);
    H5Lcreate_hard(f, "/model/h.0.mlp.fc.bias", f, "/model/h.1.mlp.fc.bias", H5P_DEFAULT, H5P_DEFAULT);
  });
  expect_refused("checkpoint " + path_ + ": dataset /model/h.0.mlp.fc.bias is linked under 2 names, expected one (a "
                 "checkpoint stores each tensor once)");
}

TEST_F(Binding, ASoftLinkInPlaceOfADatasetIsRefused) {
  edit_h5(path_, [](hid_t f) {
    H5Ldelete(f, "/model/wpe.weight", H5P_DEFAULT);
    H5Lcreate_soft("/model/wte.weight", f, "/model/wpe.weight", H5P_DEFAULT, H5P_DEFAULT);
  });
  expect_refused("checkpoint " + path_ + ": /model/wpe.weight is a soft link, expected a dataset or group stored under "
                 "that name");
}

TEST_F(Binding, AWrongShapeWithAConsistentChecksumIsRefusedByVerifyToo) {
  // wte [V, C] = [11, 8] stored transposed, then flat, each with its own valid checksum.
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{8, 11}, std::vector<int64_t>{88}}) {
    edit_h5(path_, [&](hid_t f) { put_dataset(f, "/model/wte.weight", shape, std::vector<float>(88, 0.5f)); });
    expect_refused("checkpoint " + path_ + ": dataset /model/wte.weight has shape " + h5::shape_text(shape) +
                   " in the file but the model expects [11, 8]");
  }
}

TEST_F(Binding, ALinkAddedOutsideTheGroupsIsRefusedByTheRoot) {
  edit_h5(path_, [](hid_t f) { put_dataset(f, "/extra", {2}, {1.0f, 2.0f}); });
  expect_refused("checkpoint " + path_ + ": its groups and datasets (89 links) are not the ones it was written with "
                 "(attribute 'contents_checksum'): a dataset was added, removed, linked or renamed");
}

TEST_F(Binding, AStoredConfigThatDoesNotParseIsRefusedByVerifyToo) {
  rewrite_meta(path_, [](CheckpointMeta& m) { m.config_yaml = "model: {n_layer: -3}"; });
  const std::string resume = resume_error(path_);
  EXPECT_EQ(resume.rfind("checkpoint " + path_ + ": the stored config does not parse: ", 0), 0u) << resume;
  CommandResult r = run_command(pptrain_bin() + " inspect --verify " + path_);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output.rfind("checkpoint " + path_ + ": the stored config does not parse: ", 0), 0u) << r.output;
}

TEST_F(Binding, ImpossibleCountersAreRefused) {
  struct Case { std::function<void(CheckpointMeta&)> edit; std::string message; };
  const std::vector<Case> cases = {
      {[](CheckpointMeta& m) { m.data_next_batch = -1; },
       "attribute 'data_next_batch' is negative (-1): impossible in a checkpoint"},
      {[](CheckpointMeta& m) { m.tokens_seen = -5; }, "attribute 'tokens_seen' is negative (-5): impossible in a checkpoint"},
      {[](CheckpointMeta& m) { m.data_sequences_seen = 3; },
       "attribute 'data_sequences_seen' (3) is less than 'step' (7): impossible, every step reads at least one sequence"},
      {[](CheckpointMeta& m) { m.tokens_seen = m.data_sequences_seen - 1; },
       "is less than 'data_sequences_seen'"},
  };
  const std::string original = dir_.file("original.h5");
  fs::copy_file(path_, original);
  for (const Case& c : cases) {
    fs::copy_file(original, path_, fs::copy_options::overwrite_existing);
    rewrite_meta(path_, c.edit);
    const std::string error = resume_error(path_);
    EXPECT_NE(error.find(c.message), std::string::npos) << error;
    CommandResult r = run_command(pptrain_bin() + " inspect --verify " + path_);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(r.output, error + "\n");
  }
}

TEST_F(Binding, ANegativeSecondMomentIsRefused) {
  edit_h5(path_, [](hid_t f) {
    std::vector<float> v(8, 1e-4f);
    v[2] = -1e-6f;
    put_dataset(f, "/optim/v/h.0.ln_2.bias", {8}, v);
  });
  expect_refused("checkpoint " + path_ + ": dataset /optim/v/h.0.ln_2.bias holds a negative second moment (-1e-06 at "
                 "element 2 in row-major order): impossible for AdamW's running mean of squares");
}

TEST_F(Binding, FormatVersion2StillLoadsWithItsUnboundChecksums) {
  // A version 2 file, as the previous writer made it: no binding term, no contents_checksum.
  std::vector<float> want;
  CheckpointMeta unused;
  ASSERT_EQ(load_values(path_, model_, want, unused), "");
  CheckpointMeta m = meta_of(path_);
  edit_h5(path_, [&](hid_t f) {
    for (const char* group : {"/model", "/optim/m", "/optim/v"})
      for (const auto& [name, p] : model_.params->all()) {
        const std::string path = cat(group, "/", name);
        hid_t d = H5Dopen2(f, path.c_str(), H5P_DEFAULT);
        const uint64_t bound = h5::read_uint_attribute(d, "checksum", "test");
        h5::write_attribute(d, "checksum", bound - dataset_binding(path, p->spec.global_shape), "test");
        H5Dclose(d);
      }
    H5Adelete(f, "contents_checksum");
    m.format_version = 2;
    write_meta(f, m, "test");
  });
  std::vector<float> got;
  CheckpointMeta meta;
  EXPECT_EQ(load_values(path_, model_, got, meta), "");
  EXPECT_EQ(meta.format_version, 2);
  EXPECT_TRUE(same_bits(got, want));
  CommandResult r = run_command(pptrain_bin() + " inspect --verify " + path_);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// inspect prints an unsigned attribute (the checksums) as stored: above INT64_MAX it was
// clamped to 9223372036854775807 when read as a signed integer.
TEST(CheckpointInspect, UnsignedAttributesPrintAsStored) {
  TempDir dir;
  const std::string path = dir.file("attrs.h5");
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  const hid_t space = H5Screate(H5S_SCALAR);
  auto text_of = [&](const char* name, hid_t type, const void* value) {
    const hid_t a = H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(H5Awrite(a, type, value), 0);
    const std::string text = h5::attribute_as_text(a);
    H5Aclose(a);
    return text;
  };
  const uint64_t big = 11828510861253941135ull;
  const int64_t negative = -5;
  EXPECT_EQ(text_of("meta_checksum", H5T_NATIVE_UINT64, &big), "11828510861253941135");
  EXPECT_EQ(text_of("signed", H5T_NATIVE_INT64, &negative), "-5");
  H5Sclose(space);
  H5Fclose(file);
}
