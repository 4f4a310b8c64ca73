// Hugging Face interop (`pptrain import-hf`, `pptrain export-hf`) and safetensors, with
// GPT-2 (LlamaForCausalLM: tests/test_hf_llama.cpp): a tiny GPT2LMHeadModel the test
// writes itself in the safetensors layout (its own serializer, HF names and
// Conv1D [in, out] weights; fp32 and bf16, one file and shards with an index) imports to
// the loss of the same weights set in memory and of an independent double-precision
// forward written from HF's layout; export -> import gives back every tensor bitwise;
// every damaged header, missing or misshapen tensor and unsupported config is one line
// and a non-zero exit.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "checkpoint/checkpoint_manager.h"
#include "checkpoint/hf_export.h"
#include "checkpoint/hf_import.h"
#include "checkpoint/safetensors.h"
#include "core/bf16.h"
#include "support/checkpoint_model.h"
#include "support/checkpoint_util.h"
#include "support/hf_files.h"
#include "support/test_util.h"

using namespace pptrain;
using namespace pptrain::testing;
namespace fs = std::filesystem;

namespace {

// ---- a tiny GPT-2 in HF's layout ---------------------------------------------------------

constexpr const char* kConfigJson = R"({
  "_name_or_path": "tiny-gpt2",
  "activation_function": "gelu_new",
  "architectures": ["GPT2LMHeadModel"],
  "attn_pdrop": 0.1, "embd_pdrop": 0.1, "resid_pdrop": 0.1,
  "bos_token_id": 10, "eos_token_id": 10,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2",
  "n_ctx": 5, "n_embd": 8, "n_head": 2, "n_inner": null, "n_layer": 2, "n_positions": 5,
  "reorder_and_upcast_attn": false, "scale_attn_by_inverse_layer_idx": false, "scale_attn_weights": true,
  "summary_activation": null, "summary_first_dropout": 0.1, "summary_type": "cls_index",
  "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
  "torch_dtype": "float32", "transformers_version": "4.40.0", "use_cache": true,
  "vocab_size": 11
})";

// A key of kConfigJson with another value.
std::string gpt2_config_with(const std::string& key, const std::string& value) {
  return config_with(key, value, kConfigJson);
}

struct HfGpt2 : HfWeights {
  ModelConfig m = tiny_model();  // L 2, NH 2, C 8, T 5, V 11

