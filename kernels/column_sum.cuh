// Deterministic column sums over the rows of an [N, C] matrix, for weight gradients that sum
// over tokens: the bias gradient (Σ dY) and the layernorm gradients (Σ dy·x̂, Σ dy).
// Only kernels/*.cu include this header.
//
// Float atomics would make the sum order depend on thread timing, so the reduction runs in
// two stages whose order is fixed by (N, C) alone (bit-identical on every run and GPU):
//  1. column_partials_kernel: block (32, 8), grid (⌈C/32⌉, ⌈N/64⌉). Block (bx, by) owns 32
//     adjacent columns (one per lane: every row read is a coalesced 128-byte segment) and
//     the 64-row chunk by; thread (tx, ty) sums rows by·64 + ty, + 8, ... of its column, and
//     the 8 row phases are added in shared memory in ty order.
//     partials[k][chunk][C] receives the chunk's sum of value k.
//  2. column_partials_finish_kernel: one thread per column adds the chunks in order into
//     the output (+=, as gradients accumulate over microbatches).
#pragma once
#include "device.cuh"

namespace pptrain::kernels {

constexpr int kColumnRowsPerChunk = 64;
constexpr int kColumnBlockX = 32, kColumnBlockY = 8;

inline int column_chunks(int n) { return int(ceil_div(size_t(n), kColumnRowsPerChunk)); }

// Scratch for K column sums over [n, c]: K · chunks · C floats.
inline size_t column_sum_workspace_bytes(int n, int c, int k) {
  return size_t(k) * size_t(column_chunks(n)) * size_t(c) * sizeof(float);
}

// `values(row, col, v)` fills v[0..K) with the K values that element contributes.
template <int K, typename Values>
__global__ void column_partials_kernel(float* partials, int n, int c, Values values) {
  PPTRAIN_DYNAMIC_SHARED(float, stage);  // [K][blockDim.y][blockDim.x]
  int tx = threadIdx.x, ty = threadIdx.y, bx = blockDim.x, by = blockDim.y;
  int col = blockIdx.x * bx + tx;
  int row_begin = blockIdx.y * kColumnRowsPerChunk;
  int row_end = row_begin + kColumnRowsPerChunk < n ? row_begin + kColumnRowsPerChunk : n;
  float acc[K] = {};
  if (col < c) {
    for (int row = row_begin + ty; row < row_end; row += by) {
      float v[K];
      values(row, col, v);
      for (int k = 0; k < K; ++k) acc[k] += v[k];
    }
  }
  for (int k = 0; k < K; ++k) stage[(k * by + ty) * bx + tx] = acc[k];
  __syncthreads();
  if (ty == 0 && col < c) {
    for (int k = 0; k < K; ++k) {
      float s = 0.0f;
      for (int phase = 0; phase < by; ++phase) s += stage[(k * by + phase) * bx + tx];
      partials[(size_t(k) * gridDim.y + blockIdx.y) * c + col] = s;
    }
  }
}

template <int K>
struct ColumnOutputs {
  float* out[K];
};

template <int K>
__global__ void column_partials_finish_kernel(ColumnOutputs<K> outputs, const float* partials,
                                              int chunks, int c) {
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= c) return;
  for (int k = 0; k < K; ++k) {
    if (!outputs.out[k]) continue;
    float s = 0.0f;
    for (int chunk = 0; chunk < chunks; ++chunk) s += partials[(size_t(k) * chunks + chunk) * c + col];
    outputs.out[k][col] += s;
  }
}

// out_k[C] += Σ_rows values(row, col)[k]; an output pointer may be null (skipped).
// `workspace` holds column_sum_workspace_bytes(n, c, K).
template <int K, typename Values>
void launch_column_sums(const LaunchContext& ctx, const char* name, ColumnOutputs<K> outputs,
                        float* workspace, int n, int c, Values values) {
  if (n <= 0 || c <= 0) return;
  int chunks = column_chunks(n);
  PPTRAIN_CHECK(chunks <= 65535, name, ": ", n, " rows exceed the grid's y limit");
  dim3 block(kColumnBlockX, kColumnBlockY);
  launch(ctx, name, column_partials_kernel<K, Values>, dim3(ceil_div(c, kColumnBlockX), chunks),
         block, K * kColumnBlockX * kColumnBlockY * sizeof(float), workspace, n, c, values);
  launch(ctx, name, column_partials_finish_kernel<K>, dim3(ceil_div(c, 256)), dim3(256), 0,
         outputs, static_cast<const float*>(workspace), chunks, c);
}

}  // namespace pptrain::kernels
