// Training FLOPs of the models src/model builds (GPT-2 and the Llama family), in one place
// for every benchmark that reports a FLOP rate or an MFU (bench/bench_model.cpp,
// bench/cuda/model_flops.cpp and through it the GPU benchmarks, bench/perf_model).
//
//   FLOPs per token = 6·N (N = parameters used in matmuls, a tied LM head counted once)
//                   + 6·L·T·A (causal attention, A = n_head·head_dim (= C for GPT-2): QKᵀ
//                              and PV over T/2 keys on average, forward 2·T·A per layer
//                              and token, backward twice that)
//
// N counts every parameter but GPT-2's position embedding (a gather, no matmul); the norm
// and bias parameters (13·C per GPT-2 block, 2·C per Llama block: < 0.2% of N) are counted
// with the matrices, as bench_model always has.
#pragma once
#include <cstddef>

#include "core/config.h"

namespace pptrain::bench {

inline double training_flops_per_token(double matmul_params, int n_layer, int seq_len, int attention_width) {
  return 6.0 * matmul_params + 6.0 * n_layer * double(seq_len) * double(attention_width);
}

// A = n_head · head_dim: the width of the attention products (d_model unless a Llama-family
// config sets head_dim otherwise).
inline int attention_width(const ModelConfig& m) { return m.n_head * m.attention_head_dim(); }

// Parameter counts of the model that src/model builds on one rank with tp = 1 (the shapes
// of block.cpp, llama_block.cpp, embedding.cpp and head.cpp; tests/test_bench_gpu.cpp checks
// them against a built ParamStore).
struct ModelParamCounts {
  size_t total;   // every parameter
  size_t matmul;  // total minus GPT-2's position embedding wpe[T,C]
};

inline ModelParamCounts model_param_counts(const ModelConfig& m) {
  const size_t c = size_t(m.d_model), v = size_t(m.vocab_size), l = size_t(m.n_layer);
  if (m.llama()) {
    const size_t hd = size_t(m.attention_head_dim()), nh = size_t(m.n_head), kv = size_t(m.kv_heads());
    const size_t f = size_t(m.mlp_hidden()), q = (nh + 2 * kv) * hd;
    // attention_norm, ffn_norm C each; qkv C·Q (+ Q biases, qwen2); o_proj NH·HD·C;
    // gate, up C·F each; down F·C; q_norm, k_norm HD each (qwen3)
    const size_t per_block = 2 * c + c * q + (m.qkv_bias() ? q : 0) + nh * hd * c + 3 * c * f +
                             (m.qk_norm() ? 2 * hd : 0);
    // embedding V·C; final norm C; an untied LM head V·C
    const size_t total = l * per_block + v * c + c + (m.tie_embeddings ? 0 : v * c);
    return {total, total};
  }
  // ln_1, ln_2: 2·2C; qkv: 3C·C + 3C; attn proj: C·C + C; fc: 4C·C + 4C; mlp proj: C·4C + C
  const size_t per_block = 12 * c * c + 13 * c;
  const size_t wte = v * c;  // tied: the LM head reuses it
  const size_t lm_head = m.tie_embeddings ? 0 : v * c;  // untied: a matrix of its own
  const size_t wpe = size_t(m.seq_len) * c;
  const size_t ln_f = 2 * c;
  const size_t total = l * per_block + wte + lm_head + wpe + ln_f;
  return {total, total - wpe};
}

// FLOPs per token of `m` (its vocabulary as given: pad it for tp first).
inline double model_flops_per_token(const ModelConfig& m) {
  return training_flops_per_token(double(model_param_counts(m).matmul), m.n_layer, m.seq_len, attention_width(m));
}

}  // namespace pptrain::bench
