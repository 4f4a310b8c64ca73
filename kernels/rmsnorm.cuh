// RMSNorm over the C channels of each row (Llama; Hugging Face's LlamaRMSNorm), on
// activations and weights of storage type T (float or bf16; statistics and arithmetic in
// fp32). Semantics of Ops::rmsnorm_forward / rmsnorm_backward_input / rmsnorm_backward_weight:
// forward, dgrad and wgrad are separate launches so I and W run as separate pipeline actions.
#pragma once
#include "launch.cuh"

namespace pptrain::kernels {

// y[N,C] = (x · rstd) · g[C], rstd = 1 / √(mean(x²) + eps); saves rstd[N].
template <typename T>
void launch_rmsnorm_forward(const LaunchContext& ctx, T* y, float* rstd, const T* x, const T* g, int n, int c,
                            float eps);

// dx[N,C] = residual[N,C] + rstd · (dŷ - x̂ · mean(dŷ · x̂)), dŷ = dy · g, x̂ = x · rstd,
// summed in fp32 and rounded once to T. residual may be null (the norm's term alone; dx is
// not read). dx may alias dy or residual.
template <typename T>
void launch_rmsnorm_backward_input(const LaunchContext& ctx, T* dx, const T* dy, const T* x, const float* rstd,
                                   const T* g, int n, int c, const T* residual);

// dg[C] += Σ_rows dy · x̂ (fp32 gradient), a deterministic two-stage column sum.
// `workspace` must hold rmsnorm_backward_weight_workspace_bytes(n, c).
template <typename T>
void launch_rmsnorm_backward_weight(const LaunchContext& ctx, float* dg, const T* dy, const T* x,
                                    const float* rstd, float* workspace, int n, int c);
size_t rmsnorm_backward_weight_workspace_bytes(int n, int c);

}  // namespace pptrain::kernels
