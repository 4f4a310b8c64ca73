// Transformer block of the Llama family (Hugging Face LlamaDecoderLayer; Mistral's, Qwen2's
// and Qwen3's are the same with another head width, for Qwen2 biases on q, k and v, for Qwen3
// an RMSNorm of each query and key head between the projection and the rotary embedding:
// q_h <- rmsnorm(q_h) · q_norm, k_h <- rmsnorm(k_h) · k_norm), pre-norm:
//   x2 = x + proj(attention(rope(qkv(rmsnorm_1(x)))))      grouped-query, causal, scale 1/√HD
//   y  = x2 + down(silu(gate(rmsnorm_2(x2))) ∘ up(rmsnorm_2(x2)))
// Parameters (h.<i>.…, the GPT-2 block's names where the role is the same):
//   ln_1.weight, ln_2.weight [C]                         RMSNorm gains, replicated
//   attn.qkv.weight [(NH + 2·NKV)·HD, C]                 q, k, v stacked (Hugging Face's
//                                                        q_proj, k_proj, v_proj), column-parallel
//                                                        by heads: each section split over tp
//   attn.qkv.bias [(NH + 2·NKV)·HD]                      qwen2 only: their biases, sliced alike
//   attn.q_norm.weight, attn.k_norm.weight [HD]          qwen3 only: the per-head RMSNorm gains,
//                                                        replicated; each tp rank sums its own
//                                                        heads' gradient, W all-reduces the two
//                                                        (2·HD floats) over tp
//   attn.proj.weight [C, NH·HD]                          o_proj, row-parallel (HD = model.head_dim,
//                                                        d_model / n_head unless set)
//   mlp.gate.weight, mlp.up.weight [F, C]                column-parallel
//   mlp.down.weight [C, F]                               row-parallel
// Tensor parallel (Megatron) as the GPT-2 block: the row-parallel outputs are all-reduced in
// F, the column-parallel layers' input gradients in I; W does no communication. The rotary
// embedding turns q and k in place after the projection (the projection's W reads its input
// and dqkv, never qkv), and its transpose turns dqkv back in I.
#pragma once
#include "backend/buffer.h"
#include "core/communicator.h"
#include "core/faults.h"
#include "core/rotary.h"
#include "model/block_slots.h"
#include "model/dims.h"
#include "model/param.h"

namespace pptrain {

// The specs of block `i`'s parameters (the names above), for checkpoints and tests.
ParamSpec llama_qkv_spec(const ModelDims& d, int i);
ParamSpec llama_qkv_bias_spec(const ModelDims& d, int i);

// The Llama block's buffers by part (model/layer.h), each part with the list of its buffers
// and their element counts (the qwen3 head norms' only with dims.qk_norm). N = B·T,
// C = d_model, CL = NHL·HD, QL = (NHL + 2·KVL)·HD, HL = F/tp, NHL = NH/tp.
template <typename T>
struct LlamaBlockBuffers {
  struct Forward {                 // read by I and W
    Buffer<T> ln1;                 // [N,C]
    Buffer<float> ln1_rstd;        // [N] (fp32 in either precision)
    Buffer<T> q_pre, k_pre;        // [N·NHL,HD], [N·KVL,HD] qwen3: the q and k heads before their norm
    Buffer<float> q_rstd, k_rstd;  // [N·NHL], [N·KVL]   qwen3
    Buffer<T> attn;                // [N,CL]  attention output before proj
    Buffer<T> x2;                  // [N,C]   residual after attention
    Buffer<T> ln2;                 // [N,C]
    Buffer<float> ln2_rstd;        // [N]
    Buffer<T> act;                 // [N,HL]  silu(gate) ∘ up, down's input
    void list(const ModelDims& d, SlotBufferVisitor& visit);
  };
  struct Gradients {               // kept by I for W
    Buffer<T> dgate, dup;          // [N,HL], [N,HL]
    Buffer<T> dln2;                // [N,C]   gradient at ln_2's output (all-reduced)
    Buffer<T> dx2;                 // [N,C]   gradient at x2 = proj's output gradient
    Buffer<T> dqkv;                // [N,QL]  at the projection's output (rotary undone)
    Buffer<T> dq_norm, dk_norm;    // [N·NHL,HD], [N·KVL,HD] qwen3: at the head norms' outputs
    Buffer<T> dln1;                // [N,C]
    void list(const ModelDims& d, SlotBufferVisitor& visit);
  };
  struct Transient {               // read by I only
    Buffer<T> qkv;                 // [N,QL]  q and k after the rotary embedding
    Buffer<T> gate, up;            // [N,HL], [N,HL]
    Buffer<T> dact;                // [N,HL]
    Buffer<T> dattn;               // [N,CL]
    Buffer<T> q_tmp, k_tmp;        // [N·NHL,HD], [N·KVL,HD] qwen3: normed heads (F), their dgrad (I)
    void list(const ModelDims& d, SlotBufferVisitor& visit);
  };
};

// Slots, scratch and recomputation (dims.recompute) as model/block_slots.h does them for
// every block; I's recompute re-runs the forward up to the SwiGLU product (the down
// projection's output is the stage's already).
template <typename T>
class LlamaBlock final : public SlottedBlock<T, LlamaBlockBuffers<T>> {
 public:
  // `faults`: the planted faults acting on this rank (skip_recompute, which SlottedBlock
  // handles; tests only). `share_scratch_with`: as SlottedBlock's.
  LlamaBlock(ParamStore& params, const ModelDims& dims, int layer_index, Communicator& tp,
             const Faults& faults = {}, const LlamaBlock* share_scratch_with = nullptr);
  std::vector<const Param*> linear_weights(bool dgrad) const override {
    if (dgrad) return {&down_w_, &gate_w_, &up_w_, &proj_w_, &qkv_w_};  // dx from gate's, then up's added
    return {&qkv_w_, &proj_w_, &gate_w_, &up_w_, &down_w_};
  }

 private:
  using Base = SlottedBlock<T, LlamaBlockBuffers<T>>;
  using typename Base::Forward, typename Base::Gradients, typename Base::Slot, typename Base::View;
  using Base::ops_, Base::dims_, Base::tp_;

  void tp_sum(T* x, size_t n);
  // y null: stops before the down projection (the recompute of I).
  void run_forward(const View& v, const T* x, T* y) override;
  // Grouped-query attention as configured (dims_.fused_attention): attn from qkv, and back.
  void attention_forward(const View& v) override;
  void attention_backward_input(const View& v, const T* dattn);
  // qwen3: the per-head norms of q and k in place on v.t.qkv (F), their dgrad in place on
  // v.g.dqkv (I), their wgrad (W).
  void qk_norm_forward(const View& v);
  void qk_norm_backward_input(const View& v);
  void qk_norm_backward_weight(const Forward& f, const Gradients& g);
  void run_backward_input(const View& v, const T* x, const T* dy, T* dx) override;
  void run_backward_weight(const Slot& s) override;

  Param &ln1_w_, &qkv_w_;
  Param* qkv_b_;                    // qwen2's q, k, v biases; null for llama and mistral
  Param *q_norm_, *k_norm_;         // qwen3's per-head norm gains; null otherwise
  Param &proj_w_, &ln2_w_, &gate_w_, &up_w_, &down_w_;
  RotaryFrequencies rope_;          // model.rope_theta and rope_scaling (core/rotary.h)
  Buffer<float> norm_grads_;        // [2·HD] qwen3 under tp: one microbatch's q_norm, k_norm gradients
};

}  // namespace pptrain