  // Random weights; with `bf16` already rounded to bf16, so a BF16 file holds them exactly.
  HfGpt2(uint32_t seed, bool bf16) {
    const int64_t C = m.d_model, V = m.vocab_size, T = m.seq_len;
    order = {{"transformer.wte.weight", {V, C}}, {"transformer.wpe.weight", {T, C}}};
    for (int l = 0; l < m.n_layer; ++l) {
      const std::string h = "transformer.h." + std::to_string(l) + ".";
      for (auto [name, shape] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
               {"ln_1.weight", {C}}, {"ln_1.bias", {C}}, {"attn.c_attn.weight", {C, 3 * C}},
               {"attn.c_attn.bias", {3 * C}}, {"attn.c_proj.weight", {C, C}}, {"attn.c_proj.bias", {C}},
               {"ln_2.weight", {C}}, {"ln_2.bias", {C}}, {"mlp.c_fc.weight", {C, 4 * C}}, {"mlp.c_fc.bias", {4 * C}},
               {"mlp.c_proj.weight", {4 * C, C}}, {"mlp.c_proj.bias", {C}}})
        order.push_back({h + name, shape});
    }
    order.push_back({"transformer.ln_f.weight", {C}});
    order.push_back({"transformer.ln_f.bias", {C}});
    randomise(seed, bf16,
              [](const std::string& name) { return name.find("ln_") != std::string::npos && name.ends_with(".weight"); });
  }

  void write_dir(const std::string& dir, const std::string& dtype, int shards = 1,
                 const std::string& config = kConfigJson) const {
    HfWeights::write_dir(dir, dtype, shards, config);
  }

  // The same weights set into a pptrain model: Conv1D weights [in, out] transposed to [out, in].
  void set_into(ParamStore& params) const {
    auto pptrain_name = [](std::string hf) {
      hf = hf.substr(std::string("transformer.").size());
      for (auto [from, to] : std::vector<std::pair<std::string, std::string>>{
               {"c_attn", "qkv"}, {"attn.c_proj", "attn.proj"}, {"c_fc", "fc"}, {"mlp.c_proj", "mlp.proj"}}) {
        const size_t at = hf.find(from);
        if (at != std::string::npos) hf.replace(at, from.size(), to);
      }
      return hf;
    };
    for (const auto& [name, shape] : order) {
      std::vector<float> v = w.at(name);
      const bool conv1d = shape.size() == 2 && name.find(".h.") != std::string::npos;
      if (conv1d) {
        const int64_t in = shape[0], out = shape[1];
        for (int64_t o = 0; o < out; ++o)
          for (int64_t i = 0; i < in; ++i) v[size_t(o * in + i)] = w.at(name)[size_t(i * out + o)];
      }
      Param* p = params.find(pptrain_name(name));
      ASSERT_NE(p, nullptr) << name;
      ASSERT_EQ(p->numel(), v.size()) << name;
      p->set_masters(v.data());
    }
  }

  // Mean cross-entropy in double, straight from HF's layout (modeling_gpt2.py: Conv1D is
  // y = x W + b with W [in, out]; gelu_new; LayerNorm eps 1e-5; lm_head = wte).
  double reference_loss(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets) const {
    const int T = m.seq_len, C = m.d_model, NH = m.n_head, V = m.vocab_size, hs = C / NH;
    using Mat = std::vector<std::vector<double>>;
    auto W = [&](const std::string& n) { return w.at("transformer." + n).data(); };
    auto layernorm = [&](const Mat& x, const float* g, const float* b) {
      Mat y(T, std::vector<double>(C));
      for (int t = 0; t < T; ++t) {
        double mean = 0, var = 0;
        for (int c = 0; c < C; ++c) mean += x[t][c] / C;
        for (int c = 0; c < C; ++c) var += (x[t][c] - mean) * (x[t][c] - mean) / C;
        for (int c = 0; c < C; ++c) y[t][c] = (x[t][c] - mean) / std::sqrt(var + 1e-5) * g[c] + b[c];
      }
      return y;
    };
    auto conv1d = [&](const Mat& x, const float* wt, const float* b, int in, int out) {
      Mat y(T, std::vector<double>(out));
      for (int t = 0; t < T; ++t)
        for (int o = 0; o < out; ++o) {
          double s = b[o];
          for (int i = 0; i < in; ++i) s += x[t][i] * double(wt[size_t(i) * out + o]);
          y[t][o] = s;
        }
      return y;
    };
    Mat x(T, std::vector<double>(C));
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) x[t][c] = double(W("wte.weight")[tokens[t] * C + c]) + W("wpe.weight")[t * C + c];
    for (int l = 0; l < m.n_layer; ++l) {
      const std::string h = "h." + std::to_string(l) + ".";
      Mat qkv = conv1d(layernorm(x, W(h + "ln_1.weight"), W(h + "ln_1.bias")), W(h + "attn.c_attn.weight"),
                       W(h + "attn.c_attn.bias"), C, 3 * C);
      Mat att(T, std::vector<double>(C));
      for (int head = 0; head < NH; ++head)
        for (int t = 0; t < T; ++t) {
          std::vector<double> p(t + 1);
          double mx = -1e300, sum = 0;
          for (int u = 0; u <= t; ++u) {
            double s = 0;
            for (int d = 0; d < hs; ++d) s += qkv[t][head * hs + d] * qkv[u][C + head * hs + d];
            mx = std::max(mx, p[u] = s / std::sqrt(double(hs)));
          }
          for (int u = 0; u <= t; ++u) sum += (p[u] = std::exp(p[u] - mx));
          for (int d = 0; d < hs; ++d) {
            double o = 0;
            for (int u = 0; u <= t; ++u) o += p[u] / sum * qkv[u][2 * C + head * hs + d];
            att[t][head * hs + d] = o;
          }
        }
      Mat proj = conv1d(att, W(h + "attn.c_proj.weight"), W(h + "attn.c_proj.bias"), C, C);
      for (int t = 0; t < T; ++t)
        for (int c = 0; c < C; ++c) x[t][c] += proj[t][c];
      Mat fc = conv1d(layernorm(x, W(h + "ln_2.weight"), W(h + "ln_2.bias")), W(h + "mlp.c_fc.weight"),
                      W(h + "mlp.c_fc.bias"), C, 4 * C);
      for (auto& row : fc)
        for (double& v : row) v = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
      Mat out = conv1d(fc, W(h + "mlp.c_proj.weight"), W(h + "mlp.c_proj.bias"), 4 * C, C);
      for (int t = 0; t < T; ++t)
        for (int c = 0; c < C; ++c) x[t][c] += out[t][c];
    }
    const Mat y = layernorm(x, W("ln_f.weight"), W("ln_f.bias"));
    double loss = 0;
    for (int t = 0; t < T; ++t) {
      std::vector<double> logits(V, 0.0);
      for (int v = 0; v < V; ++v)
        for (int c = 0; c < C; ++c) logits[v] += y[t][c] * W("wte.weight")[v * C + c];
      double mx = *std::max_element(logits.begin(), logits.end()), sum = 0;
      for (double z : logits) sum += std::exp(z - mx);
      loss += std::log(sum) + mx - logits[targets[t]];
    }
    return loss / T;
  }
};

}  // namespace

