// Checkpoints in one process: the file format (read back with the plain HDF5 API, with
// h5dump and with `pptrain inspect`), bitwise round trips of parameters and AdamW
// moments, every kind of bad file, the manager's keep_last / latest / resume policy, and
// the llm.c import (against an independent double-precision GPT-2 forward written from
// llm.c's layout). Multi-rank layouts and resume through training: test_checkpoint_train.
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
#include "checkpoint/llmc_import.h"
#include "model/stage.h"
#include "support/test_util.h"
#include "test_checkpoint_util.h"
#include "train/adamw.h"

using namespace pptrain;
using namespace pptrain::testing;
namespace fs = std::filesystem;

namespace {

ModelConfig tiny_model() {
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 2;
  m.d_model = 8;
  m.seq_len = 5;
  m.vocab_size = 11;
  return m;
}

Config tiny_config(const std::string& dir) {
  Config c;
  c.model = tiny_model();
  c.source = "tiny.yaml";
  c.checkpoint.dir = dir;
  return c;
}

// A whole model on one rank with its optimizer, values and moments randomised.
struct Model {
  std::unique_ptr<Ops> ops = make_cpu_ops();
  LocalComm tp;
  ModelDims dims;
  std::unique_ptr<ParamStore> params;
  std::unique_ptr<Stage> stage;
  std::unique_ptr<AdamW> optimizer;

