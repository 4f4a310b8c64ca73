// Causal self-attention around batched GEMMs. The cuda backend computes Ops::attention_*
// as (GEMMs are cuBLAS strided-batched over the B·NH heads):
//   forward:  q, k, v = permute(qkv)                     [B,T,3,NH,HD] -> 3 × [B,NH,T,HD]
//             scores = q kᵀ                               [B,NH,T,T]       (GEMM)
//             probs = causal_softmax(scores / √HD)        [B,NH,T,T]       (kept for backward)
//             y = probs v                                  [B,NH,T,HD]      (GEMM)
//             out = unpermute(y)                           [B,T,NH,HD]
//   backward: dy = unpermute_backward(dout)                [B,NH,T,HD]
//             dprobs = dy vᵀ, dv = probsᵀ dy               (GEMMs)
//             dscores = softmax_backward(dprobs, probs) / √HD
//             dq = dscores k, dk = dscoresᵀ q              (GEMMs)
//             dqkv = permute_backward(dq, dk, dv)          [B,T,3,NH,HD] (overwrites)
// Tensors are of storage type T (float or bf16); softmax statistics are fp32.
#pragma once
#include "launch.cuh"

namespace pptrain::kernels {

// q, k, v[B,NH,T,HD] from qkv[B,T,3·NH·HD] (per row: all queries, then keys, then values).
template <typename T>
void launch_attention_permute(const LaunchContext& ctx, T* q, T* k, T* v, const T* qkv, int b, int t,
                              int nh, int hd);
// dqkv[B,T,3·NH·HD] from dq, dk, dv[B,NH,T,HD] (the transpose of the permute).
template <typename T>
void launch_attention_permute_backward(const LaunchContext& ctx, T* dqkv, const T* dq, const T* dk,
                                       const T* dv, int b, int t, int nh, int hd);
// out[B,T,NH·HD] from y[B,NH,T,HD].
template <typename T>
void launch_attention_unpermute(const LaunchContext& ctx, T* out, const T* y, int b, int t, int nh,
                                int hd);
// dy[B,NH,T,HD] from dout[B,T,NH·HD].
template <typename T>
void launch_attention_unpermute_backward(const LaunchContext& ctx, T* dy, const T* dout, int b,
                                         int t, int nh, int hd);

// probs[BH,T,T] = softmax over j ≤ i of scale · scores[BH,i,j]; entries j > i are written as 0.
// probs may alias scores.
template <typename T>
void launch_attention_softmax_forward(const LaunchContext& ctx, T* probs, const T* scores, int bh,
                                      int t, float scale);
// dscores[BH,i,j] = scale · p_ij (dp_ij - Σ_k p_ik dp_ik) for j ≤ i, 0 above the diagonal.
// dscores may alias dprobs.
template <typename T>
void launch_attention_softmax_backward(const LaunchContext& ctx, T* dscores, const T* dprobs,
                                       const T* probs, int bh, int t, float scale);

}  // namespace pptrain::kernels
