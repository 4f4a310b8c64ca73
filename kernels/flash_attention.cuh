// Fused causal attention (FlashAttention-2): Ops::flash_attention_forward and
// Ops::flash_attention_backward_input. The T×T score matrix is never stored: the forward
// keeps, per query row, the running max and sum of an online softmax and writes the output
// and lse = log Σ_{j≤i} exp(q_i·k_j / √HD); the backward recomputes the probabilities tile
// by tile as exp(s − lse).
//
// Grouped-query (Ops::gqa_flash_attention_*): NKV key/value heads, NKV dividing NH, query
// head h attending with key/value head h / (NH/NKV); NKV = NH is multi-head attention.
// Layouts (as gqa_attention_forward): qkv[B,T,(NH + 2·NKV)·HD] (per row the NH query heads,
// then the NKV key heads, then the NKV value heads), out and dout[B,T,NH·HD], lse and
// delta[B,NH,T] (fp32). T is any length ≥ 1; HD is 32, 64 or 128 (anything else fails with
// one line). Tensors are of storage type T (float or bf16); statistics and accumulators are
// fp32. Pointers must be 16-byte aligned.
#pragma once
#include <cstddef>

#include "launch.cuh"

namespace pptrain::kernels {

// out[B,T,NH·HD] = causal softmax(q kᵀ / √HD) v per query head; lse[B,NH,T] (natural log).
template <typename T>
void launch_flash_attention_forward(const LaunchContext& ctx, T* out, float* lse, const T* qkv, int b,
                                    int t, int nh, int nkv, int hd);

// dqkv[B,T,(NH + 2·NKV)·HD] (overwritten) from dout and the forward's qkv, out, lse; the key
// and value gradients sum over each group's query heads. delta[B,NH,T] is scratch that
// receives Σ_d dout·out per row.
template <typename T>
void launch_flash_attention_backward_input(const LaunchContext& ctx, T* dqkv, float* delta, const T* dout,
                                           const T* qkv, const T* out, const float* lse, int b, int t,
                                           int nh, int nkv, int hd);

// Multi-head attention (NKV = NH): qkv[B,T,3·NH·HD].
template <typename T>
void launch_flash_attention_forward(const LaunchContext& ctx, T* out, float* lse, const T* qkv, int b,
                                    int t, int nh, int hd) {
  launch_flash_attention_forward(ctx, out, lse, qkv, b, t, nh, nh, hd);
}
template <typename T>
void launch_flash_attention_backward_input(const LaunchContext& ctx, T* dqkv, float* delta, const T* dout,
                                           const T* qkv, const T* out, const float* lse, int b, int t,
                                           int nh, int hd) {
  launch_flash_attention_backward_input(ctx, dqkv, delta, dout, qkv, out, lse, b, t, nh, nh, hd);
}

// The bf16 kernels: the mma.sync kernels run on every GPU; the wgmma kernels (head sizes 64
// and 128) where the cubin loaded for the device is sm_90a (Hopper). `automatic` picks wgmma
// where it can run; the others force one set (tests, attention_check).
enum class FlashKernels { automatic, mma, wgmma };

// The bf16 forward and backward with an explicit choice of kernels (the launchers above at
// T = bf16 are these with FlashKernels::automatic). Forcing wgmma where it cannot run fails
// with one line.
void launch_flash_attention_forward_bf16(const LaunchContext& ctx, bf16* out, float* lse, const bf16* qkv, int b,
                                         int t, int nh, int nkv, int hd, FlashKernels kernels);
void launch_flash_attention_backward_input_bf16(const LaunchContext& ctx, bf16* dqkv, float* delta,
                                                const bf16* dout, const bf16* qkv, const bf16* out,
                                                const float* lse, int b, int t, int nh, int nkv, int hd,
                                                FlashKernels kernels);

// Whether FlashKernels::automatic runs the wgmma kernels for head size hd on this device
// (always false in the emulated build, whose tests choose the kernels explicitly).
bool flash_attention_uses_wgmma(int hd);

// Shared memory of one block of the flash kernels at storage type T and head dim hd (bytes,
// the largest of the kernels launched on this device; no tile depends on the sequence length).
template <typename T>
size_t flash_attention_shared_bytes(int hd);

}  // namespace pptrain::kernels