  Model(const ModelConfig& m, uint64_t seed, int batch = 1) {
    dims = ModelDims::from(m, batch, 1, 0);
    params = std::make_unique<ParamStore>(*ops, 1, 0, seed);
    stage = std::make_unique<Stage>(*params, dims, StageSpec{0, 0, m.n_layer, true, true}, tp);
    optimizer = std::make_unique<AdamW>(*params, TrainingConfig{});
  }
  void randomise(uint32_t seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> noise(0.0f, 0.5f);
    for (auto& [name, p] : params->all())
      for (Buffer<float>* b : {&p->value, &optimizer->m(name), &optimizer->v(name)}) {
        std::vector<float> v(b->size());
        for (float& x : v) x = noise(gen);
        b->upload(v.data());
      }
  }
  // Mean loss of one microbatch (forward only).
  double loss(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets) {
    Buffer<int32_t> tok(*ops, tokens.size()), tgt(*ops, targets.size());
    tok.upload(tokens.data());
    tgt.upload(targets.data());
    stage->forward(0, {tok.data(), tgt.data()});
    double l = stage->loss_sum(0) / dims.rows();
    stage->discard(0);
    return l;
  }
};

ParallelContext single_process() { return ParallelContext{}; }

template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

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
  CheckpointManager manager(cfg, single_process());
  EXPECT_EQ(manager.resume_path(), path_);
  EXPECT_EQ(manager.resume(*fresh.params, *fresh.optimizer), 7);
  for (auto& [name, p] : model_.params->all()) {
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

// ---- llm.c import ------------------------------------------------------------------

namespace {

// An llm.c model file: header and the 16 tensors in llm.c order (random values).
struct LlmcFile {
  int T = 5, V = 11, Vp = 16, L = 2, NH = 2, C = 8;
  std::vector<float> wte, wpe, ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw,
      lnfb;

  explicit LlmcFile(uint32_t seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> n(0.0f, 0.3f);
    auto fill = [&](std::vector<float>& v, size_t count, float base) {
      v.resize(count);
      for (float& x : v) x = base + n(gen);
    };
    fill(wte, size_t(Vp) * C, 0), fill(wpe, size_t(T) * C, 0), fill(ln1w, L * C, 1), fill(ln1b, L * C, 0);
    fill(qkvw, size_t(L) * 3 * C * C, 0), fill(qkvb, L * 3 * C, 0), fill(projw, size_t(L) * C * C, 0);
    fill(projb, L * C, 0), fill(ln2w, L * C, 1), fill(ln2b, L * C, 0), fill(fcw, size_t(L) * 4 * C * C, 0);
    fill(fcb, L * 4 * C, 0), fill(fcprojw, size_t(L) * C * 4 * C, 0), fill(fcprojb, L * C, 0);
    fill(lnfw, C, 1), fill(lnfb, C, 0);
  }
  std::vector<const std::vector<float>*> in_order() const {
    return {&wte, &wpe, &ln1w, &ln1b, &qkvw, &qkvb, &projw, &projb, &ln2w, &ln2b, &fcw, &fcb, &fcprojw, &fcprojb,
            &lnfw, &lnfb};
  }
  void write(const std::string& path, int version = 3, int magic = 20240326) const {
    int32_t header[256] = {0};
    int32_t fields[8] = {magic, version, T, V, L, NH, C, Vp};
    std::memcpy(header, fields, sizeof fields);
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header), sizeof header);
    for (const auto* t : in_order()) {
      if (version == 3) {
        out.write(reinterpret_cast<const char*>(t->data()), t->size() * sizeof(float));
      } else {
        for (float x : *t) {  // bf16: the top half of the fp32 (truncation)
          uint32_t bits;
          std::memcpy(&bits, &x, 4);
          uint16_t top = uint16_t(bits >> 16);
          out.write(reinterpret_cast<const char*>(&top), 2);
        }
      }
    }
  }
  ModelConfig model() const {
    ModelConfig m;
    m.n_layer = L, m.n_head = NH, m.d_model = C, m.seq_len = T, m.vocab_size = V;
    return m;
  }

  // Mean cross-entropy of GPT-2 on `tokens` -> `targets` (one sequence of T), in double,
  // computed straight from the llm.c arrays (llm.c's train_gpt2.c forward pass).
  double reference_loss(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets) const {
    const int hs = C / NH;
    using Mat = std::vector<std::vector<double>>;
    auto layernorm = [&](const Mat& x, const float* w, const float* b) {
      Mat y(T, std::vector<double>(C));
      for (int t = 0; t < T; ++t) {
        double mean = 0, var = 0;
        for (int c = 0; c < C; ++c) mean += x[t][c] / C;
        for (int c = 0; c < C; ++c) var += (x[t][c] - mean) * (x[t][c] - mean) / C;
        for (int c = 0; c < C; ++c) y[t][c] = (x[t][c] - mean) / std::sqrt(var + 1e-5) * w[c] + b[c];
      }
      return y;
    };
    auto matmul = [&](const Mat& x, const float* w, const float* b, int in, int out) {  // y = x wᵀ + b
      Mat y(T, std::vector<double>(out));
      for (int t = 0; t < T; ++t)
        for (int o = 0; o < out; ++o) {
          double s = b ? b[o] : 0.0;
          for (int i = 0; i < in; ++i) s += x[t][i] * double(w[size_t(o) * in + i]);
          y[t][o] = s;
        }
      return y;
    };
    Mat x(T, std::vector<double>(C));
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) x[t][c] = double(wte[size_t(tokens[t]) * C + c]) + wpe[size_t(t) * C + c];
    for (int l = 0; l < L; ++l) {
      Mat qkv = matmul(layernorm(x, &ln1w[l * C], &ln1b[l * C]), &qkvw[size_t(l) * 3 * C * C], &qkvb[l * 3 * C], C,
                       3 * C);
      Mat att(T, std::vector<double>(C));
      for (int h = 0; h < NH; ++h)
        for (int t = 0; t < T; ++t) {
          std::vector<double> score(t + 1);
          double mx = -1e300, sum = 0;
          for (int u = 0; u <= t; ++u) {
            double s = 0;
            for (int d = 0; d < hs; ++d) s += qkv[t][h * hs + d] * qkv[u][C + h * hs + d];
            score[u] = s / std::sqrt(double(hs));
            mx = std::max(mx, score[u]);
          }
          for (int u = 0; u <= t; ++u) sum += (score[u] = std::exp(score[u] - mx));
          for (int d = 0; d < hs; ++d) {
            double o = 0;
            for (int u = 0; u <= t; ++u) o += score[u] / sum * qkv[u][2 * C + h * hs + d];
            att[t][h * hs + d] = o;
          }
        }
      Mat proj = matmul(att, &projw[size_t(l) * C * C], &projb[l * C], C, C);
      for (int t = 0; t < T; ++t)
        for (int c = 0; c < C; ++c) x[t][c] += proj[t][c];
      Mat fc = matmul(layernorm(x, &ln2w[l * C], &ln2b[l * C]), &fcw[size_t(l) * 4 * C * C], &fcb[l * 4 * C], C,
                      4 * C);
      for (auto& row : fc)
        for (double& v : row) v = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
      Mat out = matmul(fc, &fcprojw[size_t(l) * C * 4 * C], &fcprojb[l * C], 4 * C, C);
      for (int t = 0; t < T; ++t)
        for (int c = 0; c < C; ++c) x[t][c] += out[t][c];
    }
    Mat logits = matmul(layernorm(x, lnfw.data(), lnfb.data()), wte.data(), nullptr, C, V);  // first V rows
    double loss = 0;
    for (int t = 0; t < T; ++t) {
      double mx = *std::max_element(logits[t].begin(), logits[t].end()), sum = 0;
      for (double v : logits[t]) sum += std::exp(v - mx);
      loss += std::log(sum) + mx - logits[t][targets[t]];
    }
    return loss / T;
  }

