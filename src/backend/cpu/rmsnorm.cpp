// RMSNorm over the last dimension C (Llama): y = (x · rstd) · g with rstd = 1/√(mean(x²) + eps),
// in the order Hugging Face's LlamaRMSNorm rounds it. Rows are independent in forward and
// dgrad (parallel over rows); the wgrad sum over rows is split over channels, so the sum
// order is fixed (as layernorm.cpp).
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/isa_begin.h"  // last: see there

namespace pptrain::cpu::PPTRAIN_CPU_ISA {

void CpuOps::rmsnorm_forward(View yv, float* rstd, ConstView xv, ConstView gv, int n, int c, float eps) {
  float* y;
  const float *x, *g;
  std::tie(y, x, g) = fp32("rmsnorm_forward", yv, xv, gv);
  // x, y [N,C]; g [C]; rstd [N]
#pragma omp parallel for schedule(static) if (size_t(n) * c >= kParallelMinElements)
  for (int row = 0; row < n; ++row) {
    const float* x_row = x + size_t(row) * c;
    float* y_row = y + size_t(row) * c;
    float sum_sq = 0.0f;
#pragma omp simd reduction(+ : sum_sq)
    for (int i = 0; i < c; ++i) sum_sq += x_row[i] * x_row[i];
    const float s = 1.0f / std::sqrt(sum_sq / float(c) + eps);
#pragma omp simd
    for (int i = 0; i < c; ++i) y_row[i] = (x_row[i] * s) * g[i];
    rstd[row] = s;
  }
}

void CpuOps::rmsnorm_backward_input(View dxv, ConstView dyv, ConstView xv, const float* rstd, ConstView gv, int n,
                                    int c, ConstView residualv) {
  float* dx;
  const float *dy, *x, *g, *residual;
  std::tie(dx, dy, x, g, residual) = fp32("rmsnorm_backward_input", dxv, dyv, xv, gv, residualv);
  // dx = residual + rstd · (dŷ - x̂ · mean(dŷ · x̂)), dŷ = dy · g, x̂ = x · rstd: the derivative of
  // rstd = (mean(x²) + eps)^(-1/2) is -rstd³ x / C, so the eps only enters through rstd.
#pragma omp parallel for schedule(static) if (size_t(n) * c >= kParallelMinElements)
  for (int row = 0; row < n; ++row) {
    const float* x_row = x + size_t(row) * c;
    const float* dy_row = dy + size_t(row) * c;
    float* dx_row = dx + size_t(row) * c;
    const float s = rstd[row];
    float sum_dxhat_xhat = 0.0f;
#pragma omp simd reduction(+ : sum_dxhat_xhat)
    for (int i = 0; i < c; ++i) sum_dxhat_xhat += dy_row[i] * g[i] * (x_row[i] * s);
    const float mean_dxhat_xhat = sum_dxhat_xhat / float(c);
    if (residual) {
      // Element i reads residual[i] and dy[i] before writing dx[i], so dx may alias either.
      const float* residual_row = residual + size_t(row) * c;
#pragma omp simd
      for (int i = 0; i < c; ++i)
        dx_row[i] = residual_row[i] + s * (dy_row[i] * g[i] - (x_row[i] * s) * mean_dxhat_xhat);
    } else {
      // Without a residual dx may hold garbage (even NaN), so it is not read.
#pragma omp simd
      for (int i = 0; i < c; ++i) dx_row[i] = s * (dy_row[i] * g[i] - (x_row[i] * s) * mean_dxhat_xhat);
    }
  }
}

void CpuOps::rmsnorm_backward_weight(float* dg, ConstView dyv, ConstView xv, const float* rstd, int n, int c) {
  const float *dy, *x;
  std::tie(dy, x) = fp32("rmsnorm_backward_weight", dyv, xv);
  // dg[C] += Σ_rows dy · x̂. Threads own column chunks and walk all rows in order.
  constexpr int kChunk = 64;
  const int chunks = (c + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (size_t(n) * c >= kParallelMinElements)
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const int c0 = chunk * kChunk, width = std::min(kChunk, c - c0);
    float sum_g[kChunk];
    for (int j = 0; j < width; ++j) sum_g[j] = dg[c0 + j];
    for (int row = 0; row < n; ++row) {
      const float* x_row = x + size_t(row) * c + c0;
      const float* dy_row = dy + size_t(row) * c + c0;
      const float s = rstd[row];
#pragma omp simd
      for (int j = 0; j < width; ++j) sum_g[j] += dy_row[j] * (x_row[j] * s);
    }
    for (int j = 0; j < width; ++j) dg[c0 + j] = sum_g[j];
  }
}

}  // namespace pptrain::cpu::PPTRAIN_CPU_ISA
