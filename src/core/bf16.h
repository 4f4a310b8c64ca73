// bfloat16 on the host side: the top 16 bits of an IEEE fp32 (8 exponent bits, 7 mantissa
// bits), the storage type of weights and activations under `training.precision: bf16`.
// Host code only stores and moves it; arithmetic happens in fp32 (in kernels, or after
// to_float). Same size and bit layout as CUDA's __nv_bfloat16, so the cuda backend passes
// these pointers to kernels and cuBLAS unchanged.
#pragma once
#include <cstdint>
#include <cstring>

namespace pptrain {

struct bfloat16 {
  uint16_t bits = 0;

  // Round to nearest, ties to even (what __float2bfloat16_rn does); NaN stays a quiet NaN.
  static bfloat16 from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return bfloat16{uint16_t((u >> 16) | 0x40)};
    u += 0x7fffu + ((u >> 16) & 1u);
    return bfloat16{uint16_t(u >> 16)};
  }
  float to_float() const {
    uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
};
static_assert(sizeof(bfloat16) == 2, "bfloat16 must be 16 bits");

// The storage precision of weights and activations (training.precision).
enum class Precision { fp32, bf16 };

}  // namespace pptrain
