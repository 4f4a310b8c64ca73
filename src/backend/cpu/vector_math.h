// Branch-free float exp that GCC vectorises inside `#pragma omp simd` loops, and GELU's
// constants. glibc's expf only has vector variants under -ffast-math, and the softmax of the
// cross-entropy (N·V exps per microbatch) would otherwise run one element at a time.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/isa.h"

namespace pptrain::cpu::PPTRAIN_CPU_ISA {

// exp(x) with ~1 ulp error (Cephes expf). x = n·ln2 + r, |r| <= ln2/2, so
// exp(x) = 2^n · exp(r), exp(r) from a degree-7 polynomial and 2^n built in the
// exponent bits. Inputs below -87.34 give 0 (no denormals), above 88.38 give +inf,
// NaN stays NaN, so a diverging loss still shows. simd::exp_nonpositive (simd.h) takes the
// same steps on explicit vectors for x <= 0, without the clamps that range does not need.
namespace exp_constants {
constexpr float kHi = 88.3762626647949f, kLo = -87.3365447504f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;  // ln2 = hi + lo, hi exact
constexpr float kRound = 12582912.0f;  // 1.5·2^23: v + kRound - kRound = rint(v)
// exp(r) ≈ 1 + r + r²·(c0 r⁵ + c1 r⁴ + ... + c5), Horner from c0
constexpr float kPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                            4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
}  // namespace exp_constants

#pragma omp declare simd notinbranch
inline float exp_approx(float x) {
  using namespace exp_constants;
  float xc = x > kLo ? x : kLo;  // NaN -> kLo, so the integer path stays defined
  xc = xc < kHi ? xc : kHi;
  float n = (xc * kLog2e + kRound) - kRound;
  float r = xc - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float p = kPoly[0];
  p = p * r + kPoly[1];
  p = p * r + kPoly[2];
  p = p * r + kPoly[3];
  p = p * r + kPoly[4];
  p = p * r + kPoly[5];
  p = p * (r * r) + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;  // 2^n, n in [-126, 127]
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  float y = p * scale;
  y = x > kHi ? INFINITY : y;
  y = x < kLo ? 0.0f : y;
  return x == x ? y : x;
}

// GELU, tanh approximation: gelu(x) = 0.5 x (1 + tanh(u)), u = √(2/π)(x + 0.044715 x³)
// (elementwise.cpp).
constexpr float kGeluScale = 0.7978845608028654f;  // √(2/π)
constexpr float kGeluCubic = 0.044715f;

}  // namespace pptrain::cpu::PPTRAIN_CPU_ISA
