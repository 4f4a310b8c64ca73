// Rotary position embedding (RoPE) in the rotate-half convention of Hugging Face's Llama:
// each query and key head's first and second halves are the two coordinates of HD/2 planes,
// plane i turned by pos · inv_freq[i] (core/rotary.h: theta^(-2i/HD), scaled as the model's
// rope_scaling says). The angles are computed the way transformers does (their product
// with the position in fp32), their cosine and sine in double and rounded once, into a
// [T, HD/2] table per call; then one parallel pass over the rows rotates every head in place.
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "backend/cpu/isa_begin.h"  // last: see there

namespace pptrain::cpu::PPTRAIN_CPU_ISA {

namespace {

void check_shape(const char* op, int b, int t, int nh, int nkv, int hd, const RotaryFrequencies& rope) {
  PPTRAIN_CHECK(b >= 0 && t > 0 && nh > 0 && nkv > 0 && hd > 0 && hd % 2 == 0 && rope.planes == hd / 2, op,
                " shape b=", b, " t=", t, " nh=", nh, " nkv=", nkv, " hd=", hd, " planes=", rope.planes,
                " (hd even, planes hd/2)");
}

// cos[T, HD/2] then sin[T, HD/2] into table.
void fill_table(float* table, int t, int hd, const RotaryFrequencies& rope) {
  const int half = hd / 2;
  float* cos_table = table;
  float* sin_table = table + size_t(t) * half;
  for (int i = 0; i < half; ++i) {
    const float inv_freq = rope.inv_freq[i];
    for (int pos = 0; pos < t; ++pos) {
      const float angle = float(pos) * inv_freq;
      cos_table[size_t(pos) * half + i] = float(std::cos(double(angle)));
      sin_table[size_t(pos) * half + i] = float(std::sin(double(angle)));
    }
  }
}

// Rotates the first nh + nkv heads of every row of x[B·T, (nh + 2·nkv)·hd] by +angle
// (sign 1) or -angle (sign -1, the transpose).
void rotate(float* x, const float* table, int b, int t, int nh, int nkv, int hd, float sign) {
  const int half = hd / 2, rotated_heads = nh + nkv;
  const size_t row_stride = size_t(nh + 2 * nkv) * hd, rows = size_t(b) * t;
  const float* cos_table = table;
  const float* sin_table = table + size_t(t) * half;
#pragma omp parallel for schedule(static) if (rows * rotated_heads * hd >= kParallelMinElements)
  for (long long row = 0; row < (long long)rows; ++row) {
    const int pos = int(row % t);
    const float* c = cos_table + size_t(pos) * half;
    const float* s = sin_table + size_t(pos) * half;
    for (int head = 0; head < rotated_heads; ++head) {
      float* x1 = x + size_t(row) * row_stride + size_t(head) * hd;
      float* x2 = x1 + half;
#pragma omp simd
      for (int i = 0; i < half; ++i) {
        const float first = x1[i], second = x2[i], sin_signed = sign * s[i];
        x1[i] = first * c[i] - second * sin_signed;
        x2[i] = second * c[i] + first * sin_signed;
      }
    }
  }
}

}  // namespace

void CpuOps::rotary_forward(View qkvv, int b, int t, int nh, int nkv, int hd, const RotaryFrequencies& rope) {
  float* qkv;
  std::tie(qkv) = fp32("rotary_forward", qkvv);
  check_shape("rotary_forward", b, t, nh, nkv, hd, rope);
  float* table = rotary_table_.reserve(size_t(t) * hd);
  fill_table(table, t, hd, rope);
  rotate(qkv, table, b, t, nh, nkv, hd, 1.0f);
}

void CpuOps::rotary_backward_input(View dqkvv, int b, int t, int nh, int nkv, int hd,
                                   const RotaryFrequencies& rope) {
  float* dqkv;
  std::tie(dqkv) = fp32("rotary_backward_input", dqkvv);
  check_shape("rotary_backward_input", b, t, nh, nkv, hd, rope);
  // The rotation is orthogonal: its transpose is the rotation by -angle.
  float* table = rotary_table_.reserve(size_t(t) * hd);
  fill_table(table, t, hd, rope);
  rotate(dqkv, table, b, t, nh, nkv, hd, -1.0f);
}

}  // namespace pptrain::cpu::PPTRAIN_CPU_ISA
