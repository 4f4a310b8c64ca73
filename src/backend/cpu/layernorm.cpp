// LayerNorm over the last dimension C, eps = 1e-5. Rows are independent in forward and
// dgrad (parallel over rows); the wgrad sums over rows are split over channels.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/isa_begin.h"  // last: see there

namespace pptrain::cpu::PPTRAIN_CPU_ISA {

namespace {
constexpr float kEps = 1e-5f;
}

void CpuOps::layernorm_forward(View yv, float* mean, float* rstd, ConstView xv, ConstView gv,
                               ConstView bv, int n, int c) {
  float *y; const float *x, *g, *b;
  std::tie(y, x, g, b) = fp32("layernorm_forward", yv, xv, gv, bv);
  // x, y [N,C]; g, b [C]; mean, rstd [N]
#pragma omp parallel for schedule(static) if (size_t(n) * c >= kParallelMinElements)
  for (int row = 0; row < n; ++row) {
    const float* x_row = x + size_t(row) * c;
    float* y_row = y + size_t(row) * c;
    // Two passes (mean, then centred second moment): no cancellation of E[x²] - E[x]².
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < c; ++i) sum += x_row[i];
    float m = sum / float(c);
    float sum_sq = 0.0f;
#pragma omp simd reduction(+ : sum_sq)
    for (int i = 0; i < c; ++i) {
      float d = x_row[i] - m;
      sum_sq += d * d;
    }
    float s = 1.0f / std::sqrt(sum_sq / float(c) + kEps);
#pragma omp simd
    for (int i = 0; i < c; ++i) y_row[i] = (x_row[i] - m) * s * g[i] + b[i];
    mean[row] = m;
    rstd[row] = s;
  }
}

void CpuOps::residual_layernorm_forward(View sum, View y, float* mean, float* rstd, ConstView a,
                                        ConstView bias, ConstView b, ConstView g, ConstView beta,
                                        int n, int c) {
  fp32("residual_layernorm_forward", sum, y, a, bias, b, g, beta);
  // The reference of the fused op is the unfused sequence: sum[N,C] = a + bias (add_bias on a
  // copy unless sum is a), sum += b, then layernorm.
  const size_t count = size_t(n) * c;
  if (bias.data) {
    if (sum.data != a.data) copy(sum.data, a.data, count * sizeof(float));
    add_bias(sum, bias, n, c);
    this->add(sum, sum, b, count);
  } else {
    this->add(sum, a, b, count);
  }
  layernorm_forward(y, mean, rstd, sum, g, beta, n, c);
}

void CpuOps::layernorm_backward_input(View dxv, ConstView dyv, ConstView xv, const float* mean,
                                      const float* rstd, ConstView gv, int n, int c,
                                      ConstView residualv) {
  float *dx; const float *dy, *x, *g, *residual;
  std::tie(dx, dy, x, g, residual) = fp32("layernorm_backward_input", dxv, dyv, xv, gv, residualv);
  // dx = residual + rstd · (dŷ - mean(dŷ) - x̂ · mean(dŷ · x̂)), dŷ = dy · g, x̂ = (x - mean) · rstd
#pragma omp parallel for schedule(static) if (size_t(n) * c >= kParallelMinElements)
  for (int row = 0; row < n; ++row) {
    const float* x_row = x + size_t(row) * c;
    const float* dy_row = dy + size_t(row) * c;
    float* dx_row = dx + size_t(row) * c;
    const float m = mean[row], s = rstd[row];
    float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
#pragma omp simd reduction(+ : sum_dxhat, sum_dxhat_xhat)
    for (int i = 0; i < c; ++i) {
      float dxhat = dy_row[i] * g[i];
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * (x_row[i] - m) * s;
    }
    const float mean_dxhat = sum_dxhat / float(c), mean_dxhat_xhat = sum_dxhat_xhat / float(c);
    if (residual) {
      // Element i reads residual[i] and dy[i] before writing dx[i], so dx may alias either.
      // The same expression as the old `dx[i] += term` after a copy: the same rounding (the
      // compiler may contract it into one FMA, then in both), so cpu runs stay bit-identical.
      const float* residual_row = residual + size_t(row) * c;
#pragma omp simd
      for (int i = 0; i < c; ++i) {
        float xhat = (x_row[i] - m) * s;
        dx_row[i] = residual_row[i] + s * (dy_row[i] * g[i] - mean_dxhat - xhat * mean_dxhat_xhat);
      }
    } else {
      // Separate loop: without a residual dx may hold garbage (even NaN), so it is not read.
#pragma omp simd
      for (int i = 0; i < c; ++i) {
        float xhat = (x_row[i] - m) * s;
        dx_row[i] = s * (dy_row[i] * g[i] - mean_dxhat - xhat * mean_dxhat_xhat);
      }
    }
  }
}

void CpuOps::layernorm_backward_weight(float* dg, float* db, ConstView dyv, ConstView xv,
                                       const float* mean, const float* rstd, int n, int c) {
  const float *dy, *x;
  std::tie(dy, x) = fp32("layernorm_backward_weight", dyv, xv);
  // dg[C] += Σ_rows dy · x̂;  db[C] += Σ_rows dy. Threads own column chunks and walk all
  // rows in order: fixed sum order, no races, contiguous inner loops.
  constexpr int kChunk = 64;
  int chunks = (c + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (size_t(n) * c >= kParallelMinElements)
  for (int chunk = 0; chunk < chunks; ++chunk) {
    int c0 = chunk * kChunk, width = std::min(kChunk, c - c0);
    float sum_g[kChunk], sum_b[kChunk];
    for (int j = 0; j < width; ++j) {
      sum_g[j] = dg[c0 + j];
      sum_b[j] = db[c0 + j];
    }
    for (int row = 0; row < n; ++row) {
      const float* x_row = x + size_t(row) * c + c0;
      const float* dy_row = dy + size_t(row) * c + c0;
      const float m = mean[row], s = rstd[row];
#pragma omp simd
      for (int j = 0; j < width; ++j) {
        sum_g[j] += dy_row[j] * (x_row[j] - m) * s;
        sum_b[j] += dy_row[j];
      }
    }
    for (int j = 0; j < width; ++j) {
      dg[c0 + j] = sum_g[j];
      db[c0 + j] = sum_b[j];
    }
  }
}

}  // namespace pptrain::cpu::PPTRAIN_CPU_ISA
