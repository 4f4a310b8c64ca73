// RMSNorm kernels (see rmsnorm.cuh), laid out as layernorm.cu's.
//
// Forward and dgrad: one warp per row (8 rows per 256-thread block). Lane l handles channels
// l, l + 32, ... so each warp-wide access is contiguous; the row sums are warp butterflies
// (__shfl_xor_sync), no shared memory, no block barrier. rstd is 1 / sqrtf (correctly
// rounded) rather than rsqrtf (an approximation), as the cpu op computes it.
//
// Wgrad: the deterministic two-stage column sum of dy·x̂ (column_sum.cuh): no float atomics,
// the sum order depends on (N, C) alone.
#include "column_sum.cuh"
#include "device.cuh"
#include "rmsnorm.cuh"

namespace pptrain::kernels {
namespace {

constexpr int kRowBlock = 256;  // one warp per row: 8 rows per block

template <typename T>
__global__ void rmsnorm_forward_kernel(T* y, float* rstd, const T* x, const T* g, int n, int c, float eps) {
  int lane = threadIdx.x % kWarp;
  int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (row >= n) return;  // whole warps leave; nothing below synchronises the block
  const T* xr = x + size_t(row) * c;
  float sum_sq = 0.0f;
  for (int i = lane; i < c; i += kWarp) {
    float v = to_float(xr[i]);
    sum_sq += v * v;
  }
  float s = 1.0f / sqrtf(warp_reduce(sum_sq, Sum{}) / float(c) + eps);
  T* yr = y + size_t(row) * c;
  for (int i = lane; i < c; i += kWarp) yr[i] = from_float<T>((to_float(xr[i]) * s) * to_float(g[i]));
  if (lane == 0) rstd[row] = s;
}

template <typename T>
__global__ void rmsnorm_backward_input_kernel(T* dx, const T* dy, const T* x, const float* rstd, const T* g, int n,
                                              int c, const T* residual) {
  int lane = threadIdx.x % kWarp;
  int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (row >= n) return;
  size_t offset = size_t(row) * c;
  const T* dyr = dy + offset;
  const T* xr = x + offset;
  float s = rstd[row];
  float sum_dyhat_xhat = 0.0f;
  for (int i = lane; i < c; i += kWarp) sum_dyhat_xhat += to_float(dyr[i]) * to_float(g[i]) * (to_float(xr[i]) * s);
  float mean_dyhat_xhat = warp_reduce(sum_dyhat_xhat, Sum{}) / float(c);
  // Each lane rewrites exactly the channels it read, after the warp-wide sum: dx may alias dy
  // or residual. The residual joins in fp32 and the sum rounds once to T.
  T* dxr = dx + offset;
  const T* residual_r = residual ? residual + offset : nullptr;
  for (int i = lane; i < c; i += kWarp) {
    float v = s * (to_float(dyr[i]) * to_float(g[i]) - (to_float(xr[i]) * s) * mean_dyhat_xhat);
    dxr[i] = from_float<T>(residual_r ? to_float(residual_r[i]) + v : v);
  }
}

// Per-element contribution to dg: dy·x̂.
template <typename T>
struct RmsnormWgradValues {
  const T* dy;
  const T* x;
  const float* rstd;
  int c;
  static constexpr int kPack = Pack128<T>::kSize;
  bool aligned() const { return aligned16(dy, x); }
  __device__ __forceinline__ void operator()(int row, int col, float (&v)[1]) const {
    size_t i = size_t(row) * c + col;
    v[0] = to_float(dy[i]) * (to_float(x[i]) * rstd[row]);
  }
  __device__ __forceinline__ void pack(int row, int col, float (&v)[kPack][1]) const {
    size_t i = size_t(row) * c + col;
    Pack128<T> dp = load_pack(dy + i), xp = load_pack(x + i);
    const float r = rstd[row];
    for (int e = 0; e < kPack; ++e) v[e][0] = to_float(dp.v[e]) * (to_float(xp.v[e]) * r);
  }
};

}  // namespace

template <typename T>
void launch_rmsnorm_forward(const LaunchContext& ctx, T* y, float* rstd, const T* x, const T* g, int n, int c,
                            float eps) {
  if (n <= 0) return;
  launch(ctx, "rmsnorm_forward", rmsnorm_forward_kernel<T>, dim3(ceil_div(n, kRowBlock / kWarp)), dim3(kRowBlock),
         0, y, rstd, x, g, n, c, eps);
}

template <typename T>
void launch_rmsnorm_backward_input(const LaunchContext& ctx, T* dx, const T* dy, const T* x, const float* rstd,
                                   const T* g, int n, int c, const T* residual) {
  if (n <= 0) return;
  launch(ctx, "rmsnorm_backward_input", rmsnorm_backward_input_kernel<T>, dim3(ceil_div(n, kRowBlock / kWarp)),
         dim3(kRowBlock), 0, dx, dy, x, rstd, g, n, c, residual);
}

size_t rmsnorm_backward_weight_workspace_bytes(int n, int c) { return column_sum_workspace_bytes(n, c, 1); }

template <typename T>
void launch_rmsnorm_backward_weight(const LaunchContext& ctx, float* dg, const T* dy, const T* x,
                                    const float* rstd, float* workspace, int n, int c) {
  launch_column_sums<1>(ctx, "rmsnorm_backward_weight", ColumnOutputs<1>{{dg}}, workspace, n, c,
                        RmsnormWgradValues<T>{dy, x, rstd, c});
}

#define PPTRAIN_INSTANTIATE(T)                                                                                    \
  template void launch_rmsnorm_forward<T>(const LaunchContext&, T*, float*, const T*, const T*, int, int, float); \
  template void launch_rmsnorm_backward_input<T>(const LaunchContext&, T*, const T*, const T*, const float*,      \
                                                 const T*, int, int, const T*);                                  \
  template void launch_rmsnorm_backward_weight<T>(const LaunchContext&, float*, const T*, const T*, const float*, \
                                                  float*, int, int);
PPTRAIN_INSTANTIATE(float)
PPTRAIN_INSTANTIATE(bf16)
#undef PPTRAIN_INSTANTIATE

}  // namespace pptrain::kernels
