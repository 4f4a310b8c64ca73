// The residual add fused with the layernorm that follows it (GPT-2: x2 = x + attn_out, then
// ln_2(x2)), on activations of storage type T (float or bf16; fp32 arithmetic). Semantics of
// Ops::residual_layernorm_forward.
#pragma once
#include "launch.cuh"

namespace pptrain::kernels {

// sum[N,C] = a + b (rounded to T: the residual stream kept for the rest of the block);
// y[N,C] = (sum - mean) · rstd · g[C] + beta[C] computed from the rounded sum, so the result
// equals launch_add followed by launch_layernorm_forward; saves mean[N] and rstd[N] (may be
// null). sum may alias a or b.
template <typename T>
void launch_residual_layernorm_forward(const LaunchContext& ctx, T* sum, T* y, float* mean, float* rstd,
                                       const T* a, const T* b, const T* g, const T* beta, int n, int c);

}  // namespace pptrain::kernels
