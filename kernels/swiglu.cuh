// SwiGLU, the gated unit of the Llama MLP: y = silu(gate) · up, silu(x) = x · sigmoid(x), on
// activations of storage type T (float or bf16; fp32 arithmetic). Semantics of
// Ops::swiglu_forward / swiglu_backward_input.
#pragma once
#include "launch.cuh"

namespace pptrain::kernels {

// y[n] = (gate · sigmoid(gate)) · up; y may alias neither input.
template <typename T>
void launch_swiglu_forward(const LaunchContext& ctx, T* y, const T* gate, const T* up, size_t n);

// dgate[n] = dy · up · silu'(gate), dup[n] = dy · silu(gate) (both overwritten; neither may
// alias an input).
template <typename T>
void launch_swiglu_backward_input(const LaunchContext& ctx, T* dgate, T* dup, const T* dy, const T* gate,
                                  const T* up, size_t n);

}  // namespace pptrain::kernels
