// Checkpoints in one process: the file format (read back with the plain HDF5 API, with
// h5dump and with `pptrain inspect`), bitwise round trips of parameters and AdamW
// moments, every kind of bad file, the manager's keep_last / latest / resume policy, and
// the llm.c import: test_llmc_import. Multi-rank layouts and resume through training:
// test_checkpoint_train. Every comparison here is bitwise, and exact by construction: a
// checkpoint stores the fp32 tensors as float32 datasets and a load copies them back, so
// no arithmetic happens between what was written and what is read.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "backend/ops.h"
#include "checkpoint/checkpoint_manager.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checkpoint_writer.h"
#include "model/stage.h"
#include "support/checkpoint_model.h"
#include "support/checkpoint_util.h"
#include "support/test_util.h"
#include "train/adamw.h"

using namespace pptrain;
using namespace pptrain::testing;
namespace fs = std::filesystem;

namespace {

// Loads `path` into a fresh tiny model through the manager (checkpoint.resume=PATH).
std::string resume_error(const std::string& path, const ModelConfig& m = tiny_model()) {
  Config cfg = tiny_config("");
  cfg.model = m;
  cfg.checkpoint.resume = path;
  Model model(m, 1);
  CheckpointManager manager(cfg, single_process());
  return error_of([&] { manager.resume(*model.params, *model.optimizer); });
}

class CheckpointFile : public ::testing::Test {
 protected:
  void SetUp() override {
    model_.randomise(3);
    CheckpointManager manager(tiny_config(dir_.file("ck")), single_process());
    path_ = manager.save(*model_.params, *model_.optimizer, 7);
  }
  TempDir dir_;
  Model model_{tiny_model(), 42};
  std::string path_;
};

}  // namespace

// ZeRO-1 ranges cut a tensor anywhere (a partial row, whole rows, a partial row): chunks
// sized to the largest rectangle would not tile the dataset (two 254-row chunks for 256
// rows), so such a dataset is contiguous; rectangles on a grid keep their chunks.
TEST(CheckpointTable, RectanglesOffTheChunkGridAreStoredContiguously) {
  IoGroup io = IoGroup::single();
  auto table_of = [&](std::vector<Slab> slabs) {
    ShardedTensor t{"wte.weight", {256, 8}, 256, 8, std::move(slabs)};
    return build_global_table({t}, io).at(0);
  };
  // A range's pieces: rows 0..253 whole, row 254's first 3 columns, the rest.
  TableEntry zero_range = table_of({{0, 0, 0, 0, 254, 8}, {254, 0, 254, 0, 1, 3}, {254, 3, 254, 3, 1, 5},
                                    {255, 0, 255, 0, 1, 8}});
  EXPECT_EQ(zero_range.chunk, (std::vector<int64_t>{256, 8}));
  // Two equal halves of the rows (a tp split): one chunk each.
  TableEntry halves = table_of({{0, 0, 0, 0, 128, 8}, {128, 0, 128, 0, 128, 8}});
  EXPECT_EQ(halves.chunk, (std::vector<int64_t>{128, 8}));
}

TEST(CheckpointTable, OneProcessWritesEverythingOneTransferPerSlab) {
  Model model(tiny_model(), 1);
  IoGroup io = IoGroup::single();
  std::vector<TableEntry> table = build_global_table(sharded_tensors(*model.params), io);
  ASSERT_EQ(table.size(), 2u + 2u * 12u + 2u);
  for (const TableEntry& e : table) {
    EXPECT_TRUE(e.writes) << e.name;
    EXPECT_GE(e.local, 0) << e.name;
    // One shard: one chunk (stored contiguously), except the fused QKV tensor, whose
    // three sections (q, k, v) are three slabs and three chunks.
    const bool qkv = e.name.find("attn.qkv") != std::string::npos;
    std::vector<int64_t> chunk = e.shape;
    if (qkv) chunk[0] /= 3;
    EXPECT_EQ(e.chunk, chunk) << e.name;
    EXPECT_EQ(e.transfers, qkv ? 3 : 1) << e.name;
  }
  EXPECT_TRUE(std::is_sorted(table.begin(), table.end(),
                             [](const TableEntry& a, const TableEntry& b) { return a.name < b.name; }));
}

