// ModelDims: the sizes every layer needs, for one microbatch on one tensor-parallel rank.
#pragma once
#include "core/config.h"

namespace pptrain {

// training.recompute: what a block keeps per microbatch between its passes (model/block_slots.h).
enum class Recompute { none, attention, full };
inline const char* recompute_name(Recompute r) {
  return r == Recompute::full ? "full" : r == Recompute::attention ? "attention" : "none";
}

struct ModelDims {
  int n_layer, n_head, d_model, seq_len, vocab_size;
  int batch;          // B: sequences per microbatch
  int tp = 1;         // tensor-parallel degree
  int tp_rank = 0;
  // model.attention: naive keeps the probabilities [B,NHL,T,T] per block for backward;
  // flash and cudnn run the fused ops (the backend picks the kernel) and keep the per-row
  // log-sum-exp [B,NHL,T] instead, so a block's activation memory is linear in T.
  bool fused_attention = false;
  // model.tie_embeddings: the LM head computes with the token embedding wte (GPT-2), or with
  // a matrix of its own, lm_head.weight [V,C] (Llama).
  bool tie_embeddings = true;
  // model.arch: llama (RMSNorm, rotary embedding, grouped-query attention, SwiGLU, no biases,
  // no learned positions); otherwise gpt2.
  bool llama = false;
  int n_kv_head = 0;       // key/value heads (llama; n_head for gpt2)
  int ffn_hidden = 0;      // MLP width F (4C for gpt2)
  float rope_theta = 10000.0f, norm_eps = 1e-6f;
  // training.recompute as the blocks apply it: attention with fused attention is none (the
  // fused ops keep no probabilities to drop).
  Recompute recompute = Recompute::none;
  int head_size = 0;         // model.head_dim (Llama family); 0 = d_model / n_head
  bool qkv_bias = false;     // biases on q, k and v (qwen2)
  bool qk_norm = false;      // RMSNorm of each q and k head (qwen3)
  RopeScaling rope_scaling;  // with rope_theta: the rotary frequencies (core/rotary.h)

  int rows() const { return batch * seq_len; }              // N = B·T
  int head_dim() const { return head_size ? head_size : d_model / n_head; }  // HD
  int local_heads() const { return n_head / tp; }           // NH on this rank
  int local_channels() const { return local_heads() * head_dim(); }  // attention width on this rank (CL)
  int local_hidden() const { return ffn_hidden / tp; }      // MLP width on this rank (HL)
  int local_kv_heads() const { return n_kv_head / tp; }     // key/value heads on this rank (KVL)
  // Columns of this rank's fused q, k, v projection: (NHL + 2·KVL)·HD (3·CL without GQA).
  int local_qkv() const { return (local_heads() + 2 * local_kv_heads()) * head_dim(); }
  int padded_vocab() const { return (vocab_size + tp - 1) / tp * tp; }  // Vp: multiple of tp
  int local_vocab() const { return padded_vocab() / tp; }   // VL
  int vocab_offset() const { return tp_rank * local_vocab(); }  // v0
  // Real (non-padding) columns of this rank's vocabulary shard.
  int valid_vocab() const {
    int v = vocab_size - vocab_offset();
    return v < 0 ? 0 : (v > local_vocab() ? local_vocab() : v);
  }

  static ModelDims from(const ModelConfig& m, int batch, int tp, int tp_rank) {
    const bool fused = m.attention == "flash" || m.attention == "cudnn";  // "" (unresolved) is naive
    return {m.n_layer,    m.n_head,      m.d_model,  m.seq_len,           m.vocab_size,
            batch,        tp,            tp_rank,    fused,               m.tie_embeddings,
            m.llama(),    m.kv_heads(),  m.mlp_hidden(), float(m.rope_theta), float(m.norm_eps),
            Recompute::none, m.head_dim, m.qkv_bias(), m.qk_norm(), m.rope_scaling};
  }
  // The dims of stage `stage` of a training job: micro_batch_size sequences, the stage's
  // training.recompute applied (a list gives each stage its own; `auto` resolved by the
  // planner beforehand is a list, unresolved it is none).
  static ModelDims from(const Config& cfg, int tp, int tp_rank, int stage) {
    ModelDims d = from(cfg.model, cfg.training.micro_batch_size, tp, tp_rank);
    d.recompute = recompute_of(cfg.training.recompute.of_stage(stage), d.fused_attention);
    return d;
  }
  // The name of stage `stage`'s mode as its blocks apply it.
  static std::string recompute_name_of(const Config& cfg, int stage) {
    return recompute_name(from(cfg, 1, 0, stage).recompute);
  }
  // Every stage's mode, stage order: "[full, full, none, none]" (the start-up line, --dry-run).
  static std::string recompute_per_stage_text(const Config& cfg) {
    std::string out = "[";
    for (int s = 0; s < cfg.total_stages(); ++s) out += (s ? ", " : "") + recompute_name_of(cfg, s);
    return out + "]";
  }
  static Recompute recompute_of(const std::string& key, bool fused_attention) {
    if (key == "full") return Recompute::full;
    return key == "attention" && !fused_attention ? Recompute::attention : Recompute::none;
  }
};

}  // namespace pptrain
