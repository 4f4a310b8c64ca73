// GELU, tanh approximation (GPT-2), on activations of storage type T (float or bf16).
// Semantics of Ops::gelu_forward / gelu_backward.
#pragma once
#include "launch.cuh"

namespace pptrain::kernels {

// y[n] = 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))).
template <typename T>
void launch_gelu_forward(const LaunchContext& ctx, T* y, const T* x, size_t n);
// dx[n] = dy · gelu'(x); dx may alias dy.
template <typename T>
void launch_gelu_backward(const LaunchContext& ctx, T* dx, const T* dy, const T* x, size_t n);

}  // namespace pptrain::kernels