TEST(CheckpointTable, SlabsLandAtTheirGlobalPlaceWhateverTheLocalOrder) {
  // A local [2, 4] buffer holding two global [2, 2] blocks side by side, swapped: local
  // columns 0-1 are global columns 2-3 and local 2-3 are global 0-1.
  TempDir dir;
  std::vector<ShardedTensor> tensors = {{"x", {2, 4}, 2, 4, {Slab{0, 2, 0, 0, 2, 2}, Slab{0, 0, 0, 2, 2, 2}}}};
  const std::vector<float> local = {0, 1, 2, 3, 4, 5, 6, 7};
  CheckpointMeta meta;
  meta.has_optimizer_state = false;
  meta.config_yaml = to_yaml(tiny_config(""));
  IoGroup io = IoGroup::single();
  write_checkpoint_file(dir.file("x.h5"), tensors, [&](Section, int, float* host) {
    std::copy(local.begin(), local.end(), host);
  }, meta, io);
  EXPECT_EQ(read_h5_floats(dir.file("x.h5"), "/model/x"), (std::vector<float>{2, 3, 0, 1, 6, 7, 4, 5}));
}

TEST_F(CheckpointFile, DatasetsHoldTheGlobalTensorsAndMoments) {
  for (auto& [name, p] : model_.params->all()) {
    std::vector<hsize_t> shape;
    EXPECT_EQ(read_h5_floats(path_, "/model/" + name, &shape), p->value.to_host()) << name;
    EXPECT_EQ(std::vector<int64_t>(shape.begin(), shape.end()), p->spec.global_shape) << name;
    EXPECT_EQ(read_h5_floats(path_, "/optim/m/" + name), model_.optimizer->m(name).to_host()) << name;
    EXPECT_EQ(read_h5_floats(path_, "/optim/v/" + name), model_.optimizer->v(name).to_host()) << name;
  }
  EXPECT_EQ(fs::path(path_).filename(), "step_00000007.h5");
}

TEST_F(CheckpointFile, ResumeRestoresParametersAndMomentsBitwise) {
  Config cfg = tiny_config(dir_.file("ck"));
  Model fresh(tiny_model(), 99);
  // As if a bf16 model's copies were current (AdamW or a refresh cleared the flags): the
  // load writes the masters, so it must mark every copy stale for the next refresh.
  for (auto& [name, p] : fresh.params->all()) p->bf16_stale = false;
  CheckpointManager manager(cfg, single_process());
  EXPECT_EQ(manager.resume_path(), path_);
  EXPECT_EQ(manager.resume(*fresh.params, *fresh.optimizer), 7);
  for (auto& [name, p] : model_.params->all()) {
    EXPECT_TRUE(fresh.params->find(name)->bf16_stale) << name << ": loaded masters, bf16 copy not marked stale";
    EXPECT_EQ(fresh.params->find(name)->value.to_host(), p->value.to_host()) << name;
    EXPECT_EQ(fresh.optimizer->m(name).to_host(), model_.optimizer->m(name).to_host()) << name;
    EXPECT_EQ(fresh.optimizer->v(name).to_host(), model_.optimizer->v(name).to_host()) << name;
  }
  IoGroup io = IoGroup::single();
  CheckpointMeta meta = read_checkpoint_meta(path_, io);
  EXPECT_EQ(meta.step, 7);
  EXPECT_EQ(meta.data_next_batch, 7);
  EXPECT_EQ(meta.tokens_seen, 7LL * cfg.global_batch_sequences() * cfg.model.seq_len);
  EXPECT_EQ(meta.rng_seed, cfg.training.seed);
  EXPECT_EQ(meta.layout_pp * meta.layout_tp * meta.layout_dp, 1);
  EXPECT_TRUE(meta.has_optimizer_state);
  EXPECT_EQ(parse_config(meta.config_yaml, "stored").model.d_model, 8);
}

