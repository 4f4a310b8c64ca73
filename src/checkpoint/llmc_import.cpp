#include "checkpoint/llmc_import.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "checkpoint/checkpoint_writer.h"
#include "core/error.h"
#include "core/version.h"

namespace pptrain {
namespace {

constexpr int kHeaderInts = 256;
constexpr int kMagic = 20240326;

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};

float bf16_to_float(uint16_t b) {
  uint32_t bits = uint32_t(b) << 16;  // bf16 is the top half of an fp32
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace

LlmcModel read_llmc_model(const std::string& path) {
  std::unique_ptr<FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) fail(path, ": cannot open llm.c model file");
  int32_t header[kHeaderInts];
  if (std::fread(header, sizeof(int32_t), kHeaderInts, f.get()) != size_t(kHeaderInts))
    fail(path, ": shorter than the 1024-byte llm.c header");
  if (header[0] != kMagic) fail(path, ": bad magic ", header[0], " (expected ", kMagic, ", an llm.c GPT-2 model file)");
  LlmcModel m;
  m.version = header[1];
  if (m.version != 3 && m.version != 5)
    fail(path, ": llm.c model version ", m.version, " is not supported (expected 3, fp32, or 5, bf16)");
  const int64_t T = header[2], V = header[3], L = header[4], NH = header[5], C = header[6], Vp = header[7];
  if (T < 1 || V < 2 || L < 1 || NH < 1 || C < 1 || C % NH != 0 || Vp < V)
    fail(path, ": implausible llm.c header (maxT ", T, ", V ", V, ", L ", L, ", NH ", NH, ", C ", C, ", Vp ", Vp, ")");
  m.model.n_layer = int(L);
  m.model.n_head = int(NH);
  m.model.d_model = int(C);
  m.model.seq_len = int(T);
  m.model.vocab_size = int(V);
  m.padded_vocab = int(Vp);

  // The 16 llm.c tensors: name and shape of one layer's slice (L-stacked ones marked).
  struct Part { const char* name; int64_t rows, cols; bool per_layer; };
  const Part parts[] = {{"wte.weight", Vp, C, false},         {"wpe.weight", T, C, false},
                        {"ln_1.weight", C, 1, true},          {"ln_1.bias", C, 1, true},
                        {"attn.qkv.weight", 3 * C, C, true},  {"attn.qkv.bias", 3 * C, 1, true},
                        {"attn.proj.weight", C, C, true},     {"attn.proj.bias", C, 1, true},
                        {"ln_2.weight", C, 1, true},          {"ln_2.bias", C, 1, true},
                        {"mlp.fc.weight", 4 * C, C, true},    {"mlp.fc.bias", 4 * C, 1, true},
                        {"mlp.proj.weight", C, 4 * C, true},  {"mlp.proj.bias", C, 1, true},
                        {"ln_f.weight", C, 1, false},         {"ln_f.bias", C, 1, false}};
  int64_t total = 0;
  for (const Part& p : parts) total += p.rows * p.cols * (p.per_layer ? L : 1);
  const size_t elem = m.version == 3 ? 4 : 2;
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  const uint64_t expected = uint64_t(kHeaderInts) * 4 + uint64_t(total) * elem;
  if (ec || size != expected)
    fail(path, ": ", ec ? uint64_t(0) : uint64_t(size), " bytes, but the header (", L, " layers, C ", C, ", Vp ", Vp, ", maxT ", T,
         ", version ", m.version, ") needs ", expected, " bytes (truncated or not an llm.c model file)");

  std::vector<float> all(total);
  if (m.version == 3) {
    if (std::fread(all.data(), 4, all.size(), f.get()) != all.size()) fail(path, ": read failed");
  } else {
    std::vector<uint16_t> raw(total);
    if (std::fread(raw.data(), 2, raw.size(), f.get()) != raw.size()) fail(path, ": read failed");
    for (int64_t i = 0; i < total; ++i) all[i] = bf16_to_float(raw[i]);
  }

  // Cut the stream into pptrain tensors; per-layer tensors are [L, ...] stacks.
  const float* p = all.data();
  auto take = [&](const std::string& name, int64_t rows, int64_t cols, int64_t keep_rows) {
    NamedTensor t;
    t.name = name;
    t.shape = cols == 1 ? std::vector<int64_t>{keep_rows} : std::vector<int64_t>{keep_rows, cols};
    t.values.assign(p, p + keep_rows * cols);
    p += rows * cols;
    return t;
  };
  std::vector<std::vector<NamedTensor>> layers(L);
  for (const Part& part : parts) {
    if (!part.per_layer) {
      // wte keeps its first V rows: the padding rows Vp - V are not part of the model.
      const int64_t keep = std::string(part.name) == "wte.weight" ? V : part.rows;
      m.tensors.push_back(take(part.name, part.rows, part.cols, keep));
      continue;
    }
    for (int64_t l = 0; l < L; ++l) m.tensors.push_back(take(cat("h.", l, ".", part.name), part.rows, part.cols, part.rows));
  }
  PPTRAIN_CHECK(p == all.data() + total);
  return m;
}

LlmcModel import_llmc(const std::string& llmc_path, const std::string& out_path) {
  LlmcModel m = read_llmc_model(llmc_path);
  Config cfg;
  cfg.model = m.model;
  cfg.source = llmc_path;

  std::vector<ShardedTensor> shards;
  for (const NamedTensor& t : m.tensors) {
    const int64_t rows = t.shape[0], cols = t.shape.size() > 1 ? t.shape[1] : 1;
    shards.push_back({t.name, t.shape, rows, cols, {Slab{0, 0, 0, 0, rows, cols}}});
  }
  auto download = [&](Section, int i, float* host) {
    std::memcpy(host, m.tensors[i].values.data(), m.tensors[i].values.size() * sizeof(float));
  };
  CheckpointMeta meta;
  meta.rng_seed = cfg.training.seed;
  meta.config_yaml = to_yaml(cfg);
  meta.has_optimizer_state = false;
  meta.writer = cat("pptrain ", kVersion, " import-llmc ", std::filesystem::path(llmc_path).filename().string());

  const std::string tmp = out_path + ".tmp";
  IoGroup io = IoGroup::single();
  write_checkpoint_file(tmp, shards, download, meta, io);
  std::error_code ec;
  std::filesystem::rename(tmp, out_path, ec);
  if (ec) fail(out_path, ": cannot rename '", tmp, "' into place: ", ec.message());
  return m;
}

}  // namespace pptrain
