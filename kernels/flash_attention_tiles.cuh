// Building blocks of the flash attention kernels (flash_attention.cu and
// flash_attention_bf16.cuh only): block shape, where a head's rows live, and the fp32
// path's tile sizes, tile loads and per-lane products.
//
// Every kernel is one block of 4 warps; warp w owns 16 "rows" (query rows in the forward and
// the dQ kernel, key rows in the dK/dV kernel) and streams over "columns" (the other side)
// in tiles of kCols rows held in shared memory. In the fp32 kernels lane l of a warp works on
// row r = l / 2 of its 16 and on half h = l % 2 of every row vector: of each 16-wide chunk c
// of a head vector it holds elements c·16 + h·8 .. c·16 + h·8 + 7 (lane_col below), and of a
// score row the columns j with j % 2 == h. (The bf16 kernels use the mma fragment layout
// instead: flash_attention_bf16.cuh.)
#pragma once
#include <type_traits>

#include "device.cuh"

namespace pptrain::kernels::flash {

constexpr int kWarps = 4, kThreads = kWarps * kWarp;
constexpr int kWarpRows = 16;                    // rows per warp (the mma tile height)
constexpr int kRows = kWarps * kWarpRows;        // rows per block
constexpr float kLog2e = 1.4426950408889634f;    // softmax runs in base 2: e^x = 2^(x·log2 e)
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ int min_int(int a, int b) { return a < b ? a : b; }

// Column of element k (0 ≤ k < HD/2) of the lane's half of a head vector.
__device__ __forceinline__ int lane_col(int k, int h) { return (k / 8) * 16 + h * 8 + k % 8; }

// The fp32 kernels' shared memory: two streamed tiles X, Y [kCols][HD] and kCols fp32 lse
// and delta values (dK/dV kernel).
template <typename T, int HD>
struct Config {
  static_assert(std::is_same_v<T, float>, "the bf16 kernels have their own shapes");
  static constexpr int kCols = HD == 128 ? 32 : 64;   // columns per streamed tile
  static constexpr size_t kTileBytes = size_t(kCols) * HD * sizeof(T);
  static constexpr size_t kStatsBytes = 2 * kCols * sizeof(float);
  static constexpr size_t kX = 0, kY = kX + kTileBytes, kStats = kY + kTileBytes, kBytes = kStats + kStatsBytes;
  static_assert(kBytes <= 48 * 1024, "static shared memory over 48 KiB");
};

// dst[rows][HD] (shared, unpadded: the fp32 path reads two addresses per warp) = rows of src (global, row stride `stride` elements); rows ≥ valid
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
    store_pack(dst + r * HD + p * kPack, v);
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


// Where the rows of query head hi of batch index bi and of its key/value head hi / (NH/NKV)
// live in qkv[B,T,(NH + 2·NKV)·HD]: row i of q, k, v at q, k, v + i·qkv_stride; of out/dout
// at row + i·row_stride; lse/delta at stats + i.
struct Head {
  size_t q, k, v, row, stats;  // offsets of row 0
  size_t qkv_stride, row_stride;
  __device__ Head(int bi, int hi, int t, int nh, int nkv, int hd) {
    int kv = hi / (nh / nkv);
    qkv_stride = size_t(nh + 2 * nkv) * hd;
    row_stride = size_t(nh) * hd;
    size_t base = size_t(bi) * t * qkv_stride;
    q = base + size_t(hi) * hd;
    k = base + size_t(nh + kv) * hd;
    v = base + size_t(nh + nkv + kv) * hd;
    row = size_t(bi) * t * row_stride + size_t(hi) * hd;
    stats = (size_t(bi) * nh + hi) * t;
  }
};

}  // namespace pptrain::kernels::flash
