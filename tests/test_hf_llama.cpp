// Hugging Face interop for LlamaForCausalLM (`pptrain import-hf`, `pptrain export-hf`): a
// tiny Llama with grouped-query attention (4 query heads, 2 key/value heads), untied and
// tied, that the test writes itself in the safetensors layout (tests/support/hf_files.h;
// fp32 and bf16, one file and shards) imports to the loss of the same weights set in
// memory and of a double-precision forward written from transformers' LlamaForCausalLM
// formulas (RMSNorm, rotate-half RoPE at positions 0..T-1, repeat_kv, SiLU-gated MLP):
// that is what shows pptrain's Llama computes transformers' logits, q/k/v rows and rotary
// convention included. Export -> import gives back every tensor bitwise, q_proj, k_proj
// and v_proj split off qkv; every missing or misshapen tensor and every config.json key
// pptrain does not compute is one line.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "checkpoint/checkpoint_manager.h"
#include "checkpoint/hf_export.h"
#include "checkpoint/hf_import.h"
#include "checkpoint/safetensors.h"
#include "support/checkpoint_model.h"
#include "support/checkpoint_util.h"
#include "support/hf_files.h"
#include "support/hf_llama.h"
#include "support/test_util.h"

using namespace pptrain;
using namespace pptrain::testing;
namespace fs = std::filesystem;

// ---- import ---------------------------------------------------------------------------------

TEST(HfLlamaImport, UntiedAndTiedFp32AndBf16SingleAndShardedGiveTransformersLoss) {
  TempDir tmp;
  uint32_t seed = 30;
  for (bool tied : {false, true})
    for (const std::string dtype : {"F32", "BF16"})
      for (int shards : {1, 3}) {
        const std::string what = std::string(tied ? "tied, " : "untied, ") + dtype + " in " +
                                 std::to_string(shards) + " file(s)";
        const HfLlama hf(++seed, dtype == "BF16", tied);
        const std::string dir = tmp.file(std::to_string(seed)), out = dir + ".h5";
        hf.write_dir(dir, dtype, shards);
        if (shards == 1 && dtype == "F32") {  // the command line once per tying, the library otherwise
          CommandResult r = run_command(pptrain_bin() + " import-hf " + dir + " " + out);
          ASSERT_EQ(r.exit_code, 0) << r.output;
          EXPECT_NE(r.output.find("LlamaForCausalLM (2 layers, 4 heads (2 kv), d_model 32, seq_len 6, vocab 13, F32)"),
                    std::string::npos) << r.output;
          EXPECT_NE(r.output.find(std::string("continue training with model: {arch: llama, n_layer: 2, n_head: 4, "
                                              "d_model: 32, seq_len: 6, vocab_size: 13, n_kv_head: 2, ffn_hidden: 48, "
                                              "rope_theta: 10000.0, norm_eps: 1e-05, tie_embeddings: ") +
                                  (tied ? "true}" : "false}")),
                    std::string::npos) << r.output;
        } else {
          const HfImportResult r = import_hf(dir, out);
          EXPECT_EQ(r.dtypes, dtype) << what;
          EXPECT_EQ(r.model.tie_embeddings, tied) << what;
          // 13·32 embedding, per block 2·32 + (32 + 2·16)·32 + 32·32 + 3·48·32, 32, 13·32 head
          EXPECT_EQ(r.parameters, 416 + 2 * (64 + 2048 + 1024 + 4608) + 32 + (tied ? 0 : 416)) << what;
        }
        expect_same_loss(hf, out, what);
      }
}