  // The same weights set by name into a pptrain model in memory.
  void set_into(ParamStore& params) const {
    auto set = [&](const std::string& name, const float* src) {
      Param* p = params.find(name);
      ASSERT_NE(p, nullptr) << name;
      p->value.upload(src);
    };
    set("wte.weight", wte.data());  // the first V rows: tp = 1 holds no padding
    set("wpe.weight", wpe.data());
    for (int l = 0; l < L; ++l) {
      auto h = [&](const char* n) { return "h." + std::to_string(l) + "." + n; };
      set(h("ln_1.weight"), &ln1w[l * C]), set(h("ln_1.bias"), &ln1b[l * C]);
      set(h("attn.qkv.weight"), &qkvw[size_t(l) * 3 * C * C]), set(h("attn.qkv.bias"), &qkvb[l * 3 * C]);
      set(h("attn.proj.weight"), &projw[size_t(l) * C * C]), set(h("attn.proj.bias"), &projb[l * C]);
      set(h("ln_2.weight"), &ln2w[l * C]), set(h("ln_2.bias"), &ln2b[l * C]);
      set(h("mlp.fc.weight"), &fcw[size_t(l) * 4 * C * C]), set(h("mlp.fc.bias"), &fcb[l * 4 * C]);
      set(h("mlp.proj.weight"), &fcprojw[size_t(l) * C * 4 * C]), set(h("mlp.proj.bias"), &fcprojb[l * C]);
    }
    set("ln_f.weight", lnfw.data());
    set("ln_f.bias", lnfb.data());
  }
};

// Loads checkpoint `path` into a fresh model of `m` (weights only).
void load_weights(Model& model, const ModelConfig& m, const std::string& path) {
  Config cfg;
  cfg.model = m;
  cfg.source = "test";
  std::vector<Param*> by_index;
  for (auto& [name, p] : model.params->all()) by_index.push_back(p.get());
  IoGroup io = IoGroup::single();
  read_checkpoint_file(path, sharded_tensors(*model.params), [&](Section, int i, const float* host) {
    by_index[i]->value.upload(host);
  }, cfg, false, io);
}

}  // namespace

