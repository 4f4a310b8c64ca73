// Elementwise ops (see elementwise.cuh). add/accumulate/scale are maps (map.cuh); add_bias
// has its own kernel because the bias index is the column of the element.
#include "elementwise.cuh"
#include "map.cuh"

namespace pptrain::kernels {
namespace {

struct AddOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct ScaleOp {
  float s;
  __device__ __forceinline__ float operator()(float x) const { return x * s; }
};

// y[N,C] += b[C]. Thread i owns elements [i·P, i·P + P) of y in row-major order; with
// C % P == 0 a pack never crosses a row and its bias slice b[col, col + P) is one aligned
// 128-bit load (b is tiny and stays in L1/L2).
template <typename T>
__global__ void add_bias_kernel(T* y, const T* b, size_t total, int c, bool vectorized) {
  constexpr int P = Pack128<T>::kSize;
  size_t base = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * P;
  if (base >= total) return;
  if (vectorized) {
    Pack128<T> v = load_pack(y + base), bias = load_pack(b + base % c);
    for (int k = 0; k < P; ++k) v.v[k] = from_float<T>(to_float(v.v[k]) + to_float(bias.v[k]));
    store_pack(y + base, v);
  } else {
    size_t end = base + P < total ? base + P : total;
    for (size_t i = base; i < end; ++i) y[i] = from_float<T>(to_float(y[i]) + to_float(b[i % c]));
  }
}

}  // namespace

template <typename T>
void launch_add(const LaunchContext& ctx, T* y, const T* a, const T* b, size_t n) {
  launch_map2(ctx, "add", y, a, b, n, AddOp{});
}

template <typename T>
void launch_accumulate(const LaunchContext& ctx, T* y, const T* x, size_t n) {
  launch_map2(ctx, "accumulate", y, static_cast<const T*>(y), x, n, AddOp{});
}

template <typename T>
void launch_scale(const LaunchContext& ctx, T* y, float s, size_t n) {
  launch_map1(ctx, "scale", y, static_cast<const T*>(y), n, ScaleOp{s});
}

template <typename T>
void launch_add_bias(const LaunchContext& ctx, T* y, const T* b, int n, int c) {
  size_t total = size_t(n) * size_t(c);
  if (total == 0) return;
  bool vectorized = aligned16(y, b) && c % Pack128<T>::kSize == 0;
  launch(ctx, "add_bias", add_bias_kernel<T>, map_grid<T>(total), dim3(kMapBlock), 0, y, b, total,
         c, vectorized);
}

// One thread per element, consecutive threads along a row: reads and writes are runs of
// `cols` elements.
template <typename T>
__global__ void copy_columns_kernel(T* y, const T* x, size_t total, int cols, int y_stride, int x_stride) {
  size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  size_t row = idx / size_t(cols), col = idx % size_t(cols);
  y[row * size_t(y_stride) + col] = x[row * size_t(x_stride) + col];
}

template <typename T>
void launch_copy_columns(const LaunchContext& ctx, T* y, const T* x, int rows, int cols, int y_stride, int x_stride) {
  if (rows < 0 || cols < 0 || y_stride < cols || x_stride < cols)
    fail("copy_columns: expected rows, cols >= 0 and strides >= cols, got rows=", rows, " cols=", cols, " y_stride=",
         y_stride, " x_stride=", x_stride);
  size_t total = size_t(rows) * size_t(cols);
  if (total == 0) return;
  launch(ctx, "copy_columns", copy_columns_kernel<T>, dim3(unsigned((total + kMapBlock - 1) / kMapBlock)),
         dim3(kMapBlock), 0, y, x, total, cols, y_stride, x_stride);
}

#define PPTRAIN_INSTANTIATE(T)                                                            \
  template void launch_copy_columns<T>(const LaunchContext&, T*, const T*, int, int, int, int); \
  template void launch_add<T>(const LaunchContext&, T*, const T*, const T*, size_t);     \
  template void launch_accumulate<T>(const LaunchContext&, T*, const T*, size_t);        \
  template void launch_scale<T>(const LaunchContext&, T*, float, size_t);                \
  template void launch_add_bias<T>(const LaunchContext&, T*, const T*, int, int);
PPTRAIN_INSTANTIATE(float)
PPTRAIN_INSTANTIATE(bf16)
#undef PPTRAIN_INSTANTIATE

}  // namespace pptrain::kernels
