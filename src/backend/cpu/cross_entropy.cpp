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
}  // namespace

void CpuOps::ce_row_max(float* rmax, ConstView logitsv, int n, int vl, int valid) {
  const float *logits;
  std::tie(logits) = fp32("ce_row_max", logitsv);
  // rmax[N] = max over the valid columns (-inf for a shard of padding only)
  PPTRAIN_CHECK(valid >= 0 && valid <= vl, "valid=", valid, " vl=", vl);
#pragma omp parallel for schedule(static) if (size_t(n) * vl >= kParallelMinElements)
  for (int row = 0; row < n; ++row) {
    const float* l = logits + size_t(row) * vl;
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int j = 0; j < valid; ++j) m = l[j] > m ? l[j] : m;
    rmax[row] = m;
  }
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
    const float m = rmax[row];
    // exp in float, sum in double: tens of thousands of terms per row.
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < valid; ++j) sum += double(exp_approx(l[j] - m));
    sumexp[row] = float(sum);
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
  // dlogits[N,VL] = scale · (softmax - onehot(target)); padding columns 0. In place safe:
  // each element is read once before its own write.
  PPTRAIN_CHECK(valid >= 0 && valid <= vl, "valid=", valid, " vl=", vl);
#pragma omp parallel for schedule(static) if (size_t(n) * vl >= kParallelMinElements)
  for (int row = 0; row < n; ++row) {
    const float* l = logits + size_t(row) * vl;
    float* d = dlogits + size_t(row) * vl;
    const float m = rmax[row], factor = scale / sumexp[row];
#pragma omp simd
    for (int j = 0; j < valid; ++j) d[j] = factor * exp_approx(l[j] - m);
    for (int j = valid; j < vl; ++j) d[j] = 0.0f;
    const int col = target_column(targets[row], v0, valid);
    if (col >= 0) d[col] -= scale;
  }
}

// The split calls in order: the cpu keeps their bits (and its figures) at tp = 1.
void CpuOps::ce_fused(View dlogits, float* rmax, float* sumexp, float* target_logit, ConstView logits,
                      const int32_t* targets, int n, int vl, int valid, float scale) {
  ce_row_max(rmax, logits, n, vl, valid);
  ce_sumexp_target(sumexp, target_logit, logits, rmax, targets, n, vl, valid, 0);
  ce_backward(dlogits, logits, rmax, sumexp, targets, n, vl, valid, 0, scale);
}

}  // namespace pptrain::cpu::PPTRAIN_CPU_ISA
