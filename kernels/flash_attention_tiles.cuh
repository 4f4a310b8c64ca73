// Building blocks of the flash attention kernels (flash_attention.cu only): tile sizes and
// shared-memory layout, tile loads, and the per-warp products on tiles, with tensor cores
// (WMMA, bf16) or plain fp32 FMAs.
//
// Every kernel is one block of 4 warps; warp w owns 16 "rows" (query rows in the forward and
// the dQ kernel, key rows in the dK/dV kernel) and streams over "columns" (the other side)
// in tiles of kCols rows held in shared memory. Lane l of a warp works on row r = l / 2 of
// its 16 and on half h = l % 2 of every row vector: of each 16-wide chunk c of a head vector
// it holds elements c·16 + h·8 .. c·16 + h·8 + 7 (lane_col below), and of a score row the
// columns j with j % 2 == h. The fragment layout of WMMA is unspecified, so products go
// through a per-warp fp32 scratch tile that lanes read in this fixed layout.
#pragma once
#ifndef PPTRAIN_EMULATED
#include <mma.h>
#endif
#include <type_traits>

#include "device.cuh"

namespace pptrain::kernels::flash {

constexpr int kWarps = 4, kThreads = kWarps * kWarp;
constexpr int kWarpRows = 16;                    // rows per warp (the WMMA tile height)
constexpr int kRows = kWarps * kWarpRows;        // rows per block
constexpr float kLog2e = 1.4426950408889634f;    // softmax runs in base 2: e^x = 2^(x·log2 e)
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ int min_int(int a, int b) { return a < b ? a : b; }

// Column of element k (0 ≤ k < HD/2) of the lane's half of a head vector.
__device__ __forceinline__ int lane_col(int k, int h) { return (k / 8) * 16 + h * 8 + k % 8; }

// Row stride (elements) of a [rows][HD] tile in shared memory. bf16 rows are padded by 8
// elements (16 bytes): a WMMA load reads 8 rows of 16 bytes at a time, which with a stride of
// HD·2 bytes (a multiple of 128) would all fall into the same 4 of the 32 banks; with 16
// bytes more per row they cover all 32. The fp32 path reads two addresses per warp: no pad.
template <typename T, int HD>
constexpr int kTileLd = std::is_same_v<T, bf16> ? HD + 8 : HD;

template <typename T, int HD>
struct Config {
  static constexpr bool kTensorCores = std::is_same_v<T, bf16>;
  static constexpr int kCols = HD == 128 ? 32 : 64;   // columns per streamed tile
  static constexpr int kLdS = kCols + 4;              // fp32 scratch row (padding: fewer bank conflicts)
  static constexpr int kLdP = kCols + 8;              // bf16 P / dS row (WMMA: ldm multiple of 8)
  // Shared memory, in this order (every offset a multiple of 32 bytes, as WMMA needs):
  //  [bf16] region A: the block's own 64 rows staged for fragment loads, later the 4 warps'
  //         fp32 scratch tiles [16][kLdS];
  //  X, Y: two streamed tiles [kCols][HD] of T (row stride kTileLd);
  //  [bf16] P: the 4 warps' [16][kLdP] bf16 probabilities (or dS);
  //  stats: kCols fp32 lse and delta values (dK/dV kernel).
  static constexpr size_t kStageBytes = kTensorCores ? size_t(kRows) * kTileLd<T, HD> * sizeof(T) : 0;
  static constexpr size_t kScratchBytes = kTensorCores ? size_t(kRows) * kLdS * sizeof(float) : 0;
  static constexpr size_t kRegionBytes = kStageBytes > kScratchBytes ? kStageBytes : kScratchBytes;
  static constexpr size_t kTileBytes = size_t(kCols) * kTileLd<T, HD> * sizeof(T);
  static constexpr size_t kPBytes = kTensorCores ? size_t(kRows) * kLdP * sizeof(bf16) : 0;
  static constexpr size_t kStatsBytes = 2 * kCols * sizeof(float);
  static constexpr size_t kX = kRegionBytes, kY = kX + kTileBytes, kP = kY + kTileBytes;
  static constexpr size_t kStats = kP + kPBytes, kBytes = kStats + kStatsBytes;
  static_assert(kBytes <= 48 * 1024, "static shared memory over 48 KiB");
  static_assert(kX % 32 == 0 && kY % 32 == 0 && kP % 32 == 0 && kStats % 32 == 0);
};

// dst[rows][HD] (shared, row stride kTileLd) = rows of src (global, row stride `stride` elements); rows ≥ valid
// are zero (a partial last tile), so they add nothing to any product. 16-byte packs,
// consecutive threads on consecutive packs of a row: coalesced.
template <typename T, int HD>
__device__ void load_tile(T* dst, const T* src, size_t stride, int rows, int valid) {
  constexpr int kPack = Pack128<T>::kSize, kPacks = HD / kPack;
  for (int idx = threadIdx.x; idx < rows * kPacks; idx += blockDim.x) {
    int r = idx / kPacks, p = idx % kPacks;
    Pack128<T> v;
    if (r < valid) v = load_pack(src + size_t(r) * stride + p * kPack);
    else
      for (int e = 0; e < kPack; ++e) v.v[e] = from_float<T>(0.0f);
    store_pack(dst + r * kTileLd<T, HD> + p * kPack, v);
  }
}

// 8 consecutive elements as floats, and back (one 16-byte pack of bf16, two of float).
template <typename T>
__device__ __forceinline__ void load8(float* dst, const T* src) {
  constexpr int kPack = Pack128<T>::kSize;
  for (int p = 0; p < 8 / kPack; ++p) {
    Pack128<T> v = load_pack(src + p * kPack);
    for (int e = 0; e < kPack; ++e) dst[p * kPack + e] = to_float(v.v[e]);
  }
}
template <typename T>
__device__ __forceinline__ void store8(T* dst, const float* src) {
  constexpr int kPack = Pack128<T>::kSize;
  for (int p = 0; p < 8 / kPack; ++p) {
    Pack128<T> v;
    for (int e = 0; e < kPack; ++e) v.v[e] = from_float<T>(src[p * kPack + e]);
    store_pack(dst + p * kPack, v);
  }
}

// The lane's half (HD/2 values) of a head row in global memory, zero when the row is invalid.
template <typename T, int HD>
__device__ void load_half_row(float* dst, const T* row, bool valid, int h) {
  for (int c = 0; c < HD / 16; ++c) {
    if (valid) load8(dst + c * 8, row + c * 16 + h * 8);
    else
      for (int e = 0; e < 8; ++e) dst[c * 8 + e] = 0.0f;
  }
}
template <typename T, int HD>
__device__ void store_half_row(T* row, const float* src, int h) {
  for (int c = 0; c < HD / 16; ++c) store8(row + c * 16 + h * 8, src + c * 8);
}

// ---- fp32 path: one score at a time, the two lanes of a row each summing half of HD ------

// Σ_d x[d] · y[d] over a whole head row, x as this lane's half (registers), y a row of a
// shared tile; the pair of lanes of the row combine their halves (both get the same sum).
template <typename T, int HD>
__device__ __forceinline__ float pair_dot(const float* x, const T* y, int h) {
  float s = 0.0f;
  for (int k = 0; k < HD / 2; ++k) s += x[k] * to_float(y[lane_col(k, h)]);
  return s + __shfl_xor_sync(kFullMask, s, 1);
}

// acc[k] += a · y[lane_col(k)] for the lane's half of a shared tile row y.
template <typename T, int HD>
__device__ __forceinline__ void axpy_half(float* acc, float a, const T* y, int h) {
  for (int k = 0; k < HD / 2; ++k) acc[k] += a * to_float(y[lane_col(k, h)]);
}

// ---- bf16 path: warp products on tensor cores ---------------------------------------------
#if defined(__CUDACC__) || defined(PPTRAIN_EMULATED)
namespace wmma = nvcuda::wmma;
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// a[c] = chunk c (columns c·16 ..) of the warp's 16 rows of a staged [64][HD] tile.
template <int HD>
__device__ void load_row_fragments(FragA (&a)[HD / 16], const bf16* staged, int warp) {
  constexpr int kLd = kTileLd<bf16, HD>;
  for (int c = 0; c < HD / 16; ++c) wmma::load_matrix_sync(a[c], staged + warp * kWarpRows * kLd + c * 16, kLd);
}

// scratch[16][ld] (fp32) = A · tileᵀ: scratch[r][j] = Σ_d A[r][d] tile[j][d] for the warp's
// 16 rows A (fragments) and the N rows of a shared [N][HD] tile (row stride kTileLd; read as
// a col-major B).
template <int HD, int N>
__device__ void product_with_tile_rows(float* scratch, int ld, const FragA (&a)[HD / 16], const bf16* tile) {
  for (int n = 0; n < N / 16; ++n) {
    FragAcc acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int c = 0; c < HD / 16; ++c) {
      FragBCol b;
      wmma::load_matrix_sync(b, tile + n * 16 * kTileLd<bf16, HD> + c * 16, kTileLd<bf16, HD>);
      wmma::mma_sync(acc, a[c], b, acc);
    }
    wmma::store_matrix_sync(scratch + n * 16, acc, ld, wmma::mem_row_major);
  }
}