// Llama 3.1's rope scaling, Mistral's head width, Qwen2's biases and Qwen3's head norms: each imported from the
// files its class writes gives the loss of the same weights in memory and of transformers'
// formulas in double; exported, its config.json reads back as the same model, its tensors
// bitwise.
TEST(HfLlamaFamily, Llama31MistralQwen2AndQwen3GiveTransformersLossAndExportBack) {
  TempDir tmp;
  uint32_t seed = 70;
  for (Family f : {Family::Llama31, Family::Mistral, Family::Qwen2, Family::Qwen3})
    for (bool tied : {false, true}) {
      const HfLlama hf(++seed, false, tied, f);
      const std::string what = hf_model_section(hf.m), dir = tmp.file(std::to_string(seed));
      hf.write_dir(dir, "F32", 1);
      const HfImportResult r = import_hf(dir, dir + ".h5");
      EXPECT_EQ(hf_model_section(r.model), hf_model_section(hf.m)) << what;
      expect_same_loss(hf, dir + ".h5", what);
      export_hf(dir + ".h5", dir + "_exported", {});
      EXPECT_EQ(hf_model_section(read_hf_config(dir + "_exported").second), hf_model_section(hf.m)) << what;
      const SafetensorsFile back(dir + "_exported/model.safetensors");
      for (const auto& [name, shape] : hf.order) {
        if (tied && name == "lm_head.weight") continue;
        const StTensor* t = back.find(name);
        ASSERT_NE(t, nullptr) << what << ": " << name;
        EXPECT_EQ(t->shape, shape) << name;
        std::vector<float> got(t->numel);
        back.read(*t, got.data());
        EXPECT_EQ(got, hf.w.at(name)) << what << ": " << name;
      }
    }
}

// A tied model's file may hold lm_head.weight as an equal copy, and the bare LlamaModel's
// names lack "model."; older files hold the rotary inverse frequencies (a buffer).
TEST(HfLlamaImport, BaseModelNamesTiedCopyAndRotaryBuffersAreAccepted) {
  TempDir tmp;
  const HfLlama hf(40, false, true);
  std::vector<StEntry> entries = hf.entries("F32");
  for (StEntry& e : entries) e.name = e.name.substr(std::string("model.").size());
  StEntry head = entries[0];
  head.name = "lm_head.weight";
  entries.push_back(head);
  entries.push_back({"layers.1.self_attn.rotary_emb.inv_freq", "F32", {4}, std::string(16, '\0')});
  lay_out(entries);
  fs::create_directories(tmp.file("base"));
  write_file(tmp.file("base/config.json"), hf.config());
  write_file(tmp.file("base/model.safetensors"), serialize(entries));
  import_hf(tmp.file("base"), tmp.file("base.h5"));
  expect_same_loss(hf, tmp.file("base.h5"), "base model names");

  entries[entries.size() - 2].data[5] ^= 0x01;  // the copy differs: an untied model
  write_file(tmp.file("base/model.safetensors"), serialize(entries));
  const std::string error = error_of([&] { import_hf(tmp.file("base"), tmp.file("untied.h5")); });
  EXPECT_NE(error.find("tensor lm_head.weight differs from embed_tokens.weight"), std::string::npos) << error;
}

// No Llama tensor depends on seq_len: an import (seq_len = max_position_embeddings) loads
// into a model of another length, as training shorter or longer than the original does.
TEST(HfLlamaImport, TheImportLoadsAtAnotherSeqLen) {
  TempDir tmp;
  const HfLlama hf(42, false, false);
  hf.write_dir(tmp.file("d"), "F32");
  import_hf(tmp.file("d"), tmp.file("d.h5"));
  ModelConfig longer = hf.m;
  longer.seq_len = 3 * hf.m.seq_len;
  Model model(longer, 1);
  EXPECT_EQ(error_of([&] { load_weights(model, longer, tmp.file("d.h5")); }), "(no error)");
}

// Without num_key_value_heads, max_position_embeddings, rms_norm_eps, rope_theta and
// tie_word_embeddings, LlamaConfig's defaults hold: multi-head attention, 2048, 1e-6,
// 10000, untied.
TEST(HfLlamaImport, AbsentKeysTakeLlamaConfigsDefaults) {
  TempDir tmp;
  std::string config = kLlamaConfigJson;
  for (const char* key : {"num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "rope_theta",
                          "tie_word_embeddings", "head_dim"}) {
    const size_t at = config.find("\n  \"" + std::string(key) + "\"");
    config.erase(at, config.find('\n', at + 1) - at);
  }
  fs::create_directories(tmp.file("d"));
  write_file(tmp.file("d/config.json"), config);
  const ModelConfig m = read_hf_config(tmp.file("d")).second;
  EXPECT_EQ(m.kv_heads(), 4);
  EXPECT_EQ(m.seq_len, 2048);
  EXPECT_EQ(m.norm_eps, 1e-6);
  EXPECT_EQ(m.rope_theta, 10000.0);
  EXPECT_FALSE(m.tie_embeddings);
  write_file(tmp.file("d/config.json"), config_with("num_key_value_heads", "null", kLlamaConfigJson));
  EXPECT_EQ(read_hf_config(tmp.file("d")).second.kv_heads(), 4);
}