// ---- import ---------------------------------------------------------------------------------

TEST(HfImport, Fp32AndBf16SingleAndShardedGiveTheLossOfTheSameWeightsInMemory) {
  TempDir tmp;
  for (const std::string dtype : {"F32", "BF16"})
    for (int shards : {1, 3}) {
      const std::string what = dtype + " in " + std::to_string(shards) + " file(s)";
      const HfGpt2 hf(dtype == "F32" ? 21 : 22, dtype == "BF16");
      const std::string dir = tmp.file(dtype + std::to_string(shards)), out = dir + ".h5";
      hf.write_dir(dir, dtype, shards);
      if (shards == 1) {  // the command line once per dtype, the library otherwise
        CommandResult r = run_command(pptrain_bin() + " import-hf " + dir + " " + out);
        ASSERT_EQ(r.exit_code, 0) << r.output;
        EXPECT_NE(r.output.find("GPT2LMHeadModel (2 layers, 2 heads, d_model 8, seq_len 5, vocab 11, " + dtype + ")"),
                  std::string::npos) << r.output;
      } else {
        const HfImportResult r = import_hf(dir, out);
        EXPECT_NE(r.files.find("(3 shards)"), std::string::npos) << r.files;
        EXPECT_EQ(r.dtypes, dtype);
      }
      expect_same_loss(hf, out, what);
      IoGroup io = IoGroup::single();
      const CheckpointMeta meta = read_checkpoint_meta(out, io);
      EXPECT_EQ(meta.step, 0) << what;
      EXPECT_FALSE(meta.has_optimizer_state) << what;
      EXPECT_FALSE(fs::exists(out + ".tmp")) << what;
    }
}

// The Hub's own gpt2 was saved from GPT2Model: names without "transformer.", and older
// files hold the attention masks (buffers) and a tied lm_head.weight.
TEST(HfImport, BaseModelNamesTiedHeadAndMaskBuffersAreAccepted) {
  TempDir tmp;
  const HfGpt2 hf(23, false);
  std::vector<StEntry> entries = hf.entries("F32");
  for (StEntry& e : entries) e.name = e.name.substr(std::string("transformer.").size());
  StEntry head = entries[0];
  head.name = "lm_head.weight";
  StEntry mask{"h.0.attn.bias", "F32", {1, 1, 5, 5}, std::string(25 * 4, '\0')};
  entries.push_back(head);
  entries.push_back(mask);
  lay_out(entries);
  fs::create_directories(tmp.file("base"));
  write_file(tmp.file("base/config.json"), kConfigJson);
  write_file(tmp.file("base/model.safetensors"), serialize(entries));
  import_hf(tmp.file("base"), tmp.file("base.h5"));
  expect_same_loss(hf, tmp.file("base.h5"), "base model names");

  // An untied head is another model.
  entries[entries.size() - 2].data[3] ^= 0x01;
  write_file(tmp.file("base/model.safetensors"), serialize(entries));
  const std::string error = error_of([&] { import_hf(tmp.file("base"), tmp.file("untied.h5")); });
  EXPECT_NE(error.find("tensor lm_head.weight differs from wte.weight"), std::string::npos) << error;
}