TEST(LlmcImport, SameLossAsTheWeightsInMemoryAndAsLlmcForward) {
  TempDir dir;
  LlmcFile llmc(11);
  llmc.write(dir.file("model.bin"));
  CommandResult r = run_command(pptrain_bin() + " import-llmc " + dir.file("model.bin") + " " + dir.file("model.h5"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("vocab 11 padded to 16"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir.file("model.h5.tmp")));

  Model imported(llmc.model(), 1), in_memory(llmc.model(), 2);
  load_weights(imported, llmc.model(), dir.file("model.h5"));
  llmc.set_into(*in_memory.params);
  std::vector<hsize_t> shape;
  read_h5_floats(dir.file("model.h5"), "/model/wte.weight", &shape);
  EXPECT_EQ(shape, (std::vector<hsize_t>{11, 8}));  // padding rows 11..15 dropped

  for (uint32_t seed : {1u, 2u, 3u}) {
    std::mt19937 gen(seed);
    std::vector<int32_t> tokens(llmc.T), targets(llmc.T);
    for (int t = 0; t < llmc.T; ++t) tokens[t] = int32_t(gen() % llmc.V), targets[t] = int32_t(gen() % llmc.V);
    const double a = imported.loss(tokens, targets), b = in_memory.loss(tokens, targets);
    const double ref = llmc.reference_loss(tokens, targets);
    EXPECT_EQ(a, b) << "seed " << seed;
    EXPECT_NEAR(a, ref, 1e-5 * ref) << "seed " << seed;
  }

  IoGroup io = IoGroup::single();
  CheckpointMeta meta = read_checkpoint_meta(dir.file("model.h5"), io);
  EXPECT_EQ(meta.step, 0);
  EXPECT_FALSE(meta.has_optimizer_state);
  // Resuming training from it: weights load, moments start at zero.
  Config cfg = tiny_config("");
  cfg.model = llmc.model();
  cfg.checkpoint.resume = dir.file("model.h5");
  Model trainee(llmc.model(), 5);
  trainee.randomise(4);
  EXPECT_EQ(CheckpointManager(cfg, single_process()).resume(*trainee.params, *trainee.optimizer), 0);
  for (auto& [name, p] : trainee.params->all()) {
    EXPECT_EQ(p->value.to_host(), in_memory.params->find(name)->value.to_host()) << name;
    for (float x : trainee.optimizer->m(name).to_host()) ASSERT_EQ(x, 0.0f) << name;
  }
}

TEST(LlmcImport, Bf16ModelsWidenExactly) {
  TempDir dir;
  LlmcFile llmc(12);
  llmc.write(dir.file("bf16.bin"), 5);
  LlmcModel m = import_llmc(dir.file("bf16.bin"), dir.file("bf16.h5"));
  EXPECT_EQ(m.version, 5);
  std::vector<float> got = read_h5_floats(dir.file("bf16.h5"), "/model/h.1.mlp.fc.weight");
  const size_t n = size_t(4) * llmc.C * llmc.C;
  ASSERT_EQ(got.size(), n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &llmc.fcw[n + i], 4);
    bits &= 0xFFFF0000u;
    float want;
    std::memcpy(&want, &bits, 4);
    ASSERT_EQ(got[i], want) << i;
  }
}

TEST(LlmcImport, BadFilesAreClearErrors) {
  TempDir dir;
  LlmcFile llmc(13);
  llmc.write(dir.file("magic.bin"), 3, 12345);
  EXPECT_NE(error_of([&] { read_llmc_model(dir.file("magic.bin")); }).find("bad magic 12345 (expected 20240326"),
            std::string::npos);
  llmc.write(dir.file("version.bin"), 4);
  EXPECT_NE(error_of([&] { read_llmc_model(dir.file("version.bin")); }).find("llm.c model version 4 is not supported"),
            std::string::npos);
  llmc.write(dir.file("cut.bin"));
  fs::resize_file(dir.file("cut.bin"), fs::file_size(dir.file("cut.bin")) - 4);
  EXPECT_NE(error_of([&] { read_llmc_model(dir.file("cut.bin")); }).find("(truncated or not an llm.c model file)"),
            std::string::npos);
  CommandResult r = run_command(pptrain_bin() + " import-llmc " + dir.file("cut.bin") + " " + dir.file("out.h5"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("error: " + dir.file("cut.bin") + ": "), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir.file("out.h5")));
}
