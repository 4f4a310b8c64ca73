// Softmax cross-entropy on one vocabulary shard: logits[N,VL] hold columns [v0, v0+VL)
// of the full vocabulary, of which the first `valid` are real tokens and the rest
// padding. Padding never enters max or sum and gets a zero gradient. Parallel over rows;
// each row's reductions are vectorised with a fixed order.
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/vector_math.h"
#include "core/error.h"
#include "backend/cpu/isa_begin.h"  // last: see there

namespace pptrain::cpu::PPTRAIN_CPU_ISA {

namespace {
// Column of the target in this shard, or -1 when it lies in another shard.
int target_column(int32_t target, int v0, int valid) {
  return (target >= v0 && target - v0 < valid) ? target - v0 : -1;
}

// One row's steps, shared by the split ops and ce_fused so that both give the same bits.
// l[VL]: the row's logits. Always inlined: each op's OpenMP region then holds its own
// vector loop (GCC otherwise kept row_sumexp a call in the AVX-512 copy), which
// test_cpu_isa checks per op.

// max over the valid columns (-inf for a shard of padding only)
[[gnu::always_inline]] inline float row_max(const float* l, int valid) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int j = 0; j < valid; ++j) m = l[j] > m ? l[j] : m;
  return m;
}

// Σ_valid exp(l - m): exp in float, sum in double (tens of thousands of terms a row).
[[gnu::always_inline]] inline float row_sumexp(const float* l, float m, int valid) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < valid; ++j) sum += double(exp_approx(l[j] - m));
  return float(sum);
}

// d[VL] = scale · (softmax - onehot(col)), padding columns 0. d may be l: each element is
// read once before its own write.
[[gnu::always_inline]] inline void row_backward(float* d, const float* l, float m, float sumexp, int col, int vl, int valid, float scale) {
  const float factor = scale / sumexp;
#pragma omp simd
  for (int j = 0; j < valid; ++j) d[j] = factor * exp_approx(l[j] - m);
  for (int j = valid; j < vl; ++j) d[j] = 0.0f;
  if (col >= 0) d[col] -= scale;
}
}  // namespace

void CpuOps::ce_row_max(float* rmax, ConstView logitsv, int n, int vl, int valid) {
  const float *logits;
  std::tie(logits) = fp32("ce_row_max", logitsv);
  // rmax[N] = max over the valid columns
  PPTRAIN_CHECK(valid >= 0 && valid <= vl, "valid=", valid, " vl=", vl);
#pragma omp parallel for schedule(static) if (size_t(n) * vl >= kParallelMinElements)
  for (int row = 0; row < n; ++row) rmax[row] = row_max(logits + size_t(row) * vl, valid);
}

void CpuOps::ce_sumexp_target(float* sumexp, float* target_logit, ConstView logitsv,
                              const float* rmax, const int32_t* targets, int n, int vl, int valid,
                              int v0) {
  const float *logits;
  std::tie(logits) = fp32("ce_sumexp_target", logitsv);
  // sumexp[N] = Σ_valid exp(logit - rmax); target_logit[N] = logit of the target or 0
  PPTRAIN_CHECK(valid >= 0 && valid <= vl, "valid=", valid, " vl=", vl);
#pragma omp parallel for schedule(static) if (size_t(n) * vl >= kParallelMinElements)
  for (int row = 0; row < n; ++row) {
    const float* l = logits + size_t(row) * vl;
    sumexp[row] = row_sumexp(l, rmax[row], valid);
    const int col = target_column(targets[row], v0, valid);
    target_logit[row] = col >= 0 ? l[col] : 0.0f;
  }
}

void CpuOps::ce_loss_sum(double* loss_out, const float* rmax, const float* sumexp,
                         const float* target_logit, int n) {
  // Σ_rows log(Σ exp(logit)) - target logit, with log Σ exp = log(sumexp) + rmax.
  // N is one microbatch of tokens: a serial sum in double is cheap and order-fixed.
  double loss = 0.0;
  for (int row = 0; row < n; ++row)
    loss += std::log(double(sumexp[row])) + double(rmax[row]) - double(target_logit[row]);
  *loss_out = loss;
}

void CpuOps::ce_backward(View dlogitsv, ConstView logitsv, const float* rmax,
                         const float* sumexp, const int32_t* targets, int n, int vl, int valid,
                         int v0, float scale) {
  float *dlogits; const float *logits;
  std::tie(dlogits, logits) = fp32("ce_backward", dlogitsv, logitsv);
  // dlogits[N,VL] = scale · (softmax - onehot(target)); padding columns 0. In place safe.
  PPTRAIN_CHECK(valid >= 0 && valid <= vl, "valid=", valid, " vl=", vl);
#pragma omp parallel for schedule(static) if (size_t(n) * vl >= kParallelMinElements)
  for (int row = 0; row < n; ++row)
    row_backward(dlogits + size_t(row) * vl, logits + size_t(row) * vl, rmax[row], sumexp[row],
                 target_column(targets[row], v0, valid), vl, valid, scale);
}

// The split ops' steps row by row, each row's three passes while it is in the core's cache:
// one read of the [N, V] logits from memory and one write, where the split ops read them
// three times (the logits of GPT-2's vocabulary at 1,024 rows: 206 MB). The same bits.
void CpuOps::ce_fused(View dlogitsv, float* rmax, float* sumexp, float* target_logit, ConstView logitsv,
                      const int32_t* targets, int n, int vl, int valid, float scale) {
  float *dlogits; const float *logits;
  std::tie(dlogits, logits) = fp32("ce_fused", dlogitsv, logitsv);
  PPTRAIN_CHECK(valid >= 0 && valid <= vl, "valid=", valid, " vl=", vl);
#pragma omp parallel for schedule(static) if (size_t(n) * vl >= kParallelMinElements)
  for (int row = 0; row < n; ++row) {
    const float* l = logits + size_t(row) * vl;
    const float m = row_max(l, valid);
    const float s = row_sumexp(l, m, valid);
    const int col = target_column(targets[row], 0, valid);
    rmax[row] = m;
    sumexp[row] = s;
    target_logit[row] = col >= 0 ? l[col] : 0.0f;  // read before the row is overwritten (in place)
    row_backward(dlogits + size_t(row) * vl, l, m, s, col, vl, valid, scale);
  }
}

}  // namespace pptrain::cpu::PPTRAIN_CPU_ISA
