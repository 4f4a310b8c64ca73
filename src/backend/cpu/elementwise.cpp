// Elementwise ops: GELU (tanh approximation), add, accumulate, scale, bias broadcast.
// Memory-bound loops, parallel over threads and vectorised (vector_math.h keeps GELU's
// exp in the vector unit).
#include <algorithm>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/vector_math.h"
#include "backend/cpu/isa_begin.h"  // last: see there

namespace pptrain::cpu::PPTRAIN_CPU_ISA {

// Loop indices are signed (OpenMP canonical loops); sizes beyond 2^63 do not occur.
using Index = long long;

void CpuOps::gelu_forward(View yv, ConstView xv, size_t n) {
  float *y; const float *x;
  std::tie(y, x) = fp32("gelu_forward", yv, xv);
  // y[n] = gelu(x[n]); y may alias x (elementwise)
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (Index i = 0; i < Index(n); ++i) y[i] = gelu_value(x[i]);
}

void CpuOps::gelu_backward(View dxv, ConstView dyv, ConstView xv, size_t n) {
  float *dx; const float *dy, *x;
  std::tie(dx, dy, x) = fp32("gelu_backward", dxv, dyv, xv);
  // dx[n] = dy · gelu'(x)
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (Index i = 0; i < Index(n); ++i) dx[i] = dy[i] * gelu_derivative(x[i]);
}

void CpuOps::add(View yv, ConstView av, ConstView bv, size_t n) {
  float *y; const float *a, *b;
  std::tie(y, a, b) = fp32("add", yv, av, bv);
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (Index i = 0; i < Index(n); ++i) y[i] = a[i] + b[i];
}

void CpuOps::accumulate(View yv, ConstView xv, size_t n) {
  float *y; const float *x;
  std::tie(y, x) = fp32("accumulate", yv, xv);
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (Index i = 0; i < Index(n); ++i) y[i] += x[i];
}

void CpuOps::scale(View yv, float s, size_t n) {
  float *y;
  std::tie(y) = fp32("scale", yv);
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (Index i = 0; i < Index(n); ++i) y[i] *= s;
}

void CpuOps::add_bias(View yv, ConstView bv, int n, int c) {
  float *y; const float *b;
  std::tie(y, b) = fp32("add_bias", yv, bv);
  // y[N,C] += b[C]
#pragma omp parallel for schedule(static) if (size_t(n) * c >= kParallelMinElements)
  for (int row = 0; row < n; ++row) {
    float* y_row = y + size_t(row) * c;
#pragma omp simd
    for (int i = 0; i < c; ++i) y_row[i] += b[i];
  }
}

void CpuOps::copy_columns(View yv, ConstView xv, int rows, int cols, int y_stride, int x_stride) {
  float* y;
  const float* x;
  std::tie(y, x) = fp32("copy_columns", yv, xv);
  PPTRAIN_CHECK(rows >= 0 && cols >= 0 && y_stride >= cols && x_stride >= cols, "copy_columns rows=", rows,
                " cols=", cols, " y_stride=", y_stride, " x_stride=", x_stride);
  // y[rows, cols] at stride y_stride <- x at stride x_stride
#pragma omp parallel for schedule(static) if (size_t(rows) * cols >= kParallelMinElements)
  for (int row = 0; row < rows; ++row)
    std::copy_n(x + size_t(row) * x_stride, cols, y + size_t(row) * y_stride);
}

}  // namespace pptrain::cpu::PPTRAIN_CPU_ISA
