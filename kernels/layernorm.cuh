// Layernorm over the C channels of each row, eps = 1e-5, on activations and weights of
// storage type T (float or bf16; statistics and arithmetic in fp32). Semantics of
// Ops::layernorm_forward / layernorm_backward_input / layernorm_backward_weight: forward,
// dgrad and wgrad are separate launches so I and W run as separate pipeline actions.
#pragma once
#include "launch.cuh"

namespace pptrain::kernels {

// y[N,C] = (x - mean) · rstd · g[C] + b[C]; saves mean[N] and rstd[N] (may be null).
template <typename T>
void launch_layernorm_forward(const LaunchContext& ctx, T* y, float* mean, float* rstd, const T* x,
                              const T* g, const T* b, int n, int c);

// dx[N,C] = residual[N,C] + rstd · (dŷ - mean(dŷ) - x̂ · mean(dŷ · x̂)), dŷ = dy · g,
// x̂ = (x - mean) · rstd, summed in fp32 and rounded once to T. residual may be null (the
// layernorm term alone; dx is not read). dx may alias dy or residual.
template <typename T>
void launch_layernorm_backward_input(const LaunchContext& ctx, T* dx, const T* dy, const T* x,
                                     const float* mean, const float* rstd, const T* g, int n, int c,
                                     const T* residual);

// dg[C] += Σ_rows dy · x̂;  db[C] += Σ_rows dy (fp32 gradients; db may be null).
// `workspace` must hold layernorm_backward_weight_workspace_bytes(n, c).
template <typename T>
void launch_layernorm_backward_weight(const LaunchContext& ctx, float* dg, float* db, const T* dy,
                                      const T* x, const float* mean, const float* rstd,
                                      float* workspace, int n, int c);
size_t layernorm_backward_weight_workspace_bytes(int n, int c);

}  // namespace pptrain::kernels