// F16 widens exactly, subnormals and the largest half included.
TEST(HfImport, F16WidensExactly) {
  TempDir tmp;
  const uint16_t halves[] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x3800, 0x8000, 0x03FF};
  const float expected[] = {1.0f, -2.0f, 65504.0f, std::ldexp(1.0f, -24), 0.5f, -0.0f, std::ldexp(1023.0f, -24)};
  std::vector<StEntry> e = {{"x", "F16", {7}, std::string(reinterpret_cast<const char*>(halves), sizeof halves)}};
  lay_out(e);
  write_file(tmp.file("h.safetensors"), serialize(e));
  const SafetensorsFile f(tmp.file("h.safetensors"));
  ASSERT_EQ(f.tensors().size(), 1u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  float got[7];
  f.read(*f.find("x"), got);
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(got[i], expected[i]) << i;
    EXPECT_EQ(std::signbit(got[i]), std::signbit(expected[i])) << i;
  }
}

// ---- export -----------------------------------------------------------------------------

// A trained-like checkpoint (random weights and moments, step 7) exported as fp32, in one
// file and in shards, imports back to the same weights bitwise; bf16 export rounds each
// value to nearest even.
TEST(HfExport, ExportThenImportGivesBackEveryTensorBitwise) {
  TempDir tmp;
  const ModelConfig m = tiny_model();
  Config cfg = tiny_config(tmp.file("ck"));
  Model trainee(m, 5);
  trainee.randomise(6);
  const std::string ck = CheckpointManager(cfg, single_process()).save(*trainee.params, *trainee.optimizer, 7);

  CommandResult r = run_command(pptrain_bin() + " export-hf " + ck + " " + tmp.file("hf"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(step 7, "), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(tmp.file("hf/config.json")) && fs::exists(tmp.file("hf/model.safetensors")));
  EXPECT_FALSE(fs::exists(tmp.file("hf.tmp")));
  HfExportOptions sharded;
  sharded.max_shard_bytes = 1000;
  const HfExportResult s = export_hf(ck, tmp.file("hf_sharded"), sharded);
  EXPECT_GT(s.files.size(), 3u);
  EXPECT_TRUE(fs::exists(tmp.file("hf_sharded/model.safetensors.index.json")));
  HfExportOptions bf16;
  bf16.dtype = "BF16";
  export_hf(ck, tmp.file("hf_bf16"), bf16);

  // HF's names and Conv1D layout in the file: c_attn is qkv transposed; no lm_head.
  const SafetensorsFile f(tmp.file("hf/model.safetensors"));
  EXPECT_EQ(f.find("lm_head.weight"), nullptr);
  const StTensor* c_attn = f.find("transformer.h.1.attn.c_attn.weight");
  ASSERT_NE(c_attn, nullptr);
  EXPECT_EQ(c_attn->shape, (std::vector<int64_t>{8, 24}));
  std::vector<float> hf_qkv(c_attn->numel);
  f.read(*c_attn, hf_qkv.data());
  const std::vector<float> qkv = read_h5_floats(ck, "/model/h.1.attn.qkv.weight");  // [24, 8]
  for (int o = 0; o < 24; ++o)
    for (int i = 0; i < 8; ++i) ASSERT_EQ(hf_qkv[i * 24 + o], qkv[o * 8 + i]) << o << "," << i;

  import_hf(tmp.file("hf"), tmp.file("back.h5"));
  import_hf(tmp.file("hf_sharded"), tmp.file("back_sharded.h5"));
  import_hf(tmp.file("hf_bf16"), tmp.file("back_bf16.h5"));
  for (const std::string& name : model_datasets(m)) {
    const std::vector<float> original = read_h5_floats(ck, "/model/" + name);
    EXPECT_EQ(read_h5_floats(tmp.file("back.h5"), "/model/" + name), original) << name;
    EXPECT_EQ(read_h5_floats(tmp.file("back_sharded.h5"), "/model/" + name), original) << name;
    std::vector<float> rounded = original;
    for (float& x : rounded) x = bf16_round(x);
    EXPECT_EQ(read_h5_floats(tmp.file("back_bf16.h5"), "/model/" + name), rounded) << name;
  }

  // DIR must be new or empty.
  r = run_command(pptrain_bin() + " export-hf " + ck + " " + tmp.file("hf"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("error: " + tmp.file("hf") + ": exists and is not an empty directory"), std::string::npos)
      << r.output;
  r = run_command(pptrain_bin() + " export-hf " + ck + " " + tmp.file("x") + " --dtype fp16");
  EXPECT_NE(r.output.find("error: export-hf: --dtype fp16: expected fp32 or bf16"), std::string::npos) << r.output;
}

// ---- bad input ------------------------------------------------------------------------

// Each damaged file or inconsistent model through the command line: one line, exit != 0,
// no checkpoint.
TEST(HfImport, DamagedHeadersAndMismatchedTensorsAreOneLineErrors) {
  TempDir tmp;
  const HfGpt2 hf(24, false);
  int n = 0;
  // A fresh model directory whose model.safetensors is `bytes`; returns the directory.
  auto dir_with = [&](const std::string& bytes, const std::string& config = kConfigJson) {
    const std::string dir = tmp.file("case" + std::to_string(n++));
    hf.write_dir(dir, "F32", 1, config);
    if (!bytes.empty()) write_file(dir + "/model.safetensors", bytes);
    return dir;
  };
  const std::vector<StEntry> good = hf.entries("F32");
  auto edited = [&](auto edit) {
    std::vector<StEntry> e = good;
    edit(e);
    return serialize(e);
  };
  const std::string last = good.back().name;

  expect_refused(dir_with(edited([](auto& e) { e.back().end += 4; })),
                 "tensor " + last + ": data_offsets [7520, 7556] run past the end of the data (7552 bytes");
  expect_refused(dir_with(edited([](auto& e) { e[1].begin -= 4, e[1].end -= 4; })),
                 "the data of tensors transformer.wte.weight [0, 352) and transformer.wpe.weight [348, 508) overlap");
  expect_refused(dir_with(edited([](auto& e) { e[3].dtype = "F33"; })),
                 "tensor transformer.h.0.ln_1.bias: dtype \"F33\" is not a safetensors dtype");
  expect_refused(dir_with(edited([](auto& e) { e[3].dtype = "I32"; })),
                 "tensor transformer.h.0.ln_1.bias is I32, expected F32, BF16 or F16");
  expect_refused(dir_with(edited([](auto& e) { e.erase(e.begin() + 22), lay_out(e); })),
                 "tensor transformer.h.1.mlp.c_fc.weight is missing (GPT2LMHeadModel with n_layer 2");
  expect_refused(dir_with(edited([](auto& e) { std::swap(e[4].shape[0], e[4].shape[1]); })),
                 "tensor transformer.h.0.attn.c_attn.weight has shape [24, 8], expected [8, 24]");
  expect_refused(dir_with(file_bytes("{}", "", uint64_t(1) << 62)),
                 "header length 4611686018427387904 is more than the 16777216 bytes");
  const std::string whole = serialize(good);
  expect_refused(dir_with(whole.substr(0, whole.size() - 4)), "run past the end of the data");
  expect_refused(dir_with(whole.substr(0, 100)), "runs past the end of the file (100 bytes)");
  // Not a regular file: a FIFO is refused at once (timeout would say 124), a directory too.
  const std::string fifo_dir = dir_with("");
  fs::remove(fifo_dir + "/model.safetensors");
  ASSERT_EQ(::mkfifo((fifo_dir + "/model.safetensors").c_str(), 0600), 0);
  expect_refused(fifo_dir, "safetensors file " + fifo_dir + "/model.safetensors: is a FIFO (expected a regular file)");
}

// The rest of the checks, in process (each message names the file and what was expected).
TEST(HfImport, EveryOtherInconsistencyIsNamed) {
  TempDir tmp;
  const HfGpt2 hf(25, false);
  const std::vector<StEntry> good = hf.entries("F32");
  const std::string path = tmp.file("x.safetensors");
  auto header_error = [&](const std::string& bytes) {
    write_file(path, bytes);
    return error_of([&] { SafetensorsFile f(path); });
  };
  auto edited = [&](auto edit) {
    std::vector<StEntry> e = good;
    edit(e);
    return serialize(e);
  };
  EXPECT_NE(header_error(edited([](auto& e) { e.back().data.insert(0, 4, '\0'), e.back().begin += 4, e.back().end += 4; })).find(
                "bytes [7520, 7524) of the data belong to no tensor (safetensors allows no holes)"),
            std::string::npos);
  EXPECT_NE(header_error(serialize(good) + "junk").find("bytes [7552, 7556) of the data belong to no tensor"),
            std::string::npos);
  EXPECT_NE(header_error(edited([](auto& e) { e[2].end -= 4, e[3].begin -= 4, e[3].end -= 4; })).find(
                "tensor transformer.h.0.ln_1.weight: data_offsets [512, 540] hold 28 bytes, but F32 [8] needs 32"),
            std::string::npos);
  EXPECT_NE(header_error(file_bytes("not json", "")).find("the header does not start with '{'"), std::string::npos);
  EXPECT_NE(header_error(file_bytes("{\"a\": [", "")).find("invalid JSON"), std::string::npos);
  EXPECT_NE(header_error(file_bytes(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[],"data_offsets":[4,8]}})", std::string(8, '\0')))
                .find("tensor a is given twice"),
            std::string::npos);
  EXPECT_NE(header_error(file_bytes(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,0]}})", ""))
                .find("overflows 64-bit arithmetic"),
            std::string::npos);
  EXPECT_NE(header_error(file_bytes(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", ""))
                .find("shape holds -1, expected an array of at most 8 integers >= 0"),
            std::string::npos);
  EXPECT_NE(header_error(file_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1}})", "abcd"))
                .find("unknown key \"extra\""),
            std::string::npos);
  EXPECT_NE(header_error(file_bytes(R"({"__metadata__":{"format":1}})", "")).find("__metadata__ holds"),
            std::string::npos);
  EXPECT_NE(header_error("1234567").find("shorter than the 8-byte header length"), std::string::npos);

  // The index: shards are plain files of the directory and agree with it.
  const std::string dir = tmp.file("sharded");
  hf.write_dir(dir, "F32", 2);
  const std::string index = read_file(dir + "/model.safetensors.index.json");
  auto index_error = [&](const std::string& text) {
    write_file(dir + "/model.safetensors.index.json", text);
    return error_of([&] { SafetensorsDir d(dir); });
  };
  std::string outside = index;
  outside.replace(outside.find("model-00001-of-00002"), 20, "../../etc/passwd");
  EXPECT_NE(index_error(outside).find("expected a file name in " + dir), std::string::npos);
  std::string moved = index;
  moved.replace(moved.find("model-00001-of-00002"), 20, "model-00002-of-00002");
  EXPECT_NE(index_error(moved).find("weight_map puts transformer.wte.weight in model-00002-of-00002.safetensors, which "
                                    "holds no such tensor"),
            std::string::npos);
  std::string dropped = index;
  const size_t from = dropped.find("\"transformer.wte.weight\"");
  dropped.erase(from, dropped.find(',', from) + 1 - from);
  EXPECT_NE(index_error(dropped).find("holds tensor transformer.wte.weight, which the index does not list"),
            std::string::npos);
  EXPECT_NE(index_error("{}").find("weight_map is missing"), std::string::npos);
  fs::remove(dir + "/model.safetensors.index.json");
  EXPECT_NE(error_of([&] { SafetensorsDir d(dir); }).find("holds neither model.safetensors nor"), std::string::npos);
  EXPECT_NE(error_of([&] { SafetensorsDir d(tmp.file("none")); }).find("not a directory"), std::string::npos);

  // config.json: what pptrain's GPT-2 does not compute.
  const std::string cdir = tmp.file("config");
  hf.write_dir(cdir, "F32");
  auto config_error = [&](const std::string& config) {
    write_file(cdir + "/config.json", config);
    return error_of([&] { read_hf_config(cdir); });
  };
  EXPECT_NE(config_error(gpt2_config_with("activation_function", "\"relu\"")).find(
                "activation_function is \"relu\", but pptrain's MLP computes the tanh GELU"),
            std::string::npos);
  EXPECT_NE(config_error(gpt2_config_with("n_inner", "64")).find("n_inner is 64, but pptrain's MLP is 4 x n_embd = 32"),
            std::string::npos);
  EXPECT_NE(config_error(gpt2_config_with("n_head", "3")).find("n_embd 8 is not a multiple of n_head 3"), std::string::npos);
  EXPECT_NE(config_error(gpt2_config_with("n_layer", "\"2\"")).find("n_layer is \"2\", expected an integer in [1, "),
            std::string::npos);
  EXPECT_NE(config_error(gpt2_config_with("scale_attn_by_inverse_layer_idx", "true")).find("scale_attn_by_inverse_layer_idx"),
            std::string::npos);
  EXPECT_NE(config_error(gpt2_config_with("layer_norm_epsilon", "1e-06")).find(
                "config.json: layer_norm_epsilon is 1e-06, but pptrain's LayerNorm uses 1e-05"),
            std::string::npos);
  EXPECT_NE(config_error(config_with("architectures", "[\"Gpt2Foo\"]", gpt2_config_with("model_type", "\"foo\"")))
                .find("config.json: architectures [\"Gpt2Foo\"], model_type \"foo\": pptrain imports GPT2LMHeadModel, "
                      "LlamaForCausalLM"),
            std::string::npos);
  EXPECT_EQ(config_error(kConfigJson), "(no error)");

  // A tensor the model lacks.
  std::vector<StEntry> extra = good;
  extra.push_back({"transformer.h.2.ln_1.weight", "F32", {8}, std::string(32, '\0')});
  lay_out(extra);
  write_file(cdir + "/model.safetensors", serialize(extra));
  EXPECT_NE(error_of([&] { import_hf(cdir, tmp.file("extra.h5")); }).find("unexpected tensor transformer.h.2.ln_1.weight"),
            std::string::npos);

  // A non-finite weight stops the import (the checkpoint writer refuses it).
  std::vector<StEntry> nan = good;
  const float q = std::nanf("");
  std::memcpy(nan[1].data.data(), &q, 4);
  write_file(cdir + "/model.safetensors", serialize(nan));
  EXPECT_NE(error_of([&] { import_hf(cdir, tmp.file("nan.h5")); }).find("wpe.weight"), std::string::npos);
  EXPECT_FALSE(fs::exists(tmp.file("nan.h5")));
}

// The fuzz target's seeds were written by Python's json and struct (tests/fuzz/make_corpus.sh),
// as transformers' writer lays files out: compact JSON padded with spaces to 8 bytes,
// scalars, empty tensors and dtypes pptrain does not read (listed, refused when read).
TEST(Safetensors, FilesWrittenByAnotherWriterRead) {
  const SafetensorsFile f("tests/fuzz/corpus/safetensors/gpt2_parts.safetensors");
  ASSERT_EQ(f.tensors().size(), 6u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  float wte[6], qkv[6], bias[2], scalar;
  f.read(*f.find("transformer.wte.weight"), wte);
  f.read(*f.find("transformer.h.0.attn.c_attn.weight"), qkv);
  f.read(*f.find("transformer.h.0.ln_1.bias"), bias);
  f.read(*f.find("scalar"), &scalar);
  EXPECT_EQ(std::vector<float>(wte, wte + 6), (std::vector<float>{0.5f, -1, 2, 0.25f, 3, -4}));
  EXPECT_EQ(std::vector<float>(qkv, qkv + 5), (std::vector<float>{1, -1, 2, 0, 0.5f}));
  EXPECT_EQ(qkv[5], bfloat16{0x7F7F}.to_float());
  EXPECT_EQ(bias[0], 1.0f);
  EXPECT_EQ(bias[1], std::ldexp(1.0f, -24));
  EXPECT_EQ(scalar, 1.5f);
  EXPECT_EQ(f.find("empty")->numel, 0);
  EXPECT_EQ(f.find("scalar")->shape, std::vector<int64_t>{});
  float ids[2];
  EXPECT_NE(error_of([&] { f.read(*f.find("ids"), ids); }).find("tensor ids is I64, expected F32, BF16 or F16"),
            std::string::npos);
  const SafetensorsFile plain("tests/fuzz/corpus/safetensors/no_metadata.safetensors");
  EXPECT_TRUE(plain.metadata().empty());
  EXPECT_EQ(plain.find("x")->shape, (std::vector<int64_t>{2, 2}));
}
