// SwiGLU forward and backward (see swiglu.cuh). Forward is an elementwise map of two inputs
// (map.cuh: one 128-bit pack per thread). Backward reads three inputs and writes two
// outputs, so it has its own kernel with the same decomposition: thread i owns elements
// [i·P, i·P + P), P = 16 / sizeof(T), one 128-bit access per operand where every pointer
// is 16-byte aligned, else (and for the ragged tail) P scalar accesses. The rounding order
// is the cpu op's (backend/cpu/swiglu.cpp), with expf for its vectorised exp.
#include "map.cuh"
#include "swiglu.cuh"

namespace pptrain::kernels {
namespace {

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

struct SwigluOp {
  __device__ __forceinline__ float operator()(float gate, float up) const { return (gate * sigmoid(gate)) * up; }
};

// silu'(x) = s (1 + x (1 - s)), s = sigmoid(x): dgate = dy · up · silu'(gate), dup = dy · silu(gate).
__device__ __forceinline__ void swiglu_backward(float dy, float gate, float up, float& dgate, float& dup) {
  float s = sigmoid(gate);
  dgate = dy * up * (s * (1.0f + gate * (1.0f - s)));
  dup = dy * (gate * s);
}

template <typename T>
__global__ void swiglu_backward_kernel(T* dgate, T* dup, const T* dy, const T* gate, const T* up, size_t n,
                                       bool vectorized) {
  constexpr int P = Pack128<T>::kSize;
  size_t base = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * P;
  if (base >= n) return;
  if (vectorized && base + P <= n) {
    Pack128<T> pdy = load_pack(dy + base), pgate = load_pack(gate + base), pup = load_pack(up + base), og, ou;
    for (int k = 0; k < P; ++k) {
      float dg, du;
      swiglu_backward(to_float(pdy.v[k]), to_float(pgate.v[k]), to_float(pup.v[k]), dg, du);
      og.v[k] = from_float<T>(dg);
      ou.v[k] = from_float<T>(du);
    }
    store_pack(dgate + base, og);
    store_pack(dup + base, ou);
  } else {
    size_t end = base + P < n ? base + P : n;
    for (size_t i = base; i < end; ++i) {
      float dg, du;
      swiglu_backward(to_float(dy[i]), to_float(gate[i]), to_float(up[i]), dg, du);
      dgate[i] = from_float<T>(dg);
      dup[i] = from_float<T>(du);
    }
  }
}

}  // namespace

template <typename T>
void launch_swiglu_forward(const LaunchContext& ctx, T* y, const T* gate, const T* up, size_t n) {
  launch_map2(ctx, "swiglu_forward", y, gate, up, n, SwigluOp{});
}

template <typename T>
void launch_swiglu_backward_input(const LaunchContext& ctx, T* dgate, T* dup, const T* dy, const T* gate,
                                  const T* up, size_t n) {
  if (n == 0) return;
  launch(ctx, "swiglu_backward_input", swiglu_backward_kernel<T>, map_grid<T>(n), dim3(kMapBlock), 0, dgate, dup,
         dy, gate, up, n, aligned16(dgate, dup, dy, gate, up));
}

#define PPTRAIN_INSTANTIATE(T)                                                                              \
  template void launch_swiglu_forward<T>(const LaunchContext&, T*, const T*, const T*, size_t);            \
  template void launch_swiglu_backward_input<T>(const LaunchContext&, T*, T*, const T*, const T*, const T*, \
                                                size_t);
PPTRAIN_INSTANTIATE(float)
PPTRAIN_INSTANTIATE(bf16)
#undef PPTRAIN_INSTANTIATE

}  // namespace pptrain::kernels
