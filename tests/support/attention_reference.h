// Double-precision causal attention for the attention kernels' tests (test_kernels_flash_attention,
// test_kernels_llama), and their two comparisons: normwise for fp32 and the element-wise bf16
// bound (each test's header derives them).
//
// Shape is the test's layout: b, t, nh, hd; rows() = B·T, c() = NH·HD; q, k, v (bi, i, h, d)
// index qkv, k and v those of query head h (its group's under grouped-query attention); o
// (bi, i, h, d) indexes out and dout, stat(bi, h, i) lse.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "support/kernel_test.h"

namespace pptrain::kernels::testing {

// Forward from qkv; backward from qkv, dout and the given out and lse (P = exp(S − lse), delta =
// Σ dout·out), as the kernels compute it. abs_* are the sums of |terms| of the products a bf16
// kernel rounds an operand of.
struct AttentionReference {
  std::vector<double> out, lse, abs_out, dqkv, abs_dqkv;
};

template <typename Shape>
AttentionReference attention_forward_reference(const Shape& s, const std::vector<float>& qkv) {
  AttentionReference r;
  r.out.assign(s.rows() * s.c(), 0), r.abs_out.assign(s.rows() * s.c(), 0);
  r.lse.assign(size_t(s.b) * s.nh * s.t, 0);
  const double scale = 1.0 / std::sqrt(double(s.hd));
  std::vector<double> p(s.t);
  for (int bi = 0; bi < s.b; ++bi)
    for (int h = 0; h < s.nh; ++h)
      for (int i = 0; i < s.t; ++i) {
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j <= i; ++j) {
          double dot = 0;
          for (int d = 0; d < s.hd; ++d) dot += double(qkv[s.q(bi, i, h, d)]) * qkv[s.k(bi, j, h, d)];
          p[j] = dot * scale;
          mx = std::max(mx, p[j]);
        }
        for (int j = 0; j <= i; ++j) sum += std::exp(p[j] - mx);
        r.lse[s.stat(bi, h, i)] = mx + std::log(sum);
        for (int j = 0; j <= i; ++j) p[j] = std::exp(p[j] - mx) / sum;
        for (int d = 0; d < s.hd; ++d)
          for (int j = 0; j <= i; ++j) {
            r.out[s.o(bi, i, h, d)] += p[j] * qkv[s.v(bi, j, h, d)];
            r.abs_out[s.o(bi, i, h, d)] += p[j] * std::fabs(qkv[s.v(bi, j, h, d)]);
          }
      }
  return r;
}

template <typename Shape>
void attention_backward_reference(AttentionReference& r, const Shape& s, const std::vector<float>& qkv,
                                  const std::vector<float>& dout, const std::vector<float>& out,
                                  const std::vector<float>& lse) {
  r.dqkv.assign(qkv.size(), 0), r.abs_dqkv.assign(qkv.size(), 0);
  const double scale = 1.0 / std::sqrt(double(s.hd));
  for (int bi = 0; bi < s.b; ++bi)
    for (int h = 0; h < s.nh; ++h)
      for (int i = 0; i < s.t; ++i) {
        double delta = 0;
        for (int d = 0; d < s.hd; ++d) delta += double(dout[s.o(bi, i, h, d)]) * out[s.o(bi, i, h, d)];
        for (int j = 0; j <= i; ++j) {
          double sc = 0, dp = 0;
          for (int d = 0; d < s.hd; ++d) {
            sc += double(qkv[s.q(bi, i, h, d)]) * qkv[s.k(bi, j, h, d)];
            dp += double(dout[s.o(bi, i, h, d)]) * qkv[s.v(bi, j, h, d)];
          }
          const double p = std::exp(sc * scale - lse[s.stat(bi, h, i)]), ds = p * (dp - delta);
          for (int d = 0; d < s.hd; ++d) {
            const double go = dout[s.o(bi, i, h, d)], qd = qkv[s.q(bi, i, h, d)], kd = qkv[s.k(bi, j, h, d)];
            r.dqkv[s.v(bi, j, h, d)] += p * go, r.abs_dqkv[s.v(bi, j, h, d)] += std::fabs(p * go);
            r.dqkv[s.q(bi, i, h, d)] += scale * ds * kd, r.abs_dqkv[s.q(bi, i, h, d)] += scale * std::fabs(ds * kd);
            r.dqkv[s.k(bi, j, h, d)] += scale * ds * qd, r.abs_dqkv[s.k(bi, j, h, d)] += scale * std::fabs(ds * qd);
          }
        }
      }
}

// ‖got − ref‖₂ ≤ rel·‖ref‖₂.
inline ::testing::AssertionResult normwise(const std::vector<float>& got, const std::vector<double>& ref,
                                           double rel = kFp32Tolerance) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) err += std::pow(got[i] - ref[i], 2), norm += ref[i] * ref[i];
  err = std::sqrt(err), norm = std::sqrt(norm);
  if (err <= rel * norm) return ::testing::AssertionSuccess() << "ratio " << err / (rel * norm);
  return ::testing::AssertionFailure() << "‖got − ref‖ = " << err << " > " << rel << " · ‖ref‖ = " << rel * norm
                                       << " (" << err / (rel * norm) << " times the bound)";
}

// |got − ref| ≤ 2⁻⁸ (abs + |ref|)(1 + 2⁻⁸) + the fp32 part, element-wise; the worst ratio to
// the bound in *worst_out if given.
inline ::testing::AssertionResult within_bf16(const std::vector<float>& got, const std::vector<double>& ref,
                                              const std::vector<double>& abs, double* worst_out = nullptr) {
  double largest = 0;
  for (double x : ref) largest = std::max(largest, std::fabs(x));
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    // (1 + u): the output rounding is relative to the unrounded value, itself within u·A of ref.
    const double bound = kBf16Rounding * (abs[i] + std::fabs(ref[i])) * (1 + kBf16Rounding) +
                         kFp32Tolerance * std::max(std::fabs(ref[i]), kTinyFraction * largest);
    const double ratio = std::fabs(got[i] - ref[i]) / bound;
    if (!(ratio <= worst)) worst = std::isnan(ratio) ? INFINITY : ratio, at = i;
  }
  if (worst_out) *worst_out = worst;
  if (worst <= 1) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "element " << at << ": got " << got[at] << ", expected " << ref[at] << " ("
                                       << worst << " times the bf16 bound)";
}

}  // namespace pptrain::kernels::testing
