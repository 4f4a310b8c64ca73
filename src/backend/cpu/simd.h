// Explicit vectors of the including file's ISA, for the cpu loops whose rows are too short
// for `omp simd`: a causal attention row of T = 128 is 1 to 8 vectors, and GCC's
// vectorised loop wraps those in a peeled prologue, a scalar remainder and a horizontal
// reduction per loop, which cost more than the row itself (measured on a Zen 4 core, AVX-512:
// a softmax row of 16 scores 29 ns, of 128 scores 74 ns; written with these, a T = 128
// head's rows 2.3x faster). The vectors are AVX-512's in the AVX-512 copy, AVX2's where the
// build's ISA has AVX2 and FMA (the default x86-64-v3), and plain arrays of 8 floats
// elsewhere, which do the same operations one lane at a time.
//
// Include this after isa_begin.h, with vector_math.h, <cmath>, <cstdint>, <cstring> and, on
// x86-64, <immintrin.h> before it (a header included after isa_begin.h would be compiled for
// AVX-512 in that copy: see there): its functions are compiled for the translation unit's
// ISA and live in that ISA's namespace (isa.h).
#pragma once

namespace pptrain::cpu::PPTRAIN_CPU_ISA::simd {

#if defined(PPTRAIN_CPU_AVX512) || (defined(__AVX2__) && defined(__FMA__))
// Eight lanes to one: halves, then pairs, then neighbours. The order is fixed, so a row's
// result is too. (GCC 12's _mm512_reduce_*_ps warn of an uninitialised variable at -O3.)
inline float reduce8_max(__m256 v) {
  __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  x = _mm_max_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}
inline float reduce8_add(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}
#endif

#if defined(PPTRAIN_CPU_AVX512)
using Vec = __m512;
constexpr int kWidth = 16;
// Where GCC 12's plain intrinsic starts from an undefined vector (and warns, at -O3, that it
// may be used uninitialised: GCC bug 105593), its masked form with every lane set and a
// defined source is used: the same instruction.
constexpr __mmask16 kAll = 0xFFFF;
inline Vec load(const float* p) { return _mm512_loadu_ps(p); }
inline void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline Vec broadcast(const float* p) { return _mm512_set1_ps(*p); }
inline Vec splat(float x) { return _mm512_set1_ps(x); }
inline Vec zero() { return _mm512_setzero_ps(); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec fnma(Vec a, Vec b, Vec c) { return _mm512_fnmadd_ps(a, b, c); }  // c − a·b, one rounding
inline Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
inline Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
inline Vec sub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
inline Vec div(Vec a, Vec b) { return _mm512_div_ps(a, b); }
// max/min return b where a is NaN (the x86 instructions' rule, kept by the plain path).
inline Vec max(Vec a, Vec b) { return _mm512_mask_max_ps(a, kAll, a, b); }
inline Vec min(Vec a, Vec b) { return _mm512_mask_min_ps(a, kAll, a, b); }
// Lanes i and i + 8 first, then as AVX2's eight.
inline __m256 half(Vec v, int which) {
  return which ? _mm512_mask_extractf32x8_ps(_mm256_setzero_ps(), 0xFF, v, 1)
               : _mm512_mask_extractf32x8_ps(_mm256_setzero_ps(), 0xFF, v, 0);
}
inline float reduce_max(Vec v) { return reduce8_max(_mm256_max_ps(half(v, 0), half(v, 1))); }
inline float reduce_add(Vec v) { return reduce8_add(_mm256_add_ps(half(v, 0), half(v, 1))); }
// The first `cols` lanes of a vector (0 < cols <= kWidth): loads zero the others, stores
// leave them; neither touches memory past them, so a tail may end at the end of a buffer.
using Mask = __mmask16;
inline Mask first_lanes(int cols) { return Mask((1u << cols) - 1u); }
inline Mask no_lanes() { return 0; }
inline Vec load(const float* p, Mask m) { return _mm512_maskz_loadu_ps(m, p); }
inline void store(float* p, Vec v, Mask m) { _mm512_mask_storeu_ps(p, m, v); }
inline Vec select(Mask m, Vec a, Vec b) { return _mm512_mask_blend_ps(m, b, a); }  // m ? a : b
inline Mask greater(Vec a, Vec b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
inline Mask less(Vec a, Vec b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
inline Mask ordered(Vec a) { return _mm512_cmp_ps_mask(a, a, _CMP_ORD_Q); }  // not NaN
// 2^n for integral n in [−126, 127], built in the exponent bits (n truncated, as a cast).
inline Vec exp2_integral(Vec n) {
  const __m512i zero_i = _mm512_setzero_si512();
  const __m512i n_i = _mm512_mask_cvttps_epi32(zero_i, kAll, n);
  const __m512i bits = _mm512_mask_slli_epi32(zero_i, kAll, _mm512_add_epi32(n_i, _mm512_set1_epi32(127)), 23);
  return _mm512_castsi512_ps(bits);
}
#elif defined(__AVX2__) && defined(__FMA__)
using Vec = __m256;
constexpr int kWidth = 8;
inline Vec load(const float* p) { return _mm256_loadu_ps(p); }
inline void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec broadcast(const float* p) { return _mm256_broadcast_ss(p); }
inline Vec splat(float x) { return _mm256_set1_ps(x); }
inline Vec zero() { return _mm256_setzero_ps(); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec fnma(Vec a, Vec b, Vec c) { return _mm256_fnmadd_ps(a, b, c); }
inline Vec mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
inline Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
inline Vec sub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
inline Vec div(Vec a, Vec b) { return _mm256_div_ps(a, b); }
inline Vec max(Vec a, Vec b) { return _mm256_max_ps(a, b); }
inline Vec min(Vec a, Vec b) { return _mm256_min_ps(a, b); }
inline float reduce_max(Vec v) { return reduce8_max(v); }
inline float reduce_add(Vec v) { return reduce8_add(v); }
using Mask = __m256i;  // lane i taken when its sign bit is set
inline Mask first_lanes(int cols) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(cols), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline Mask no_lanes() { return _mm256_setzero_si256(); }
inline Vec load(const float* p, Mask m) { return _mm256_maskload_ps(p, m); }
inline void store(float* p, Vec v, Mask m) { _mm256_maskstore_ps(p, m, v); }
inline Vec select(Mask m, Vec a, Vec b) { return _mm256_blendv_ps(b, a, _mm256_castsi256_ps(m)); }
inline Mask greater(Vec a, Vec b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_GT_OQ)); }
inline Mask less(Vec a, Vec b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_LT_OQ)); }
inline Mask ordered(Vec a) { return _mm256_castps_si256(_mm256_cmp_ps(a, a, _CMP_ORD_Q)); }
inline Vec exp2_integral(Vec n) {
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_castsi256_ps(bits);
}
#else
// Builds for other CPUs (or an x86-64 baseline below v3): eight lanes in plain C++, the
// same operations one lane at a time (fused multiply-adds as __builtin_fmaf), so the
// results are the same bits as AVX2's.
struct Vec {
  float lane[8];
};
constexpr int kWidth = 8;
template <typename F>
inline Vec each(F f) {
  Vec v;
  for (int i = 0; i < kWidth; ++i) v.lane[i] = f(i);
  return v;
}
inline Vec load(const float* p) {
  return each([&](int i) { return p[i]; });
}
inline void store(float* p, Vec v) {
  for (int i = 0; i < kWidth; ++i) p[i] = v.lane[i];
}
inline Vec splat(float x) {
  return each([&](int) { return x; });
}
inline Vec broadcast(const float* p) { return splat(*p); }
inline Vec zero() { return splat(0.0f); }
inline Vec fma(Vec a, Vec b, Vec c) {
  return each([&](int i) { return __builtin_fmaf(a.lane[i], b.lane[i], c.lane[i]); });
}
inline Vec fnma(Vec a, Vec b, Vec c) {
  return each([&](int i) { return __builtin_fmaf(-a.lane[i], b.lane[i], c.lane[i]); });
}
inline Vec mul(Vec a, Vec b) {
  return each([&](int i) { return a.lane[i] * b.lane[i]; });
}
inline Vec add(Vec a, Vec b) {
  return each([&](int i) { return a.lane[i] + b.lane[i]; });
}
inline Vec sub(Vec a, Vec b) {
  return each([&](int i) { return a.lane[i] - b.lane[i]; });
}
inline Vec div(Vec a, Vec b) {
  return each([&](int i) { return a.lane[i] / b.lane[i]; });
}
inline Vec max(Vec a, Vec b) {
  return each([&](int i) { return a.lane[i] > b.lane[i] ? a.lane[i] : b.lane[i]; });
}
inline Vec min(Vec a, Vec b) {
  return each([&](int i) { return a.lane[i] < b.lane[i] ? a.lane[i] : b.lane[i]; });
}
// AVX2's order: lanes i and i + 4, then the pairs 0/2 and 1/3, then 0 and 1.
template <typename F>
inline float reduce(Vec v, F f) {
  float x[4];
  for (int i = 0; i < 4; ++i) x[i] = f(v.lane[i], v.lane[i + 4]);
  return f(f(x[0], x[2]), f(x[1], x[3]));
}
inline float reduce_max(Vec v) {
  return reduce(v, [](float a, float b) { return a > b ? a : b; });
}
inline float reduce_add(Vec v) {
  return reduce(v, [](float a, float b) { return a + b; });
}
struct Mask {
  bool lane[8];
};
inline Mask first_lanes(int cols) {
  Mask m;
  for (int i = 0; i < kWidth; ++i) m.lane[i] = i < cols;
  return m;
}
inline Mask no_lanes() { return first_lanes(0); }
inline Vec load(const float* p, Mask m) {
  return each([&](int i) { return m.lane[i] ? p[i] : 0.0f; });
}
inline void store(float* p, Vec v, Mask m) {
  for (int i = 0; i < kWidth; ++i)
    if (m.lane[i]) p[i] = v.lane[i];
}
inline Vec select(Mask m, Vec a, Vec b) {
  return each([&](int i) { return m.lane[i] ? a.lane[i] : b.lane[i]; });
}
template <typename F>
inline Mask compare(Vec a, Vec b, F f) {
  Mask m;
  for (int i = 0; i < kWidth; ++i) m.lane[i] = f(a.lane[i], b.lane[i]);
  return m;
}
inline Mask greater(Vec a, Vec b) {
  return compare(a, b, [](float x, float y) { return x > y; });
}
inline Mask less(Vec a, Vec b) {
  return compare(a, b, [](float x, float y) { return x < y; });
}
inline Mask ordered(Vec a) {
  return compare(a, a, [](float x, float y) { return x == y; });
}
inline Vec exp2_integral(Vec n) {
  return each([&](int i) {
    const int32_t bits = (static_cast<int32_t>(n.lane[i]) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return scale;
  });
}
#endif

// exp_approx (vector_math.h) of every lane, its steps one by one, a·b + c fused where GCC
// contracts the scalar code (at -O2 and above): within 2 ulp of exp, and the same specials
// (tests/test_simd.cpp). −inf gives exactly 0, so masked scores drop out of a softmax's sum.
inline Vec exp(Vec x) {
  using namespace exp_constants;
  const Vec hi = splat(kHi), lo = splat(kLo);
  const Vec xc = min(max(x, lo), hi);  // NaN -> kLo (max's rule), so the integer path stays defined
  const Vec n = sub(fma(xc, splat(kLog2e), splat(kRound)), splat(kRound));
  Vec r = fnma(n, splat(kLn2Hi), xc);
  r = fnma(n, splat(kLn2Lo), r);
  Vec p = splat(kPoly[0]);
  for (int i = 1; i < 6; ++i) p = fma(p, r, splat(kPoly[i]));
  p = add(fma(p, mul(r, r), r), splat(1.0f));
  Vec y = mul(p, exp2_integral(n));
  y = select(greater(x, hi), splat(INFINITY), y);
  y = select(less(x, lo), zero(), y);
  return select(ordered(x), y, x);
}

}  // namespace pptrain::cpu::PPTRAIN_CPU_ISA::simd
