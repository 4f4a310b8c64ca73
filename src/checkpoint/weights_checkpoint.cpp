#include "checkpoint/weights_checkpoint.h"

#include <filesystem>

#include "checkpoint/checkpoint_writer.h"
#include "core/error.h"
#include "core/version.h"

namespace pptrain {

void write_weights_checkpoint(const std::string& out_path, const ModelConfig& model, const std::string& source,
                              const std::vector<WeightTensor>& tensors, const WeightValuesFn& values,
                              const std::string& writer) {
  Config cfg;
  cfg.model = model;
  cfg.source = source;

  // Every tensor whole on this one process: one slab covering it.
  std::vector<ShardedTensor> shards;
  for (const WeightTensor& t : tensors) {
    const int64_t rows = t.shape[0], cols = t.shape.size() > 1 ? t.shape[1] : 1;
    shards.push_back({t.name, t.shape, rows, cols, {Slab{0, 0, 0, 0, rows, cols}}});
  }
  auto download = [&](Section, int i, float* host) { values(i, host); };
  CheckpointMeta meta;
  meta.rng_seed = cfg.training.seed;
  meta.config_yaml = to_yaml(cfg);
  meta.has_optimizer_state = false;
  meta.writer = cat("pptrain ", kVersion, " ", writer);

  const std::string tmp = out_path + ".tmp";
  IoGroup io = IoGroup::single();
  write_checkpoint_file(tmp, shards, download, meta, io);
  std::error_code ec;
  std::filesystem::rename(tmp, out_path, ec);
  if (ec) fail(out_path, ": cannot rename '", tmp, "' into place: ", ec.message());
}

}  // namespace pptrain
