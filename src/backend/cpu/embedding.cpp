// Token + position embedding on one vocabulary shard (rows [v0, v0 + VL) of the token
// table). Forward is a gather, parallel over rows. Backward is a scatter-add; it is
// made race-free and deterministic by giving each thread its own channel range: every
// thread walks all rows in order, so each output element is summed in row order
// whatever the thread count.
#include <algorithm>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "backend/cpu/isa_begin.h"  // last: see there

namespace pptrain::cpu::PPTRAIN_CPU_ISA {

namespace {
constexpr int kChannelChunk = 64;  // channels per task: whole cache lines, no false sharing

bool in_shard(int32_t token, int v0, int vl) { return token >= v0 && token - v0 < vl; }
}  // namespace

void CpuOps::embedding_forward(View yv, const int32_t* tokens, ConstView wtev, ConstView wpev,
                               int n, int t, int c, int v0, int vl) {
  float *y; const float *wte, *wpe;
  std::tie(y, wte, wpe) = fp32("embedding_forward", yv, wtev, wpev);
  // y[N,C] = wte[tok - v0] (0 outside the shard) + wpe[row mod T]; wte[VL,C], wpe[T,C]
  PPTRAIN_CHECK(t > 0 && c >= 0 && vl >= 0, "embedding shape t=", t, " c=", c, " vl=", vl);
#pragma omp parallel for schedule(static) if (size_t(n) * c >= kParallelMinElements)
  for (int row = 0; row < n; ++row) {
    float* y_row = y + size_t(row) * c;
    const int32_t token = tokens[row];
    const float* wpe_row = wpe ? wpe + size_t(row % t) * c : nullptr;
    if (in_shard(token, v0, vl)) {
      const float* wte_row = wte + size_t(token - v0) * c;
      if (wpe_row) {
#pragma omp simd
        for (int i = 0; i < c; ++i) y_row[i] = wte_row[i] + wpe_row[i];
      } else {
        std::copy(wte_row, wte_row + c, y_row);
      }
    } else if (wpe_row) {
      std::copy(wpe_row, wpe_row + c, y_row);
    } else {
      std::fill(y_row, y_row + c, 0.0f);
    }
  }
}

void CpuOps::embedding_backward_weight(float* dwte, float* dwpe, ConstView dyv,
                                       const int32_t* tokens, int n, int t, int c, int v0, int vl) {
  const float *dy;
  std::tie(dy) = fp32("embedding_backward_weight", dyv);
  // dwte[VL,C] += dy[row] at row tok - v0; dwpe[T,C] += dy[row] at row (row mod T)
  PPTRAIN_CHECK(t > 0 && c >= 0 && vl >= 0, "embedding shape t=", t, " c=", c, " vl=", vl);
  const int chunks = (c + kChannelChunk - 1) / kChannelChunk;
#pragma omp parallel for schedule(static) if (size_t(n) * c >= kParallelMinElements)
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const int c0 = chunk * kChannelChunk, width = std::min(kChannelChunk, c - c0);
    for (int row = 0; row < n; ++row) {
      const float* dy_row = dy + size_t(row) * c + c0;
      const int32_t token = tokens[row];
      if (in_shard(token, v0, vl)) {
        float* dst = dwte + size_t(token - v0) * c + c0;
#pragma omp simd
        for (int i = 0; i < width; ++i) dst[i] += dy_row[i];
      }
      if (dwpe) {
        float* dst = dwpe + size_t(row % t) * c + c0;
#pragma omp simd
        for (int i = 0; i < width; ++i) dst[i] += dy_row[i];
      }
    }
  }
}

}  // namespace pptrain::cpu::PPTRAIN_CPU_ISA
