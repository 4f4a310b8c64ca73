// Hugging Face interop's bad input: every damaged safetensors header, missing, extra,
// misshapen or non-finite tensor and unsupported config.json, through the command line and
// in process, is one line naming the file and what was expected, with a non-zero exit and
// no checkpoint; and files laid out by another writer (transformers') read.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "checkpoint/hf_import.h"
#include "checkpoint/safetensors.h"
#include "core/bf16.h"
#include "support/checkpoint_model.h"
#include "support/hf_files.h"
#include "support/hf_gpt2.h"
#include "support/test_util.h"

using namespace pptrain;
using namespace pptrain::testing;
namespace fs = std::filesystem;

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
  // architectures and model_type that disagree: which one was meant is a guess.
  expect_refused(dir_with("", gpt2_config_with("model_type", "\"bert\"")),
                 "architectures names GPT2LMHeadModel but model_type is \"bert\" (expected \"gpt2\"); the two keys "
                 "disagree");
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

// ---- the output is a new file -----------------------------------------------------------

// The importers never replace what is at their output path: a file (left byte for byte), a
// directory, a FIFO (as /dev/null would be: a device turned into a regular file), a link,
// even a dangling one, or a path whose folder is missing; each is one line, a non-zero
// exit, and no OUT.tmp* left behind. A new path then imports.
TEST(HfImport, AnExistingOutputIsNeverReplaced) {
  TempDir tmp;
  const HfGpt2 hf(24, false);
  const std::string dir = tmp.file("model");
  hf.write_dir(dir, "F32", 1, kConfigJson);
  write_file(tmp.file("file.h5"), "the user's own bytes");
  fs::create_directories(tmp.file("folder"));
  ASSERT_EQ(::mkfifo(tmp.file("fifo").c_str(), 0600), 0);
  fs::create_symlink(tmp.file("file.h5"), tmp.file("link.h5"));
  fs::create_symlink(tmp.file("nowhere.h5"), tmp.file("dangling.h5"));
  const std::pair<std::string, std::string> cases[] = {
      {"file.h5", "' exists (a file); the output must be a new file: remove it or give another path"},
      {"folder", "' exists (a directory)"},
      {"fifo", "' exists (a FIFO)"},
      {"link.h5", "' exists (a symbolic link)"},
      {"dangling.h5", "' exists (a symbolic link)"},
      {"missing/out.h5", "the folder of '"}};
  for (const auto& [name, why] : cases) {
    for (const std::string& cmd : {"import-hf " + dir, std::string("import-llmc /nonexistent.bin")}) {
      auto r = run_command("timeout 20 " + pptrain_bin() + " " + cmd + " " + tmp.file(name) + " 2>&1", 60);
      EXPECT_NE(r.exit_code, 0) << cmd << " " << name << "\n" << r.output;
      EXPECT_NE(r.output.find(why), std::string::npos) << cmd << " " << name << "\n" << r.output;
      EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    }
  }
  EXPECT_EQ(read_file(tmp.file("file.h5")), "the user's own bytes");
  EXPECT_TRUE(fs::is_fifo(tmp.file("fifo")));
  EXPECT_TRUE(fs::is_directory(tmp.file("folder")) && fs::is_empty(tmp.file("folder")));
  for (const auto& e : fs::directory_iterator(tmp.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << "left behind: " << e.path();
  auto ok = run_command(pptrain_bin() + " import-hf " + dir + " " + tmp.file("new.h5") + " 2>&1", 60);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_TRUE(fs::is_regular_file(tmp.file("new.h5")));
}
