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

// The importers write new files only: `out_path` must not exist, as anything (a file, a
// directory, a device such as /dev/null, a link, even a dangling one), and its folder must.
// Throws pptrain::Error in one line naming the path and what is there. `what` names the
// command ("import-hf").
void check_new_output(const std::string& out_path, const std::string& what);

// Writes `tensors` of `model` as the new checkpoint `out_path` (check_new_output first; the
// file is built as a sibling out_path.tmp.PID, removed if anything fails, then renamed into
// place without replacing anything that appeared meanwhile; one process). `source` names where the weights came from (the stored config's
// source); `writer` says how ("import-hf DIR"), after "pptrain <version> " in the file's
// writer attribute. Throws pptrain::Error (a non-finite value included).
void write_weights_checkpoint(const std::string& out_path, const ModelConfig& model, const std::string& source,
                              const std::vector<WeightTensor>& tensors, const WeightValuesFn& values,
                              const std::string& writer);

}  // namespace pptrain
