// Training FLOPs of the GPT-2 model, in one place for every benchmark that reports a FLOP
// rate or an MFU (bench/bench_model.cpp, bench/cuda/model_flops.cpp and through it the GPU
// training benchmark).
//
//   FLOPs per token = 6·N (N = parameters used in matmuls, the tied LM head included)
//                   + 6·L·T·C (causal attention: QKᵀ and PV over T/2 keys on average,
//                              forward 2·T·C per layer and token, backward twice that)
//
// N counts every parameter but the position embedding (a gather, no matmul); the
// layernorm and bias parameters (13·C per block, < 0.2% of N) are counted with the
// matrices, as bench_model always has.
#pragma once
#include <cstddef>

#include "core/config.h"

namespace pptrain::bench {

inline double training_flops_per_token(double matmul_params, int n_layer, int seq_len, int d_model) {
  return 6.0 * matmul_params + 6.0 * n_layer * double(seq_len) * double(d_model);
}

// Parameter counts of the model that src/model builds on one rank with tp = 1 (the shapes
// of block.cpp, embedding.cpp and head.cpp; tests/test_bench_gpu.cpp checks them against
// a built ParamStore).
struct Gpt2ParamCounts {
  size_t total;   // every parameter
  size_t matmul;  // total minus the position embedding wpe[T,C]
};

inline Gpt2ParamCounts gpt2_param_counts(const ModelConfig& m) {
  const size_t c = size_t(m.d_model);
  // ln_1, ln_2: 2·2C; qkv: 3C·C + 3C; attn proj: C·C + C; fc: 4C·C + 4C; mlp proj: C·4C + C
  const size_t per_block = 12 * c * c + 13 * c;
  const size_t wte = size_t(m.vocab_size) * c;  // tied: the LM head reuses it
  const size_t wpe = size_t(m.seq_len) * c;
  const size_t ln_f = 2 * c;
  const size_t total = size_t(m.n_layer) * per_block + wte + wpe + ln_f;
  return {total, total - wpe};
}

}  // namespace pptrain::bench
