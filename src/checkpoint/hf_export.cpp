#include "checkpoint/hf_export.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"

namespace pptrain {
namespace {

namespace fs = std::filesystem;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.flush();
  if (!out) fail(path, ": write failed (", std::strerror(errno), ")");
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// DIR without trailing slashes, so DIR.tmp is its sibling.
std::string without_trailing_slash(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

}  // namespace

HfExportResult export_hf(const std::string& checkpoint, const std::string& dir_in, const HfExportOptions& options) {
  if (options.dtype != "F32" && options.dtype != "BF16")
    fail("export-hf: dtype ", options.dtype, " is not one export writes (expected F32 or BF16)");
  const std::string dir = without_trailing_slash(dir_in), tmp = dir + ".tmp";
  std::error_code ec;
  if (fs::exists(dir, ec) && !(fs::is_directory(dir, ec) && fs::is_empty(dir, ec)))
    fail(dir, ": exists and is not an empty directory (export-hf writes a new model directory)");
  if (fs::exists(tmp, ec) || fs::is_symlink(tmp, ec))
    fail(tmp, ": exists (left by an interrupted export-hf?); remove it first");

  // The checkpoint, read and verified as a load into its own model.
  IoGroup io = IoGroup::single();
  const CheckpointMeta meta = read_checkpoint_meta(checkpoint, io);
  const Config cfg = parse_config(meta.config_yaml, cat(checkpoint, " (attribute 'config')"));
  HfExportResult result;
  result.arch = &hf_architecture_of_arch(cfg.model.arch, checkpoint);
  result.model = cfg.model;
  result.step = meta.step;
  const std::vector<HfTensor> tensors = result.arch->tensors(cfg.model);
  std::vector<ShardedTensor> shards;
  for (const HfTensor& t : tensors) {
    const int64_t rows = t.shape[0], cols = t.shape.size() > 1 ? t.shape[1] : 1;
    shards.push_back({t.name, t.shape, rows, cols, {Slab{0, 0, 0, 0, rows, cols}}});
    result.parameters += rows * cols;
  }
  std::vector<std::vector<float>> values(tensors.size());
  read_checkpoint_file(checkpoint, shards, [&](Section, int i, const float* host) {
    values[size_t(i)].assign(host, host + shards[size_t(i)].local_numel());
  }, cfg, false, io);

  // The HF files, into DIR.tmp: one tensor per HF part (a RowStack's parts each), taken
  // from pptrain's tensors[source.tensor] at element source.offset.
  struct Source {
    size_t tensor;
    int64_t offset;
  };
  std::vector<StTensorSpec> specs;
  std::vector<Source> sources;
  for (size_t i = 0; i < tensors.size(); ++i) {
    int64_t offset = 0;
    for (const HfPart& part : tensors[i].hf_parts()) {
      specs.push_back({part.hf_name, options.dtype, part.hf_shape});
      sources.push_back({i, offset});
      offset += numel(part.hf_shape);
    }
  }
  auto hf_values = [&](size_t s, float* out) {
    const HfTensor& t = tensors[sources[s].tensor];
    const std::vector<float>& v = values[sources[s].tensor];
    if (t.layout == HfLayout::Conv1D) {
      const int64_t rows = t.shape[0], cols = t.shape[1];  // pptrain's [out, in]
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = v[size_t(r * cols + c)];
      return;
    }
    // Same, RowStack: the part's elements as they are.
    const float* from = v.data() + sources[s].offset;
    std::copy(from, from + numel(specs[s].shape), out);
  };
  try {
    fs::create_directories(tmp);
    write_text((fs::path(tmp) / "config.json").string(),
               result.arch->write_config(cfg.model, options.dtype == "F32" ? "float32" : "bfloat16"));
    result.files = {"config.json"};
    for (const std::string& f :
         write_safetensors_model(tmp, specs, hf_values, options.max_shard_bytes, {{"format", "pt"}}))
      result.files.push_back(f);
    fs::rename(tmp, dir);  // replaces an empty directory
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    fail(dir, ": ", e.code().message(), " (", e.path1().string(), ")");
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  return result;
}

}  // namespace pptrain