TEST_F(CheckpointFile, OpensWithH5dump) {
  CommandResult r = run_command("h5dump -A " + path_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\"pptrain-checkpoint\""), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("DATASET \"wte.weight\""), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("SIMPLE { ( 11, 8 ) / ( 11, 8 ) }"), std::string::npos) << r.output;
  r = run_command("h5dump -d /model/ln_f.weight " + path_);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(CheckpointFile, InspectPrintsAttributesConfigAndNorms) {
  CommandResult r = run_command(pptrain_bin() + " inspect " + path_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* part : {"format               pptrain-checkpoint", "step                 7",
                           "layout_pp_tp_dp      [1, 1, 1]", "model: gpt2, 2 layers, 2 heads, d_model 8",
                           "  training:", "/optim/v/h.1.mlp.proj.weight", "[8, 32]"})
    EXPECT_NE(r.output.find(part), std::string::npos) << part << "\n" << r.output;
  auto wte = model_.params->find("wte.weight")->value.to_host();
  double sq = 0;
  for (float x : wte) sq += double(x) * x;
  char norm[32];
  std::snprintf(norm, sizeof norm, "%.6e", std::sqrt(sq));
  const size_t row = r.output.find("/model/wte.weight ");
  ASSERT_NE(row, std::string::npos) << r.output;
  EXPECT_NE(r.output.substr(row, r.output.find('\n', row) - row).find(norm), std::string::npos) << norm << "\n"
                                                                                                << r.output;
}

TEST_F(CheckpointFile, InspectFollowsTheLatestPointerOfADirectory) {
  for (const std::string& arg : {dir_.file("ck"), dir_.file("ck") + "/latest"}) {
    CommandResult r = run_command(pptrain_bin() + " inspect " + arg);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("file: " + path_), std::string::npos) << arg << "\n" << r.output;
  }
  CommandResult r = run_command(pptrain_bin() + " inspect " + dir_.path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("no latest checkpoint recorded there"), std::string::npos) << r.output;
}

TEST_F(CheckpointFile, MissingFileIsAClearError) {
  EXPECT_EQ(resume_error(dir_.file("nope.h5")), "checkpoint " + dir_.file("nope.h5") + ": no such file");
}

TEST_F(CheckpointFile, NonHdf5FileIsAClearError) {
  write_file(dir_.file("text.h5"), "model: not a checkpoint\n");
  EXPECT_NE(resume_error(dir_.file("text.h5")).find("text.h5: not an HDF5 file"), std::string::npos);
}

TEST_F(CheckpointFile, TruncatedFileIsAClearError) {
  std::string bytes = read_file(path_);
  for (size_t keep : {bytes.size() / 2, bytes.size() - 1}) {
    write_file(dir_.file("cut.h5"), bytes.substr(0, keep));
    std::string e = resume_error(dir_.file("cut.h5"));
    EXPECT_NE(e.find("cut.h5: cannot open the HDF5 file, it is truncated or damaged"), std::string::npos) << e;
    EXPECT_NE(e.find("truncated file: eof = " + std::to_string(keep)), std::string::npos) << e;
  }
}

