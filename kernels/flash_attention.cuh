// Fused causal attention (FlashAttention-2): Ops::flash_attention_forward and
// Ops::flash_attention_backward_input. The T×T score matrix is never stored: the forward
// keeps, per query row, the running max and sum of an online softmax and writes the output
// and lse = log Σ_{j≤i} exp(q_i·k_j / √HD); the backward recomputes the probabilities tile
// by tile as exp(s − lse).
//
// Layouts (as attention_forward): qkv[B,T,3·NH·HD] (per row all queries, then keys, then
// values), out and dout[B,T,NH·HD], lse and delta[B,NH,T] (fp32). T is any length ≥ 1; HD is
// 32, 64 or 128 (anything else fails with one line). Tensors are of storage type T (float or
// bf16); statistics and accumulators are fp32. Pointers must be 16-byte aligned.
#pragma once
#include <cstddef>

#include "launch.cuh"

namespace pptrain::kernels {

// out[B,T,NH·HD] = causal softmax(q kᵀ / √HD) v per head; lse[B,NH,T] (natural log).
template <typename T>
void launch_flash_attention_forward(const LaunchContext& ctx, T* out, float* lse, const T* qkv, int b,
                                    int t, int nh, int hd);

// dqkv[B,T,3·NH·HD] (overwritten) from dout and the forward's qkv, out, lse; delta[B,NH,T] is
// scratch that receives Σ_d dout·out per row.
template <typename T>
void launch_flash_attention_backward_input(const LaunchContext& ctx, T* dqkv, float* delta, const T* dout,
                                           const T* qkv, const T* out, const float* lse, int b, int t,
                                           int nh, int hd);

// Static shared memory of one block of each flash kernel at storage type T and head dim hd
// (bytes; the same for every T, since no tile depends on the sequence length).
template <typename T>
size_t flash_attention_shared_bytes(int hd);

}  // namespace pptrain::kernels
