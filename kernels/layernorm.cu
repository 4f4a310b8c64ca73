// Layernorm kernels (see layernorm.cuh).
//
// Forward and dgrad: one warp per row (8 rows per 256-thread block). Lane l handles
// channels l, l + 32, ... so each warp-wide access is contiguous; the row statistics are
// warp butterfly sums (__shfl_xor_sync), no shared memory, no block barrier. The row is
// read again for each pass; at GPT sizes (C ≤ 2048, 8 KiB per row) the re-reads hit L1.
// Forward uses two passes (mean, then Σ (x - mean)²) rather than E[x²] - mean², which
// cancels catastrophically for rows with a large mean.
//
// Wgrad: deterministic two-stage column sums (column_sum.cuh) of dy·x̂ and dy.
#include "column_sum.cuh"
#include "device.cuh"
#include "layernorm.cuh"
#include "layernorm_row.cuh"

namespace pptrain::kernels {
namespace {

constexpr int kRowBlock = kLayernormRowBlock;

template <typename T>
__global__ void layernorm_forward_kernel(T* y, float* mean, float* rstd, const T* x, const T* g,
                                         const T* b, int n, int c) {
  int lane = threadIdx.x % kWarp;
  int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (row >= n) return;  // whole warps leave; nothing below synchronises the block
  const T* xr = x + size_t(row) * c;
  float sum = 0.0f;
  for (int i = lane; i < c; i += kWarp) sum += to_float(xr[i]);
  float m = warp_reduce(sum, Sum{}) / c;
  layernorm_row_normalize(y + size_t(row) * c, xr, m, g, b, c, lane, mean, rstd, row);
}

template <typename T>
__global__ void layernorm_backward_input_kernel(T* dx, const T* dy, const T* x, const float* mean,
                                                const float* rstd, const T* g, int n, int c,
                                                const T* residual) {
  int lane = threadIdx.x % kWarp;
  int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (row >= n) return;
  size_t offset = size_t(row) * c;
  const T* dyr = dy + offset;
  const T* xr = x + offset;
  float m = mean[row], s = rstd[row];
  float sum_dyhat = 0.0f, sum_dyhat_xhat = 0.0f;
  for (int i = lane; i < c; i += kWarp) {
    float dyhat = to_float(dyr[i]) * to_float(g[i]);
    sum_dyhat += dyhat;
    sum_dyhat_xhat += dyhat * (to_float(xr[i]) - m) * s;
  }
  float mean_dyhat = warp_reduce(sum_dyhat, Sum{}) / c;
  float mean_dyhat_xhat = warp_reduce(sum_dyhat_xhat, Sum{}) / c;
  // Each lane rewrites exactly the channels it read, after the warp-wide sums: dx may alias dy
  // or residual. The residual joins in fp32 and the sum rounds once to T.
  T* dxr = dx + offset;
  const T* residual_r = residual ? residual + offset : nullptr;
  for (int i = lane; i < c; i += kWarp) {
    float dyhat = to_float(dyr[i]) * to_float(g[i]);
    float xhat = (to_float(xr[i]) - m) * s;
    float v = s * (dyhat - mean_dyhat - xhat * mean_dyhat_xhat);
    dxr[i] = from_float<T>(residual_r ? to_float(residual_r[i]) + v : v);
  }
}

// Per-element contributions to (dg, db): (dy·x̂, dy).
template <typename T>
struct LayernormWgradValues {
  const T* dy;
  const T* x;
  const float* mean;
  const float* rstd;
  int c;
  __device__ __forceinline__ void operator()(int row, int col, float (&v)[2]) const {
    size_t i = size_t(row) * c + col;
    float d = to_float(dy[i]);
    v[0] = d * (to_float(x[i]) - mean[row]) * rstd[row];
    v[1] = d;
  }
};

}  // namespace

template <typename T>
void launch_layernorm_forward(const LaunchContext& ctx, T* y, float* mean, float* rstd, const T* x,
                              const T* g, const T* b, int n, int c) {
  if (n <= 0) return;
  launch(ctx, "layernorm_forward", layernorm_forward_kernel<T>,
         dim3(ceil_div(n, kRowBlock / kWarp)), dim3(kRowBlock), 0, y, mean, rstd, x, g, b, n, c);
}

template <typename T>
void launch_layernorm_backward_input(const LaunchContext& ctx, T* dx, const T* dy, const T* x,
                                     const float* mean, const float* rstd, const T* g, int n, int c,
                                     const T* residual) {
  if (n <= 0) return;
  launch(ctx, "layernorm_backward_input", layernorm_backward_input_kernel<T>,
         dim3(ceil_div(n, kRowBlock / kWarp)), dim3(kRowBlock), 0, dx, dy, x, mean, rstd, g, n, c,
         residual);
}

size_t layernorm_backward_weight_workspace_bytes(int n, int c) {
  return column_sum_workspace_bytes(n, c, 2);
}

template <typename T>
void launch_layernorm_backward_weight(const LaunchContext& ctx, float* dg, float* db, const T* dy,
                                      const T* x, const float* mean, const float* rstd,
                                      float* workspace, int n, int c) {
  launch_column_sums<2>(ctx, "layernorm_backward_weight", ColumnOutputs<2>{{dg, db}}, workspace,
                        n, c, LayernormWgradValues<T>{dy, x, mean, rstd, c});
}

#define PPTRAIN_INSTANTIATE(T)                                                                  \
  template void launch_layernorm_forward<T>(const LaunchContext&, T*, float*, float*, const T*, \
                                            const T*, const T*, int, int);                      \
  template void launch_layernorm_backward_input<T>(const LaunchContext&, T*, const T*, const T*,  \
                                                   const float*, const float*, const T*, int,   \
                                                   int, const T*);                              \
  template void launch_layernorm_backward_weight<T>(const LaunchContext&, float*, float*,         \
                                                    const T*, const T*, const float*,           \
                                                    const float*, float*, int, int);
PPTRAIN_INSTANTIATE(float)
PPTRAIN_INSTANTIATE(bf16)
#undef PPTRAIN_INSTANTIATE

}  // namespace pptrain::kernels
