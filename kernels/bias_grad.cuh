// Bias gradient of a linear layer: db[O] += Σ_rows dY[N,O] (the W pass of Ops::
// linear_backward_weight; the weight gradient itself is a cuBLAS GEMM). dY is of storage
// type T (float or bf16), db is fp32. Deterministic two-stage column sums (column_sum.cuh).
#pragma once
#include "launch.cuh"

namespace pptrain::kernels {

// `workspace` must hold bias_backward_workspace_bytes(n, o).
template <typename T>
void launch_bias_backward(const LaunchContext& ctx, float* db, const T* dy, float* workspace, int n,
                          int o);
size_t bias_backward_workspace_bytes(int n, int o);

}  // namespace pptrain::kernels
