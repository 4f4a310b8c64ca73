// Elementwise ops on activations of storage type T (float or bf16; fp32 arithmetic, one
// rounding per stored value): the residual add, gradient accumulation, scaling and the bias
// add of a linear layer. Semantics of Ops::add / accumulate / scale / add_bias.
#pragma once
#include "launch.cuh"

namespace pptrain::kernels {

// y[n] = a[n] + b[n]; y may alias a or b.
template <typename T>
void launch_add(const LaunchContext& ctx, T* y, const T* a, const T* b, size_t n);
// y[n] += x[n].
template <typename T>
void launch_accumulate(const LaunchContext& ctx, T* y, const T* x, size_t n);
// y[n] *= s.
template <typename T>
void launch_scale(const LaunchContext& ctx, T* y, float s, size_t n);
// y[N,C] += b[C].
template <typename T>
void launch_add_bias(const LaunchContext& ctx, T* y, const T* b, int n, int c);
// y[rows, cols] (row stride y_stride elements) <- x[rows, cols] (row stride x_stride); no overlap.
template <typename T>
void launch_copy_columns(const LaunchContext& ctx, T* y, const T* x, int rows, int cols, int y_stride, int x_stride);

}  // namespace pptrain::kernels