// acc[c] += P · tile, chunk c of the [16][HD] product of the warp's P[16][N] (bf16, shared,
// row stride ldp) and a shared [N][HD] tile (row stride kTileLd).
template <int HD, int N>
__device__ void accumulate_p_times_tile(FragAcc (&acc)[HD / 16], const bf16* p, int ldp, const bf16* tile) {
  FragA pa[N / 16];
  for (int n = 0; n < N / 16; ++n) wmma::load_matrix_sync(pa[n], p + n * 16, ldp);
  for (int c = 0; c < HD / 16; ++c)
    for (int n = 0; n < N / 16; ++n) {
      FragBRow b;
      wmma::load_matrix_sync(b, tile + n * 16 * kTileLd<bf16, HD> + c * 16, kTileLd<bf16, HD>);
      wmma::mma_sync(acc[c], pa[n], b, acc[c]);
    }
}

// Writes chunk c of the warp's [16][HD] accumulators through the scratch tile: afterwards
// the lane holds its 8 values of row r of chunk c in out[0..7].
__device__ __forceinline__ void chunk_to_lane(float* out, const FragAcc& acc, float* scratch, int ld, int r,
                                              int h) {
  __syncwarp();  // every lane is done reading the scratch tile
  wmma::store_matrix_sync(scratch, acc, ld, wmma::mem_row_major);
  __syncwarp();
  for (int e = 0; e < 8; ++e) out[e] = scratch[r * ld + h * 8 + e];
}
#endif

}  // namespace pptrain::kernels::flash
