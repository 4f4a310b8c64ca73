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
//
// Packed rows (`packed`: C a multiple of the 16-byte pack and every row pointer aligned, as
// layernorm_rows_packed decides): lane l takes packs l, l + 32, ... (a warp reads 512
// contiguous bytes at a time instead of 64 or 128) and sums its elements pack by pack in
// element order; otherwise lane l takes channels l, l + 32, .... The forward kernels, fused or
// not, pick the same layout for the same row, so their bits agree either way.
template <typename T>
__device__ __forceinline__ void layernorm_row_normalize(T* yr, const T* xr, float m, const T* g, const T* b,
                                                        int c, int lane, float* mean, float* rstd, int row,
                                                        bool packed) {
  constexpr int P = Pack128<T>::kSize;
  float sq = 0.0f;
  if (packed) {
    for (int k = lane; k < c / P; k += kWarp) {
      const Pack128<T> xp = load_pack(xr + k * P);
      PPTRAIN_UNROLL
      for (int e = 0; e < P; ++e) {
        float d = to_float(xp.v[e]) - m;
        sq += d * d;
      }
    }
  } else {
    for (int i = lane; i < c; i += kWarp) {
      float d = to_float(xr[i]) - m;
      sq += d * d;
    }
  }
  float s = rsqrtf(warp_reduce(sq, Sum{}) / c + kLayernormEps);
  if (packed) {
    for (int k = lane; k < c / P; k += kWarp) {
      const Pack128<T> xp = load_pack(xr + k * P), gp = load_pack(g + k * P), bp = load_pack(b + k * P);
      Pack128<T> yp;
      PPTRAIN_UNROLL
      for (int e = 0; e < P; ++e)
        yp.v[e] = from_float<T>((to_float(xp.v[e]) - m) * s * to_float(gp.v[e]) + to_float(bp.v[e]));
      store_pack(yr + k * P, yp);
    }
  } else {
    for (int i = lane; i < c; i += kWarp)
      yr[i] = from_float<T>((to_float(xr[i]) - m) * s * to_float(g[i]) + to_float(b[i]));
  }
  if (lane == 0) {
    if (mean) mean[row] = m;
    if (rstd) rstd[row] = s;
  }
}

// Whether rows of C elements can be read as 16-byte packs: C a multiple of the pack (so every
// row starts aligned where the buffer does) and every buffer 16-byte aligned (null ones skipped).
template <typename T, typename... Ptr>
bool layernorm_rows_packed(int c, const Ptr*... p) {
  return c % Pack128<T>::kSize == 0 && ((p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0) && ...);
}

}  // namespace pptrain::kernels
