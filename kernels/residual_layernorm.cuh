// The bias add of a row-parallel projection, the residual add and the layernorm that follows
// (GPT-2: x2 = x + (attn_out + proj.bias), then ln_2(x2)), on activations of storage type T
// (float or bf16; fp32 arithmetic). Semantics of Ops::residual_layernorm_forward.
#pragma once
#include "launch.cuh"

namespace pptrain::kernels {

// sum[N,C] = (a + bias[C]) + b, each add rounded to T as launch_add_bias and launch_add
// round (bias may be null: sum = a + b); sum is the residual stream kept for the rest of the
// block. y[N,C] = (sum - mean) · rstd · g[C] + beta[C] computed from the stored sum, so the
// results equal launch_add_bias, launch_add, launch_layernorm_forward in sequence; saves
// mean[N] and rstd[N] (may be null). sum may alias a or b.
template <typename T>
void launch_residual_layernorm_forward(const LaunchContext& ctx, T* sum, T* y, float* mean, float* rstd,
                                       const T* a, const T* bias, const T* b, const T* g, const T* beta, int n,
                                       int c);

}  // namespace pptrain::kernels
