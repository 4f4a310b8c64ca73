// pptrain checkpoints as Hugging Face model directories: `pptrain export-hf CKPT DIR`
// writes DIR/config.json and the weights as safetensors (model.safetensors, or shards
// with model.safetensors.index.json), named and laid out as the architecture's
// save_pretrained writes them (hf_arch.h), so transformers' from_pretrained(DIR) loads
// them. The checkpoint is read and verified like any load (checksums, finite values);
// optimizer state is not exported. DIR is written as DIR.tmp and renamed when complete.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/hf_arch.h"

namespace pptrain {

struct HfExportOptions {
  std::string dtype = "F32";                    // F32 (the masters as they are) or BF16 (rounded)
  uint64_t max_shard_bytes = 5'000'000'000ull;  // transformers' default max_shard_size, 5GB
};

struct HfExportResult {
  const HfArchitecture* arch = nullptr;
  ModelConfig model;
  int64_t step = 0;
  std::vector<std::string> files;  // written into DIR, config.json first
  int64_t parameters = 0;
};

// `dir` must not exist, or be an empty directory. Throws pptrain::Error.
HfExportResult export_hf(const std::string& checkpoint, const std::string& dir, const HfExportOptions& options = {});

}  // namespace pptrain
