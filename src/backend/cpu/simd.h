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
// A store past the caches (p aligned to kStreamAlign), for data read again much later; such
// stores are weakly ordered: store_fence() before another thread may read them.
constexpr size_t kStreamAlign = 64;
inline void stream(float* p, Vec v) { _mm512_stream_ps(p, v); }
inline void store_fence() { _mm_sfence(); }
inline Vec broadcast(const float* p) { return _mm512_set1_ps(*p); }
inline Vec splat(float x) { return _mm512_set1_ps(x); }
inline Vec zero() { return _mm512_setzero_ps(); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec fnma(Vec a, Vec b, Vec c) { return _mm512_fnmadd_ps(a, b, c); }  // c − a·b, one rounding
inline Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
inline Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
inline Vec sub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
inline Vec divide(Vec a, Vec b) { return _mm512_div_ps(a, b); }  // correctly rounded, as a scalar a / b
inline Vec absolute(Vec a) {  // the sign bit cleared
  return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7FFFFFFF)));
}
// max returns b where either is NaN (the x86 instruction's rule, kept by the plain path).
inline Vec max(Vec a, Vec b) { return _mm512_mask_max_ps(a, kAll, a, b); }
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
inline Mask sign_lanes(Vec v) { return _mm512_movepi32_mask(_mm512_castps_si512(v)); }  // sign bit set (−0 too)
// 2^n for integral n in [−127, 127], built in the exponent bits (n truncated, as a cast; n =
// −127 gives 0).
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
constexpr size_t kStreamAlign = 32;
inline void stream(float* p, Vec v) { _mm256_stream_ps(p, v); }
inline void store_fence() { _mm_sfence(); }
inline Vec broadcast(const float* p) { return _mm256_broadcast_ss(p); }
inline Vec splat(float x) { return _mm256_set1_ps(x); }
inline Vec zero() { return _mm256_setzero_ps(); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec fnma(Vec a, Vec b, Vec c) { return _mm256_fnmadd_ps(a, b, c); }
inline Vec mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
inline Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
inline Vec sub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
inline Vec divide(Vec a, Vec b) { return _mm256_div_ps(a, b); }
inline Vec absolute(Vec a) { return _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))); }
inline Vec max(Vec a, Vec b) { return _mm256_max_ps(a, b); }
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
inline Mask sign_lanes(Vec v) { return _mm256_castps_si256(v); }
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
constexpr size_t kStreamAlign = 1;
inline void stream(float* p, Vec v) { store(p, v); }
inline void store_fence() {}
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
inline Vec divide(Vec a, Vec b) {
  return each([&](int i) { return a.lane[i] / b.lane[i]; });
}
inline Vec absolute(Vec a) {
  return each([&](int i) { return std::fabs(a.lane[i]); });
}
inline Vec max(Vec a, Vec b) {
  return each([&](int i) { return a.lane[i] > b.lane[i] ? a.lane[i] : b.lane[i]; });  // b where either is NaN
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
// The sign bit read as an integer: std::signbit here made GCC 12 fail with an internal error
// (an unrecognizable V2SI shift) when it vectorised the loop for x86-64-v2 at -O3.
inline Mask sign_lanes(Vec v) {
  Mask m;
  for (int i = 0; i < kWidth; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v.lane[i], sizeof bits);
    m.lane[i] = (bits >> 31) != 0;
  }
  return m;
}
inline Vec exp2_integral(Vec n) {
  return each([&](int i) {
    // NaN (a NaN score: max() passes it) to int is undefined: taken as -127, a scale of 0,
    // and the polynomial's NaN times 0 is still NaN.
    const float v = n.lane[i] >= -127.0f ? n.lane[i] : -127.0f;
    const int32_t bits = (static_cast<int32_t>(v) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return scale;
  });
}
#endif

// exp(x) of every lane for x <= 0, −inf and NaN: a score minus its row's max or log-sum-exp,
// what a softmax takes. exp_approx's steps (vector_math.h), a·b + c fused where GCC contracts
// the scalar code at -O2 and above, without its clamps and selects, which x <= 0 does not
// need: the only clamp is x >= −88, where n = −127 makes 2^n's bits 0 and the result exactly
// 0 (−inf included: masked scores drop out of the sum); NaN passes max() and the polynomial
// as NaN. So for x in [−87.34, 0] the bits are exp_approx's; in (−88, −87.34), where
// exp_approx flushes to 0, 0 or the true value (below 2^−126); below, 0 as there
// (tests/test_simd.cpp).
// The selects cost more than the rest: on a Zen 4 core, AVX-512, a T = 128 head's softmax
// rows took 126 µs with exp_approx's three and 70 without (each compares into a mask register).
inline Vec exp_nonpositive(Vec x) {
  using namespace exp_constants;
  const Vec xc = max(splat(-88.0f), x);
  const Vec n = sub(fma(xc, splat(kLog2e), splat(kRound)), splat(kRound));
  Vec r = fnma(n, splat(kLn2Hi), xc);
  r = fnma(n, splat(kLn2Lo), r);
  Vec p = splat(kPoly[0]);
  for (int i = 1; i < 6; ++i) p = fma(p, r, splat(kPoly[i]));
  p = add(fma(p, mul(r, r), r), splat(1.0f));
  return mul(p, exp2_integral(n));
}

// dst[d·ldd + j] = src[j·lds + d] for j, d < kWidth: one square block of a matrix
// transposed, kWidth rows loaded and kWidth stored (element by element, each of the kWidth²
// stores hit a line of its own; tile::transpose). A copy: the same bits in every ISA.
inline void transpose_block(float* dst, ptrdiff_t ldd, const float* src, ptrdiff_t lds) {
#if defined(PPTRAIN_CPU_AVX512)
  // Four rounds of two-input shuffles (floats within 128-bit lanes, then pairs of them, then
  // 128-bit lanes across registers twice): row r's element d ends in register d, lane r.
  // The masked forms with every lane set, as kAll says why.
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * lds);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_mask_unpacklo_ps(r[i], kAll, r[i], r[i + 1]);
    t[i + 1] = _mm512_mask_unpackhi_ps(r[i], kAll, r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_mask_shuffle_ps(t[i], kAll, t[i], t[i + 2], 0x44);
    r[i + 1] = _mm512_mask_shuffle_ps(t[i], kAll, t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm512_mask_shuffle_ps(t[i + 1], kAll, t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm512_mask_shuffle_ps(t[i + 1], kAll, t[i + 1], t[i + 3], 0xEE);
  }
  for (int h = 0; h < 16; h += 8)
    for (int i = 0; i < 4; ++i) {
      t[h + i] = _mm512_mask_shuffle_f32x4(r[h + i], kAll, r[h + i], r[h + i + 4], 0x88);
      t[h + i + 4] = _mm512_mask_shuffle_f32x4(r[h + i], kAll, r[h + i], r[h + i + 4], 0xDD);
    }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_mask_shuffle_f32x4(t[i], kAll, t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_mask_shuffle_f32x4(t[i], kAll, t[i], t[i + 8], 0xDD);
  }
  for (int i = 0; i < 16; ++i) _mm512_storeu_ps(dst + i * ldd, r[i]);
#elif defined(__AVX2__) && defined(__FMA__)
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * lds);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20);
    t[i + 4] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
  }
  for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + i * ldd, t[i]);
#else
  for (int d = 0; d < kWidth; ++d)
    for (int j = 0; j < kWidth; ++j) dst[d * ldd + j] = src[j * lds + d];
#endif
}

}  // namespace pptrain::cpu::PPTRAIN_CPU_ISA::simd
