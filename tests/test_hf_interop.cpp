// Hugging Face interop (`pptrain import-hf`, `pptrain export-hf`) with GPT-2
// (LlamaForCausalLM: tests/test_hf_llama.cpp): a tiny GPT2LMHeadModel the test writes
// itself in the safetensors layout (tests/support/hf_gpt2.h: its own serializer, HF names
// and Conv1D [in, out] weights; fp32 and bf16, one file and shards with an index) imports
// to the loss of the same weights set in memory and of an independent double-precision
// forward written from HF's layout; export -> import gives back every tensor bitwise.
// Damaged and inconsistent files: tests/test_hf_interop_errors.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "checkpoint/checkpoint_manager.h"
#include "checkpoint/hf_export.h"
#include "checkpoint/hf_import.h"
#include "checkpoint/safetensors.h"
#include "core/bf16.h"
#include "support/checkpoint_model.h"
#include "support/checkpoint_util.h"
#include "support/hf_files.h"
#include "support/hf_gpt2.h"
#include "support/test_util.h"

using namespace pptrain;
using namespace pptrain::testing;
namespace fs = std::filesystem;

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
