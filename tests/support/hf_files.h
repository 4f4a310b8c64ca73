// Hugging Face model directories the interop tests write themselves: their own safetensors
// serializer (independent of checkpoint/safetensors.cpp, which the tests check) and a model's
// weights under HF's names, written as config.json plus model.safetensors, or as shards
// with model.safetensors.index.json, in F32 or BF16; and the checks the GPT-2 and Llama
// tests share (the loss of an import, a refused import).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/bf16.h"
#include "support/checkpoint_model.h"
#include "support/checkpoint_util.h"
#include "support/test_util.h"

namespace pptrain::testing {

struct StEntry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string data;             // raw little-endian bytes
  uint64_t begin = 0, end = 0;  // data_offsets, as written into the header
};

// Offsets back to back, in order.
inline void lay_out(std::vector<StEntry>& entries) {
  uint64_t at = 0;
  for (StEntry& e : entries) {
    e.begin = at;
    e.end = at += e.data.size();
  }
}

inline std::string header_of(const std::vector<StEntry>& entries) {
  std::string h = R"({"__metadata__":{"format":"pt"})";
  for (const StEntry& e : entries) {
    std::string dims;
    for (int64_t d : e.shape) {
      if (!dims.empty()) dims += ',';
      dims += std::to_string(d);
    }
    h += ",\"" + e.name + "\":{\"dtype\":\"" + e.dtype + "\",\"shape\":[" + dims + "],\"data_offsets\":[" +
         std::to_string(e.begin) + "," + std::to_string(e.end) + "]}";
  }
  return h + "}";
}

// 8-byte little-endian length, header, data.
inline std::string file_bytes(const std::string& header, const std::string& data, uint64_t length = UINT64_MAX) {
  if (length == UINT64_MAX) length = header.size();
  return std::string(reinterpret_cast<const char*>(&length), 8) + header + data;
}

inline std::string serialize(const std::vector<StEntry>& entries) {
  std::string data;
  for (const StEntry& e : entries) data += e.data;
  return file_bytes(header_of(entries), data);
}

inline float bf16_round(float x) { return bfloat16::from_float(x).to_float(); }

// A model's weights in HF's names and layout, in the order a file lists them.
struct HfWeights {
  std::vector<std::pair<std::string, std::vector<int64_t>>> order;  // HF names, HF shapes
  std::map<std::string, std::vector<float>> w;                      // by HF name

  // Random N(0, 0.3) values, norm gains (is_gain) around 1; with `bf16` already rounded to
  // bf16, so a BF16 file holds them exactly.
  template <typename IsGain>
  void randomise(uint32_t seed, bool bf16, IsGain is_gain) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> noise(0.0f, 0.3f);
    for (const auto& [name, shape] : order) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      std::vector<float>& v = w[name];
      v.clear();
      for (int64_t i = 0; i < n; ++i) v.push_back((is_gain(name) ? 1.0f : 0.0f) + noise(gen));
      if (bf16)
        for (float& x : v) x = bf16_round(x);
    }
  }

  std::vector<StEntry> entries(const std::string& dtype) const {
    std::vector<StEntry> out;
    for (const auto& [name, shape] : order) {
      std::string bytes;
      for (float x : w.at(name)) {
        uint32_t bits;
        std::memcpy(&bits, &x, 4);
        if (dtype == "BF16") {
          const uint16_t top = uint16_t(bits >> 16);  // exact: the values are bf16 already
          bytes.append(reinterpret_cast<const char*>(&top), 2);
        } else {
          bytes.append(reinterpret_cast<const char*>(&bits), 4);
        }
      }
      out.push_back({name, dtype, shape, bytes});
    }
    lay_out(out);
    return out;
  }

  // DIR/config.json and the weights, in one file or `shards` files with an index.
  void write_dir(const std::string& dir, const std::string& dtype, int shards, const std::string& config) const {
    std::filesystem::create_directories(dir);
    write_file(dir + "/config.json", config);
    std::vector<StEntry> all = entries(dtype);
    if (shards == 1) {
      write_file(dir + "/model.safetensors", serialize(all));
      return;
    }
    std::string weight_map;
    const size_t per = (all.size() + shards - 1) / shards;
    for (int s = 0; s < shards; ++s) {
      std::vector<StEntry> part(all.begin() + std::min(all.size(), s * per),
                                all.begin() + std::min(all.size(), (s + 1) * per));
      lay_out(part);
      const std::string file =
          "model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(shards) + ".safetensors";
      write_file(dir + "/" + file, serialize(part));
      for (const StEntry& e : part) {
        if (!weight_map.empty()) weight_map += ',';
        weight_map += "\"" + e.name + "\":\"" + file + "\"";
      }
    }
    write_file(dir + "/model.safetensors.index.json",
               R"({"metadata":{"total_size":0},"weight_map":{)" + weight_map + "}}");
  }
};

