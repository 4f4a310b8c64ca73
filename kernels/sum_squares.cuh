// Σ x² of a gradient buffer, for the global gradient norm. Semantics of Ops::sum_squares:
// accumulated in double, deterministic (a fixed summation order that depends on n only).
#pragma once
#include "launch.cuh"

namespace pptrain::kernels {

// *out = Σ x[i]² (or *out += with accumulate, to sum many tensors without a host round
// trip). out is one double in device memory. `workspace` must hold
// sum_squares_workspace_bytes(n).
void launch_sum_squares(const LaunchContext& ctx, double* out, const float* x, size_t n,
                        double* workspace, bool accumulate);
size_t sum_squares_workspace_bytes(size_t n);

}  // namespace pptrain::kernels
