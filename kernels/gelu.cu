// GELU forward and backward (see gelu.cuh) as elementwise maps (map.cuh: one 128-bit pack
// per thread). Backward needs no saved state but x: it recomputes the sigmoid.
#include "gelu.cuh"
#include "map.cuh"

namespace pptrain::kernels {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

// 0.5 (1 + tanh u) is written as sigmoid(2u) = 1 / (1 + exp(-2u)): the same value without
// the cancellation of 1 + tanh u for negative x, so small outputs keep their relative accuracy.
__device__ __forceinline__ float gelu_sigmoid(float x) {
  float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  return 1.0f / (1.0f + expf(-2.0f * u));
}

struct GeluOp {
  __device__ __forceinline__ float operator()(float x) const { return x * gelu_sigmoid(x); }
};

// gelu'(x) = s + x · 2 s (1 - s) · u', s = sigmoid(2u), u' = √(2/π) (1 + 3 · 0.044715 x²)
// (2 s (1 - s) = 0.5 sech² u, the derivative of 0.5 (1 + tanh u) with respect to u).
struct GeluBackwardOp {
  __device__ __forceinline__ float operator()(float dy, float x) const {
    float s = gelu_sigmoid(x);
    float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    return dy * (s + x * 2.0f * s * (1.0f - s) * du);
  }
};

}  // namespace

template <typename T>
void launch_gelu_forward(const LaunchContext& ctx, T* y, const T* x, size_t n) {
  launch_map1(ctx, "gelu_forward", y, x, n, GeluOp{});
}

template <typename T>
void launch_gelu_backward(const LaunchContext& ctx, T* dx, const T* dy, const T* x, size_t n) {
  launch_map2(ctx, "gelu_backward", dx, dy, x, n, GeluBackwardOp{});
}

template void launch_gelu_forward<float>(const LaunchContext&, float*, const float*, size_t);
template void launch_gelu_forward<bf16>(const LaunchContext&, bf16*, const bf16*, size_t);
template void launch_gelu_backward<float>(const LaunchContext&, float*, const float*, const float*, size_t);
template void launch_gelu_backward<bf16>(const LaunchContext&, bf16*, const bf16*, const bf16*, size_t);

}  // namespace pptrain::kernels
