// Generic elementwise kernels: y = op(x) and y = op(a, b) over n elements of storage type T
// (float or bf16, fp32 arithmetic). The op families (elementwise, gelu) instantiate them with
// small functors. Only kernels/*.cu include this header.
//
// Decomposition: thread i owns elements [i·P, i·P + P), P = 16 / sizeof(T), so a warp moves
// 512 contiguous bytes per operand (coalesced). When every pointer is 16-byte aligned a full
// pack moves with one 128-bit load/store; otherwise, and for the ragged tail pack, the thread
// falls back to P scalar accesses with a bounds check.
#pragma once
#include "device.cuh"

namespace pptrain::kernels {

constexpr int kMapBlock = 256;

template <typename T, typename Op>
__global__ void map1_kernel(T* y, const T* x, size_t n, bool vectorized, Op op) {
  constexpr int P = Pack128<T>::kSize;
  size_t base = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * P;
  if (base >= n) return;
  if (vectorized && base + P <= n) {
    Pack128<T> in = load_pack(x + base), out;
    for (int k = 0; k < P; ++k) out.v[k] = from_float<T>(op(to_float(in.v[k])));
    store_pack(y + base, out);
  } else {
    size_t end = base + P < n ? base + P : n;
    for (size_t i = base; i < end; ++i) y[i] = from_float<T>(op(to_float(x[i])));
  }
}

template <typename T, typename Op>
__global__ void map2_kernel(T* y, const T* a, const T* b, size_t n, bool vectorized, Op op) {
  constexpr int P = Pack128<T>::kSize;
  size_t base = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * P;
  if (base >= n) return;
  if (vectorized && base + P <= n) {
    Pack128<T> pa = load_pack(a + base), pb = load_pack(b + base), out;
    for (int k = 0; k < P; ++k) out.v[k] = from_float<T>(op(to_float(pa.v[k]), to_float(pb.v[k])));
    store_pack(y + base, out);
  } else {
    size_t end = base + P < n ? base + P : n;
    for (size_t i = base; i < end; ++i) y[i] = from_float<T>(op(to_float(a[i]), to_float(b[i])));
  }
}

// Grid covering n elements, P per thread.
template <typename T>
dim3 map_grid(size_t n) {
  return dim3(ceil_div(ceil_div(n, Pack128<T>::kSize), kMapBlock));
}

template <typename T, typename Op>
void launch_map1(const LaunchContext& ctx, const char* name, T* y, const T* x, size_t n, Op op) {
  if (n == 0) return;
  launch(ctx, name, map1_kernel<T, Op>, map_grid<T>(n), dim3(kMapBlock), 0, y, x, n,
         aligned16(y, x), op);
}

template <typename T, typename Op>
void launch_map2(const LaunchContext& ctx, const char* name, T* y, const T* a, const T* b,
                 size_t n, Op op) {
  if (n == 0) return;
  launch(ctx, name, map2_kernel<T, Op>, map_grid<T>(n), dim3(kMapBlock), 0, y, a, b, n,
         aligned16(y, a, b), op);
}

}  // namespace pptrain::kernels
