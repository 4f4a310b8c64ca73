// Hugging Face model directories (config.json + safetensors, single or sharded) as pptrain
// checkpoints: `pptrain import-hf DIR OUT.h5`. The architecture comes from config.json
// and its table (hf_arch.h) says which tensor is which; every tensor the model needs must
// be present (a RowStack's every part), F32, BF16 or F16, of the shape config.json implies, and the file may hold
// nothing else but tied copies (which must be equal) and known non-parameter buffers.
// Everything is checked before the checkpoint is written; any problem is one line naming
// the file and the tensor or key. The result is a weights-only checkpoint
// (weights_checkpoint.h): step 0, no optimizer state.
#pragma once
#include <string>

#include "checkpoint/hf_arch.h"

namespace pptrain {

struct HfImportResult {
  const HfArchitecture* arch = nullptr;
  ModelConfig model;
  std::string files;     // what was read: "DIR/model.safetensors" or "DIR/...index.json (3 shards)"
  std::string dtypes;    // the dtypes of the tensors read, e.g. "BF16" or "F32, BF16"
  int64_t parameters = 0;
};

// Reads DIR/config.json and the model's architecture and model section from it. Throws
// pptrain::Error.
std::pair<const HfArchitecture*, ModelConfig> read_hf_config(const std::string& dir);

// The model section a training config needs to continue from an import of `m`, as YAML
// flow text: "{arch: gpt2, n_layer: 12, ...}", with the llama keys for llama.
std::string hf_model_section(const ModelConfig& m);

// Converts the model directory `dir` into the checkpoint `out_path` (written as
// out_path.tmp, then renamed). Throws pptrain::Error.
HfImportResult import_hf(const std::string& dir, const std::string& out_path);

}  // namespace pptrain