TEST_F(CheckpointFile, HdfFileThatIsNoCheckpointIsAClearError) {
  hid_t f = H5Fcreate(dir_.file("other.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  H5Fclose(f);
  EXPECT_NE(resume_error(dir_.file("other.h5")).find("an HDF5 file but not a pptrain checkpoint"), std::string::npos);
  // `inspect` lists it as it is and fails (it exited 0, as for a checkpoint).
  CommandResult r = run_command(pptrain_bin() + " inspect " + dir_.file("other.h5"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("error: " + dir_.file("other.h5") + ": an HDF5 file but not a pptrain checkpoint"),
            std::string::npos) << r.output;
}

TEST_F(CheckpointFile, MissingDatasetIsNamed) {
  edit_h5(path_, [](hid_t f) { H5Ldelete(f, "/optim/v/h.0.ln_1.bias", H5P_DEFAULT); });
  EXPECT_EQ(resume_error(path_),
            "checkpoint " + path_ + ": dataset /optim/v/h.0.ln_1.bias is missing (the model expects shape [8])");
}

TEST_F(CheckpointFile, ShapeMismatchNamesDatasetAndBothShapes) {
  edit_h5(path_, [](hid_t f) { replace_dataset(f, "/model/h.1.attn.qkv.weight", H5T_IEEE_F32LE, {12, 8}); });
  EXPECT_EQ(resume_error(path_), "checkpoint " + path_ +
                                     ": dataset /model/h.1.attn.qkv.weight has shape [12, 8] in the file but the "
                                     "model expects [24, 8]");
}

TEST_F(CheckpointFile, WrongTypeIsNamed) {
  edit_h5(path_, [](hid_t f) { replace_dataset(f, "/model/wpe.weight", H5T_IEEE_F64LE, {5, 8}); });
  EXPECT_EQ(resume_error(path_), "checkpoint " + path_ + ": dataset /model/wpe.weight is float64, expected float32");
}

TEST_F(CheckpointFile, DatasetTheModelLacksIsNamed) {
  edit_h5(path_, [](hid_t f) { replace_dataset(f, "/model/h.2.ln_1.weight", H5T_IEEE_F32LE, {8}); });
  EXPECT_EQ(resume_error(path_),
            "checkpoint " + path_ + ": dataset /model/h.2.ln_1.weight in the file is not part of the model");
}

TEST_F(CheckpointFile, ModelConfigThatDisagreesIsNamed) {
  ModelConfig other = tiny_model();
  other.n_head = 4;
  EXPECT_EQ(resume_error(path_, other), "checkpoint " + path_ +
                                            ": model.n_head is 2 in the file but 4 in tiny.yaml (a checkpoint loads "
                                            "only into the model that wrote it)");
}

TEST(CheckpointManagerPolicy, KeepsLastCompleteCheckpointsAndUpdatesLatest) {
  TempDir dir;
  Config cfg = tiny_config(dir.file("ck"));
  cfg.checkpoint.every = 2;
  cfg.checkpoint.keep_last = 2;
  Model model(tiny_model(), 1);
  CheckpointManager manager(cfg, single_process());
  fs::create_directories(dir.file("ck"));
  write_file(dir.file("ck/step_00000001.h5.tmp"), "left over by an interrupted save");
  for (int step = 1; step <= 7; ++step) manager.after_step(*model.params, *model.optimizer, step, step == 7);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.file("ck"))) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "step_00000006.h5", "step_00000007.h5"}));
  EXPECT_EQ(read_file(dir.file("ck/latest")), "step_00000007.h5\n");
  EXPECT_EQ(manager.resume_path(), dir.file("ck/step_00000007.h5"));
}

TEST(CheckpointManagerPolicy, ResumeModes) {
  TempDir dir;
  Model model(tiny_model(), 1);
  Config cfg = tiny_config(dir.file("ck"));
  {
    CheckpointManager fresh(cfg, single_process());  // auto, nothing saved yet
    EXPECT_EQ(fresh.resume(*model.params, *model.optimizer), 0);
    fresh.save(*model.params, *model.optimizer, 3);
  }
  cfg.checkpoint.resume = "none";
  EXPECT_EQ(CheckpointManager(cfg, single_process()).resume_path(), "");
  cfg.checkpoint.resume = dir.file("ck");  // a directory: its latest
  EXPECT_EQ(CheckpointManager(cfg, single_process()).resume_path(), dir.file("ck/step_00000003.h5"));
  cfg.checkpoint.resume = "auto";
  fs::remove(dir.file("ck/latest"));  // lost pointer: the newest complete checkpoint
  EXPECT_EQ(CheckpointManager(cfg, single_process()).resume_path(), dir.file("ck/step_00000003.h5"));
  write_file(dir.file("ck/latest"), "step_00000009.h5\n");
  CheckpointManager dangling(cfg, single_process());
  EXPECT_EQ(error_of([&] { dangling.resume_path(); }),
            "checkpoint: " + dir.file("ck/latest") + " names step_00000009.h5, which does not exist");
  cfg.checkpoint.resume = dir.file("empty");
  fs::create_directories(dir.file("empty"));
  CheckpointManager empty(cfg, single_process());
  EXPECT_EQ(error_of([&] { empty.resume_path(); }),
            "checkpoint.resume: directory " + dir.file("empty") + " holds no checkpoint");
}
