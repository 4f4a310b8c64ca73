// Checkpoints that hold weights only, written by the imports (llm.c, Hugging Face): a
// normal, verified pptrain checkpoint (format version 2) at step 0 with no optimizer
// state, so training resumes from it under any (pp, tp, dp) with zero moments.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/config.h"

namespace pptrain {

struct WeightTensor {
  std::string name;            // pptrain role name, e.g. "h.0.attn.qkv.weight"
  std::vector<int64_t> shape;  // global, 1 or 2 dims
};

// Fills out[numel of tensors[index]] with that tensor's values, row-major.
using WeightValuesFn = std::function<void(int index, float* out)>;

// Writes `tensors` of `model` as the checkpoint `out_path` (written as out_path.tmp, then
// renamed; one process). `source` names where the weights came from (the stored config's
// source); `writer` says how ("import-hf DIR"), after "pptrain <version> " in the file's
// writer attribute. Throws pptrain::Error (a non-finite value included).
void write_weights_checkpoint(const std::string& out_path, const ModelConfig& model, const std::string& source,
                              const std::vector<WeightTensor>& tensors, const WeightValuesFn& values,
                              const std::string& writer);

}  // namespace pptrain