// transformers 5 writes the rotary base as rope_parameters {rope_type, rope_theta}, not at
// the top as rope_theta: read, and checked like rope_scaling.
TEST(HfLlamaImport, Transformers5RopeParametersAreRead) {
  TempDir tmp;
  fs::create_directories(tmp.file("d"));
  auto read = [&](const std::string& params, bool with_top_level_theta = false) {
    std::string config = config_with("rope_scaling", "null,\n  \"rope_parameters\": " + params, kLlamaConfigJson);
    if (!with_top_level_theta) {
      const size_t at = config.find("\n  \"rope_theta\"");
      config.erase(at, config.find('\n', at + 1) - at);
    }
    write_file(tmp.file("d/config.json"), config);
    std::string error;
    double theta = 0;
    try {
      theta = read_hf_config(tmp.file("d")).second.rope_theta;
    } catch (const Error& e) {
      error = e.what();
    }
    return std::pair{theta, error};
  };
  EXPECT_EQ(read(R"({"rope_theta": 500000.0, "rope_type": "default"})").first, 500000.0);
  EXPECT_EQ(read(R"({"rope_theta": 10000.0, "rope_type": "default"})", true).first, 10000.0);
  EXPECT_EQ(read("null").first, 10000.0);
  const std::string in = tmp.file("d/config.json") + ": ";
  EXPECT_EQ(read(R"({"rope_theta": 500000.0, "rope_type": "default"})", true).second,
            in + "rope_theta 10000.0 and rope_parameters' rope_theta 500000.0 differ");
  EXPECT_EQ(read(R"({"factor": 32.0, "rope_theta": 500000.0, "rope_type": "dynamic"})").second,
            in + "rope_parameters: rope_type \"dynamic\" is not one pptrain's rotary embedding computes (default, "
                 "linear, llama3); the weights would compute another model");
  EXPECT_EQ(read(R"({"partial_rotary_factor": 0.5, "rope_theta": 500000.0, "rope_type": "default"})").second,
            in + "rope_parameters: \"partial_rotary_factor\" is not a key pptrain's default rotary embedding computes");
  // Llama 3.1-3.3's scaling, in either spelling.
  write_file(tmp.file("d/config.json"),
             config_with("rope_scaling", "null,\n  \"rope_parameters\": " R"({"factor": 32.0, "high_freq_factor": 4.0,
             "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_theta": 10000.0,
             "rope_type": "llama3"})", kLlamaConfigJson));
  const ModelConfig v5 = read_hf_config(tmp.file("d")).second;
  EXPECT_EQ(v5.rope_scaling, (RopeScaling{"llama3", 32.0, 1.0, 4.0, 8192}));
  write_file(tmp.file("d/config.json"),
             config_with("rope_scaling", R"({"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
             "original_max_position_embeddings": 8192, "rope_type": "llama3"})", kLlamaConfigJson));
  EXPECT_EQ(read_hf_config(tmp.file("d")).second.rope_scaling, v5.rope_scaling);
  EXPECT_NE(read("[1]").second.find(in + "rope_parameters is an array, expected an object"), std::string::npos);
}

// ---- export -----------------------------------------------------------------------------

