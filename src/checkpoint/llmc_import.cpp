#include "checkpoint/llmc_import.h"

#include <cstring>
#include <filesystem>

#include "checkpoint/checkpoint_writer.h"
#include "core/error.h"
#include "core/version.h"

namespace pptrain {

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
