// The row layout and the end of the layernorm forward, shared by layernorm_forward_kernel
// (layernorm.cu) and the fused residual_layernorm_forward_kernel (residual_layernorm.cu), so
// the two compute y, mean and rstd with the same operations in the same order (the fused
// kernel's bits equal add + layernorm's). Only kernels/*.cu include this header.
#pragma once
#include "device.cuh"

namespace pptrain::kernels {

constexpr float kLayernormEps = 1e-5f;
constexpr int kLayernormRowBlock = 256;  // one warp per row: 8 warps = 8 rows per block

// Given one row xr[C] as stored and its mean m (computed by the caller's first pass), the
// warp of `lane`s takes Σ (x - m)² (two passes rather than E[x²] - m², which cancels
// catastrophically for rows with a large mean), writes yr[C] = (x - m) · rstd · g + b and,
// on lane 0, mean[row] and rstd[row] where those are not null.
template <typename T>
__device__ __forceinline__ void layernorm_row_normalize(T* yr, const T* xr, float m, const T* g, const T* b,
                                                        int c, int lane, float* mean, float* rstd, int row) {
  float sq = 0.0f;
  for (int i = lane; i < c; i += kWarp) {
    float d = to_float(xr[i]) - m;
    sq += d * d;
  }
  float s = rsqrtf(warp_reduce(sq, Sum{}) / c + kLayernormEps);
  for (int i = lane; i < c; i += kWarp)
    yr[i] = from_float<T>((to_float(xr[i]) - m) * s * to_float(g[i]) + to_float(b[i]));
  if (lane == 0) {
    if (mean) mean[row] = m;
    if (rstd) rstd[row] = s;
  }
}

}  // namespace pptrain::kernels
