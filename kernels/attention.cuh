// Causal self-attention around batched GEMMs, grouped-query (GQA) or multi-head (NKV = NH).
// The cuda backend computes Ops::attention_* and Ops::gqa_attention_* as (GEMMs are cuBLAS
// strided-batched over the B·NKV key/value heads; G = NH/NKV query heads share one):
//   forward:  q, k, v = permute(qkv)          [B,T,(NH+2·NKV)·HD] -> [B,NH,T,HD], 2 × [B,NKV,T,HD]
//             scores = q kᵀ                    [B,NH,T,T]       (GEMM)
//             probs = causal_softmax(scores / √HD)  [B,NH,T,T]  (kept for backward)
//             y = probs v                      [B,NH,T,HD]      (GEMM)
//             out = unpermute(y)               [B,T,NH,HD]
//   backward: dy = unpermute_backward(dout)    [B,NH,T,HD]
//             dprobs = dy vᵀ, dv = probsᵀ dy   (GEMMs)
//             dscores = softmax_backward(dprobs, probs) / √HD
//             dq = dscores k, dk = dscoresᵀ q  (GEMMs)
//             dqkv = permute_backward(dq, dk, dv)  [B,T,(NH+2·NKV)·HD] (overwrites)
// The G query heads of a group are adjacent in [B,NH,T,HD], so their q (and y, dy, dq, and
// their scores) form one [G·T, HD] (or [G·T, T]) matrix: each GEMM is one strided batch over
// the B·NKV groups with G·T rows, and dv, dk = (a group's [G·T, T] matrix)ᵀ · [G·T, HD] sum
// over the group's query heads inside the GEMM's k loop (fp32, deterministic).
// Tensors are of storage type T (float or bf16); softmax statistics are fp32.
#pragma once
#include "launch.cuh"

namespace pptrain::kernels {

// q[B,NH,T,HD], k and v[B,NKV,T,HD] from qkv[B,T,(NH + 2·NKV)·HD] (per row: the NH query
// heads, then the NKV key heads, then the NKV value heads).
template <typename T>
void launch_attention_permute(const LaunchContext& ctx, T* q, T* k, T* v, const T* qkv, int b, int t,
                              int nh, int nkv, int hd);
// dqkv[B,T,(NH + 2·NKV)·HD] from dq[B,NH,T,HD], dk and dv[B,NKV,T,HD] (the transpose of the
// permute).
template <typename T>
void launch_attention_permute_backward(const LaunchContext& ctx, T* dqkv, const T* dq, const T* dk,
                                       const T* dv, int b, int t, int nh, int nkv, int hd);

// Multi-head attention (NKV = NH): qkv[B,T,3·NH·HD] and q, k, v[B,NH,T,HD].
template <typename T>
void launch_attention_permute(const LaunchContext& ctx, T* q, T* k, T* v, const T* qkv, int b, int t,
                              int nh, int hd) {
  launch_attention_permute(ctx, q, k, v, qkv, b, t, nh, nh, hd);
}
template <typename T>
void launch_attention_permute_backward(const LaunchContext& ctx, T* dqkv, const T* dq, const T* dk,
                                       const T* dv, int b, int t, int nh, int hd) {
  launch_attention_permute_backward(ctx, dqkv, dq, dk, dv, b, t, nh, nh, hd);
}
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
