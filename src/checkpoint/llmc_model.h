// llm.c model files (train_gpt2.c / train_gpt2.py write_model): reading and checking one.
// The file is untrusted: every size from its header is checked in overflow-safe arithmetic
// and the size it implies compared with the file's before anything is allocated.
//
// Layout of the file: a header of 256 int32 — [0] magic 20240326, [1] version (3: fp32
// weights, 5: bf16), [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] Vp (V padded, 50304 for
// GPT-2) — then the 16 tensors back to back, in this order:
//   wte [Vp, C], wpe [maxT, C], ln1w [L, C], ln1b [L, C], qkvw [L, 3C, C], qkvb [L, 3C],
//   attprojw [L, C, C], attprojb [L, C], ln2w [L, C], ln2b [L, C], fcw [L, 4C, C],
//   fcb [L, 4C], fcprojw [L, C, 4C], fcprojb [L, C], lnfw [C], lnfb [C].
// Weights are [out, in] (y = x Wᵀ + b) and QKV is q | k | v along dim 0, heads
// contiguous within each: the conventions pptrain uses, so tensors map one to one
// (wte keeps its first V rows). The result has step 0 and no optimizer state.
#pragma once
#include <string>
#include <vector>

#include "core/config.h"

namespace pptrain {

struct NamedTensor {
  std::string name;            // pptrain role name, e.g. "h.0.attn.qkv.weight"
  std::vector<int64_t> shape;  // global
  std::vector<float> values;   // row-major
};

struct LlmcModel {
  ModelConfig model;           // n_layer, n_head, d_model, seq_len = maxT, vocab_size = V
  int padded_vocab = 0;        // Vp
  int version = 0;             // 3 or 5
  std::vector<NamedTensor> tensors;
};

// Reads and checks an llm.c model file. Throws pptrain::Error naming the file.
LlmcModel read_llmc_model(const std::string& path);

}  // namespace pptrain