// A trained-like checkpoint (random weights and moments), untied and tied, exported in fp32
// (one file and shards) and bf16 imports back bitwise (bf16: each value rounded to nearest
// even); q_proj, k_proj and v_proj are qkv's row blocks; config.json reads back as the
// same model.
TEST(HfLlamaExport, ExportThenImportGivesBackEveryTensorBitwise) {
  TempDir tmp;
  for (bool tied : {false, true}) {
    const std::string tag = tied ? "tied" : "untied";
    const ModelConfig m = tiny_llama(tied);
    Config cfg = tiny_config(tmp.file(tag + "_ck"));
    cfg.model = m;
    Model trainee(m, 5);
    trainee.randomise(6);
    const std::string ck = CheckpointManager(cfg, single_process()).save(*trainee.params, *trainee.optimizer, 3);

    CommandResult r = run_command(pptrain_bin() + " export-hf " + ck + " " + tmp.file(tag));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    HfExportOptions sharded;
    sharded.max_shard_bytes = 4000;
    EXPECT_GT(export_hf(ck, tmp.file(tag + "_sharded"), sharded).files.size(), 3u);
    HfExportOptions bf16;
    bf16.dtype = "BF16";
    export_hf(ck, tmp.file(tag + "_bf16"), bf16);

    const SafetensorsFile f(tmp.file(tag + "/model.safetensors"));
    EXPECT_EQ(f.find("lm_head.weight") != nullptr, !tied) << tag;
    EXPECT_EQ(f.tensors().size(), 1 + 2 * 9 + 1 + (tied ? 0u : 1u)) << tag;
    const std::vector<float> qkv = read_h5_floats(ck, "/model/h.1.attn.qkv.weight");  // [64, 32]
    size_t row = 0;
    for (auto [part, rows] : {std::pair{"q_proj", 32}, {"k_proj", 16}, {"v_proj", 16}}) {
      const StTensor* t = f.find(std::string("model.layers.1.self_attn.") + part + ".weight");
      ASSERT_NE(t, nullptr) << part;
      EXPECT_EQ(t->shape, (std::vector<int64_t>{int64_t(rows), 32})) << part;
      std::vector<float> got(t->numel);
      f.read(*t, got.data());
      EXPECT_EQ(got, std::vector<float>(qkv.begin() + row * 32, qkv.begin() + (row + rows) * 32)) << part;
      row += rows;
    }
    const ModelConfig back = read_hf_config(tmp.file(tag)).second;
    EXPECT_EQ(hf_model_section(back), hf_model_section(m)) << tag;

    import_hf(tmp.file(tag), tmp.file(tag + "_back.h5"));
    import_hf(tmp.file(tag + "_sharded"), tmp.file(tag + "_back_sharded.h5"));
    import_hf(tmp.file(tag + "_bf16"), tmp.file(tag + "_back_bf16.h5"));
    for (const std::string& name : model_datasets(m)) {
      const std::vector<float> original = read_h5_floats(ck, "/model/" + name);
      EXPECT_EQ(read_h5_floats(tmp.file(tag + "_back.h5"), "/model/" + name), original) << tag << " " << name;
      EXPECT_EQ(read_h5_floats(tmp.file(tag + "_back_sharded.h5"), "/model/" + name), original) << tag << " " << name;
      std::vector<float> rounded = original;
      for (float& x : rounded) x = bf16_round(x);
      EXPECT_EQ(read_h5_floats(tmp.file(tag + "_back_bf16.h5"), "/model/" + name), rounded) << tag << " " << name;
    }
  }
}

// ---- bad input ------------------------------------------------------------------------

