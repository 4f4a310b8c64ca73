// Deterministic column sums over the rows of an [N, C] matrix, for weight gradients that sum
// over tokens: the bias gradient (Σ dY) and the layernorm gradients (Σ dy·x̂, Σ dy).
// Only kernels/*.cu include this header.
//
// Float atomics would make the sum order depend on thread timing, so the reduction runs in
// two stages whose order is fixed by (N, C) alone (bit-identical on every run and GPU):
//  1. column_partials_kernel: block (32, 8), grid (⌈C/(32·P)⌉, ⌈N/64⌉). Block (bx, by) owns
//     32·P adjacent columns (P per lane, one 16-byte pack: 4 fp32 or 8 bf16, so a warp reads
//     512 contiguous bytes of a row; P = 1 where the rows do not allow packs) and the 64-row
//     chunk by; thread (tx, ty) sums rows by·64 + ty, + 8, ... of its columns (8 rows, their
//     loads issued together), and the 8 row phases are added in shared memory in ty order.
//     partials[k][chunk][C] receives the chunk's sum of value k.
//  2. column_partials_finish_kernel: block (32, 32), grid ⌈C/32⌉. Thread (tx, ty) adds
//     chunks ty, ty + 32, ... of column bx·32 + tx (a warp reads 128 contiguous bytes of a
//     chunk's row), the 32 phases are added in shared memory in ty order, and the sum is
//     added to the output (+=, as gradients accumulate over microbatches). One thread per
//     column adding every chunk in turn (GPT-2 124M at B 16: 256 chunks) kept 3 of 132 SMs
//     busy, each thread waiting on a few loads at a time: 44 us a call measured on an H200
//     for the layernorm's weight gradients, where their partials take ~10.
#pragma once
#include "device.cuh"

namespace pptrain::kernels {

constexpr int kColumnRowsPerChunk = 64;
constexpr int kColumnBlockX = 32, kColumnBlockY = 8;
constexpr int kFinishPhases = 32;  // the finishing block's rows: chunks summed in parallel per column

inline int column_chunks(int n) { return int(ceil_div(size_t(n), kColumnRowsPerChunk)); }

// Scratch for K column sums over [n, c]: K · chunks · C floats.
inline size_t column_sum_workspace_bytes(int n, int c, int k) {
  return size_t(k) * size_t(column_chunks(n)) * size_t(c) * sizeof(float);
}

// `values(row, col, v)` fills v[0..K) with the K values that element contributes; with
// P > 1 columns per thread, `values.pack(row, col, v)` fills v[e][0..K) for the P columns
// col + e at once from 16-byte loads (the same arithmetic per element, so the same bits).
// Each column's sum runs in the same order whatever P: its rows in the thread's row order,
// then the row phases in ty order, so P only changes which thread holds a column.
template <int K, int P, typename Values>
__global__ void column_partials_kernel(float* partials, int n, int c, Values values) {
  PPTRAIN_DYNAMIC_SHARED(float, stage);  // [K][kColumnBlockY][kColumnBlockX · P]
  constexpr int kRowsPerThread = kColumnRowsPerChunk / kColumnBlockY, kWidth = kColumnBlockX * P;
  int tx = threadIdx.x, ty = threadIdx.y;
  int col0 = (blockIdx.x * kColumnBlockX + tx) * P;  // P > 1: c is a multiple of P, so a pack is all in or out
  int row_begin = blockIdx.y * kColumnRowsPerChunk;
  int row_end = row_begin + kColumnRowsPerChunk < n ? row_begin + kColumnRowsPerChunk : n;
  float acc[P][K] = {};
  if (col0 < c) {
    PPTRAIN_UNROLL
    for (int j = 0; j < kRowsPerThread; ++j) {
      int row = row_begin + ty + j * kColumnBlockY;
      if (row < row_end) {
        float v[P][K];
        if constexpr (P == 1) values(row, col0, v[0]);
        else values.pack(row, col0, v);
        PPTRAIN_UNROLL
        for (int e = 0; e < P; ++e)
          for (int k = 0; k < K; ++k) acc[e][k] += v[e][k];
      }
    }
  }
  for (int e = 0; e < P; ++e)
    for (int k = 0; k < K; ++k) stage[(k * kColumnBlockY + ty) * kWidth + tx * P + e] = acc[e][k];
  __syncthreads();
  if (ty == 0) {
    for (int e = 0; e < P; ++e) {
      int col = col0 + e;
      if (col >= c) break;
      for (int k = 0; k < K; ++k) {
        float s = 0.0f;
        for (int phase = 0; phase < kColumnBlockY; ++phase) s += stage[(k * kColumnBlockY + phase) * kWidth + tx * P + e];
        partials[(size_t(k) * gridDim.y + blockIdx.y) * c + col] = s;
      }
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
  PPTRAIN_STATIC_SHARED(float, stage, K * kFinishPhases * kColumnBlockX);  // [K][phase][tx]
  int tx = threadIdx.x, ty = threadIdx.y, col = blockIdx.x * kColumnBlockX + tx;
  float acc[K] = {};
  if (col < c)
    for (int chunk = ty; chunk < chunks; chunk += kFinishPhases)
      for (int k = 0; k < K; ++k) acc[k] += partials[(size_t(k) * chunks + chunk) * c + col];
  for (int k = 0; k < K; ++k) stage[(k * kFinishPhases + ty) * kColumnBlockX + tx] = acc[k];
  __syncthreads();
  if (ty != 0 || col >= c) return;
  for (int k = 0; k < K; ++k) {
    if (!outputs.out[k]) continue;
    float s = 0.0f;
    for (int phase = 0; phase < kFinishPhases; ++phase) s += stage[(k * kFinishPhases + phase) * kColumnBlockX + tx];
    outputs.out[k][col] += s;
  }
}

// out_k[C] += Σ_rows values(row, col)[k]; an output pointer may be null (skipped).
// `workspace` holds column_sum_workspace_bytes(n, c, K). Values::kPack columns per thread
// (16-byte loads) where C is a multiple of it and values.aligned(), else one.
template <int K, typename Values>
void launch_column_sums(const LaunchContext& ctx, const char* name, ColumnOutputs<K> outputs,
                        float* workspace, int n, int c, Values values) {
  if (n <= 0 || c <= 0) return;
  int chunks = column_chunks(n);
  PPTRAIN_CHECK(chunks <= 65535, name, ": ", n, " rows exceed the grid's y limit");
  dim3 block(kColumnBlockX, kColumnBlockY);
  constexpr int P = Values::kPack;
  if (P > 1 && c % P == 0 && values.aligned())
    launch(ctx, name, column_partials_kernel<K, P, Values>, dim3(ceil_div(c, kColumnBlockX * P), chunks), block,
           K * kColumnBlockX * P * kColumnBlockY * sizeof(float), workspace, n, c, values);
  else
    launch(ctx, name, column_partials_kernel<K, 1, Values>, dim3(ceil_div(c, kColumnBlockX), chunks), block,
           K * kColumnBlockX * kColumnBlockY * sizeof(float), workspace, n, c, values);
  launch(ctx, name, column_partials_finish_kernel<K>, dim3(ceil_div(c, kColumnBlockX)),
         dim3(kColumnBlockX, kFinishPhases), 0, outputs, static_cast<const float*>(workspace), chunks, c);
}

}  // namespace pptrain::kernels
