// Rotary position embedding (RoPE, the rotate-half convention of Hugging Face's Llama) in
// place on the query and key heads of packed qkv rows, storage type T (float or bf16; fp32
// arithmetic). Semantics of Ops::rotary_forward / rotary_backward_input.
#pragma once
#include "launch.cuh"

namespace pptrain::kernels {

// Scratch for the cos/sin table of a call: [2][T][HD/2] floats.
size_t rotary_table_bytes(int t, int hd);

// The largest head size the kernels take (HD / 2 planes; core/config.h kMaxRotaryPlanes).
inline constexpr int kRotaryMaxPlanes = 256;

// In place on qkv[B,T,(NH + 2·NKV)·HD]: each of the NH query and NKV key heads of row r has
// plane i < HD/2, (x_i, x_{i+HD/2}), turned by the angle pos · inv_freq[i], pos = r mod T;
// the value heads are untouched. `inv_freq` (host memory, `planes` = HD/2 values, at most
// kRotaryMaxPlanes) is passed by value to the table kernel. HD is even (else fails with one
// line). `table` holds rotary_table_bytes(t, hd).
template <typename T>
void launch_rotary_forward(const LaunchContext& ctx, T* qkv, float* table, int b, int t, int nh, int nkv, int hd,
                           const float* inv_freq, int planes);
// The dgrad on dqkv of the same layout: the transposed rotation (by -angle).
template <typename T>
void launch_rotary_backward_input(const LaunchContext& ctx, T* dqkv, float* table, int b, int t, int nh, int nkv,
                                  int hd, const float* inv_freq, int planes);

}  // namespace pptrain::kernels