// Through the command line: one line, exit != 0, no checkpoint.
TEST(HfLlamaImport, MissingAndMisshapenTensorsAndRopeScalingAreOneLineErrors) {
  TempDir tmp;
  const HfLlama hf(41, false, false);
  int n = 0;
  auto dir_with = [&](auto edit, const std::string& config) {
    const std::string dir = tmp.file("case" + std::to_string(n++));
    hf.write_dir(dir, "F32");
    std::vector<StEntry> e = hf.entries("F32");
    edit(e);
    lay_out(e);
    write_file(dir + "/model.safetensors", serialize(e));
    write_file(dir + "/config.json", config);
    return dir;
  };
  auto named = [](const std::string& name) {
    return [name](const StEntry& e) { return e.name == name; };
  };
  const std::string config = hf.config();
  expect_refused(dir_with([&](auto& e) { std::erase_if(e, named("model.layers.1.self_attn.k_proj.weight")); }, config),
                 "tensor model.layers.1.self_attn.k_proj.weight is missing (LlamaForCausalLM with n_layer 2");
  expect_refused(dir_with([&](auto& e) {
                   auto it = std::find_if(e.begin(), e.end(), named("model.layers.0.self_attn.v_proj.weight"));
                   it->shape = {32, 16};
                 }, config),
                 "tensor model.layers.0.self_attn.v_proj.weight has shape [32, 16], expected [16, 32]");
  expect_refused(dir_with([&](auto& e) { std::erase_if(e, named("lm_head.weight")); }, config),
                 "tensor lm_head.weight is missing");
  expect_refused(dir_with([](auto&) {}, config_with("rope_scaling", R"({"factor": 8.0, "rope_type": "yarn"})", config)),
                 "config.json: rope_scaling: rope_type \"yarn\" is not one pptrain's rotary embedding computes (default, "
                 "linear, llama3)");
  expect_refused(dir_with([&](auto& e) { e.push_back({"model.layers.0.self_attn.q_proj.bias", "F32", {32},
                                                      std::string(128, '\0')}); }, config),
                 "unexpected tensor model.layers.0.self_attn.q_proj.bias");
}

// config.json keys pptrain does not compute, in process (each names the key).
TEST(HfLlamaImport, ConfigKeysOfAnotherModelAreNamed) {
  TempDir tmp;
  fs::create_directories(tmp.file("d"));
  auto config_error = [&](const std::string& key, const std::string& value) {
    write_file(tmp.file("d/config.json"), config_with(key, value, kLlamaConfigJson));
    return error_of([&] { read_hf_config(tmp.file("d")); });
  };
  const std::pair<std::pair<const char*, const char*>, const char*> cases[] = {
      {{"hidden_act", "\"gelu\""}, "hidden_act is \"gelu\", but pptrain's MLP computes SiLU-gated units"},
      {{"attention_bias", "true"}, "attention_bias is true, but pptrain's llama has no attention biases"},
      {{"mlp_bias", "true"}, "mlp_bias is true, but pptrain's Llama-family MLP has no biases"},
      {{"head_dim", "7"}, "the head size 7 is odd or above 512"},
      {{"num_key_value_heads", "3"}, "num_key_value_heads 3 does not divide num_attention_heads 4"},
      {{"num_key_value_heads", "8"}, "num_key_value_heads is 8, expected an integer in [1, 4]"},
      {{"rms_norm_eps", "\"1e-5\""}, "rms_norm_eps is \"1e-5\", expected a number in (0, 1]"},
      {{"rope_theta", "0.5"}, "rope_theta is 0.5, expected a number in (1, 1e+12]"},
      {{"tie_word_embeddings", "1"}, "tie_word_embeddings is 1, expected true or false"},
      {{"intermediate_size", "0"}, "intermediate_size is 0, expected an integer in [1, "},
  };
  for (const auto& [edit, expected] : cases) {
    const std::string error = config_error(edit.first, edit.second);
    EXPECT_NE(error.find(expected), std::string::npos) << edit.first << ": " << error;
    EXPECT_EQ(error.rfind(tmp.file("d/config.json") + ": ", 0), 0u) << error;
  }
  EXPECT_EQ(config_error("hidden_size", "32"), "(no error)");
  // head_dim need not be hidden_size / num_attention_heads (Mistral, Qwen); without it, it is.
  EXPECT_EQ(config_error("hidden_size", "20"), "(no error)");
  EXPECT_EQ(read_hf_config(tmp.file("d")).second.head_dim, 8);
  write_file(tmp.file("d/config.json"), config_with("hidden_size", "30", config_with("head_dim", "null", kLlamaConfigJson)));
  EXPECT_NE(error_of([&] { read_hf_config(tmp.file("d")); })
                .find("hidden_size 30 is not a multiple of num_attention_heads 4 and head_dim is not given"),
            std::string::npos);
}