// A key of the JSON text `c` with another value (the key followed by ": ", its value ending
// at the next comma or newline).
inline std::string config_with(const std::string& key, const std::string& value, std::string c) {
  const size_t at = c.find("\"" + key + "\": ") + key.size() + 4;
  const size_t end = c.find_first_of(",\n", at);
  return c.replace(at, end - at, value);
}

// The imported checkpoint and the in-memory weights give the same loss, bitwise, and
// both the reference's to double-precision rounding. HfModel has the ModelConfig `m`,
// set_into(ParamStore&) (the weights into a pptrain model) and reference_loss(tokens,
// targets) (HF's forward, in double).
template <typename HfModel>
void expect_same_loss(const HfModel& hf, const std::string& checkpoint, const std::string& what) {
  Model imported(hf.m, 1), in_memory(hf.m, 2);
  load_weights(imported, hf.m, checkpoint);
  hf.set_into(*in_memory.params);
  for (uint32_t seed : {1u, 2u}) {
    std::mt19937 gen(seed);
    std::vector<int32_t> tokens(hf.m.seq_len), targets(hf.m.seq_len);
    for (int t = 0; t < hf.m.seq_len; ++t)
      tokens[t] = int32_t(gen() % hf.m.vocab_size), targets[t] = int32_t(gen() % hf.m.vocab_size);
    const double a = imported.loss(tokens, targets), b = in_memory.loss(tokens, targets);
    const double ref = hf.reference_loss(tokens, targets);
    EXPECT_EQ(a, b) << what << ", seed " << seed;
    EXPECT_NEAR(a, ref, 1e-5 * ref) << what << ", seed " << seed;
  }
}

// The parameters of model `m`: the datasets of its checkpoints' /model group.
inline std::vector<std::string> model_datasets(const ModelConfig& m) {
  Model model(m, 1);
  std::vector<std::string> names;
  for (const auto& [name, p] : model.params->all()) names.push_back(name);
  return names;
}

// `pptrain import-hf DIR OUT` fails with one line (an error containing `expected`), a
// non-zero exit, and writes nothing.
inline void expect_refused(const std::string& dir, const std::string& expected) {
  const std::string out = dir + "/../refused.h5";
  CommandResult r = run_command("timeout 20 " + pptrain_bin() + " import-hf " + dir + " " + out, 60);
  EXPECT_TRUE(r.exit_code != 0 && r.exit_code != 124) << r.exit_code << r.output;
  EXPECT_EQ(count_occurrences(r.output, "\n"), 1) << r.output;
  EXPECT_EQ(r.output.rfind("error: ", 0), 0u) << r.output;
  EXPECT_NE(r.output.find(expected), std::string::npos) << "expected '" << expected << "' in: " << r.output;
  EXPECT_FALSE(std::filesystem::exists(out) || std::filesystem::exists(out + ".tmp")) << r.output;
}

}  // namespace pptrain::testing
