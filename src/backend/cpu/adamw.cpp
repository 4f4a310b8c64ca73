// AdamW update and the squared norm used for gradient clipping.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/isa_begin.h"  // last: see there

namespace pptrain::cpu::PPTRAIN_CPU_ISA {

using Index = long long;

void CpuOps::adamw(float* p_out, float* m_out, float* v_out, View p_working, const float* p, const float* g,
                   const float* m, const float* v, size_t n, float grad_scale, float lr, float b1, float b2,
                   float eps, float wd, int t) {
  // The cpu backend has no bf16 working copy: fp32 models compute with the masters.
  float* working;
  std::tie(working) = fp32("adamw", p_working);
  if (working) fail("adamw: p_working is the bf16 working copy or null, got an fp32 view");
  // g' = g · grad_scale (one fp32 multiply, as scale() would have done in place);
  // m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'²;  m̂ = m / (1-b1^t);  v̂ = v / (1-b2^t);
  // p -= lr (m̂ / (√v̂ + eps) + wd p). Bias corrections in double: 1 - b2^t is ~1e-3 at t=1.
  // Element i reads only element i of each input before writing element i of each output,
  // so in place (an output equal to its input) and out of place give the same bits.
  const float m_correction = float(1.0 / (1.0 - std::pow(double(b1), t)));
  const float v_correction = float(1.0 / (1.0 - std::pow(double(b2), t)));
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (Index i = 0; i < Index(n); ++i) {
    const float grad = g[i] * grad_scale;
    const float m_new = b1 * m[i] + (1.0f - b1) * grad;
    const float v_new = b2 * v[i] + (1.0f - b2) * grad * grad;
    const float m_hat = m_new * m_correction, v_hat = v_new * v_correction;
    const float p_old = p[i];
    m_out[i] = m_new;
    v_out[i] = v_new;
    p_out[i] = p_old - lr * (m_hat / (std::sqrt(v_hat) + eps) + wd * p_old);
  }
}

void CpuOps::adamw_multi(const std::vector<AdamwTensor>& tensors, float grad_scale, float lr, float b1, float b2,
                         float eps, int t) {
  for (const AdamwTensor& x : tensors)
    adamw(x.p_out, x.m_out, x.v_out, x.p_working, x.p, x.g, x.m, x.v, x.n, grad_scale, lr, b1, b2, eps, x.wd, t);
}

namespace {

constexpr size_t kBlock = size_t(1) << 14;  // elements per partial sum
constexpr int kLanes = 16;                   // double accumulators per block
constexpr int kGroup = 4;                    // blocks one thread sums side by side

// out[b] = Σ x[b·kBlock + i]² over i < len, for the G blocks starting at x. Lane j of a
// block takes elements j, j + kLanes, j + 2·kLanes, ... and the lanes are added in order,
// so a block's sum has the same bits whatever G is, however many threads run and whichever
// ISA copy this is (the lane loop is the same operations at any vector width, and a float's
// square is exact in double, so an FMA gives the bits of a multiply and an add). Summing G
// blocks side by side gives the memory system G read streams per thread instead of one:
// on a 2-core Emerald Rapids VM, 124M elements took 20 ms instead of 29 (25 GB/s, not 17).
template <int G>
void sum_blocks(const float* x, size_t len, double* out) {
  double acc[G][kLanes] = {};
  const size_t vec_end = len / kLanes * kLanes;
  for (size_t i = 0; i < vec_end; i += kLanes)
    for (int b = 0; b < G; ++b) {
      const float* xb = x + size_t(b) * kBlock + i;
#pragma omp simd
      for (int j = 0; j < kLanes; ++j) acc[b][j] += double(xb[j]) * double(xb[j]);
    }
  for (int b = 0; b < G; ++b) {
    const float* xb = x + size_t(b) * kBlock;
    for (size_t i = vec_end; i < len; ++i) acc[b][i - vec_end] += double(xb[i]) * double(xb[i]);
    double sum = 0.0;
    for (int j = 0; j < kLanes; ++j) sum += acc[b][j];
    out[b] = sum;
  }
}

}  // namespace

double CpuOps::sum_squares(const float* x, size_t n) {
  // Partial sums over fixed blocks of kBlock elements, then a serial sum of the partials.
  const size_t blocks = (n + kBlock - 1) / kBlock, groups = (n / kBlock) / kGroup;
  if (block_sums_.size() < blocks) block_sums_.resize(blocks);
  double* partial = block_sums_.data();
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (Index g = 0; g < Index(groups); ++g)
    sum_blocks<kGroup>(x + size_t(g) * kGroup * kBlock, kBlock, partial + size_t(g) * kGroup);
  for (size_t blk = groups * kGroup; blk < blocks; ++blk)  // < kGroup blocks left, the last maybe short
    sum_blocks<1>(x + blk * kBlock, std::min(kBlock, n - blk * kBlock), partial + blk);
  double total = 0.0;
  for (size_t blk = 0; blk < blocks; ++blk) total += partial[blk];
  return total;
}

}  // namespace pptrain::cpu::PPTRAIN_CPU_ISA
