// Register-tiled single-thread GEMM for attention's small per-head products (a head's
// T×T scores against HD = 32..128 columns): C[m,n] = α·A·B + β·C with A read through
// arbitrary (row, k) strides, so Aᵀ costs nothing, and B row-major.
//
// Why not OpenBLAS: its sgemm packs both operands and sizes its blocking for large
// matrices; on a head's 6..128-row products that overhead is a large share of the call
// (measured on a Zen 3 core, HD 32, T 128: QKᵀ 48.6 GFLOP/s, P·V 59.5, against 76.6 and 78.1
// for these kernels, K packed once per head included). The kernel also lets attention stop
// each row strip at its causal limit instead of a whole block's.
//
// Each output element is Σ_k A(r,k)·B(k,n) accumulated by FMA in k order, then α·sum, then
// β·C added by one more FMA: the same operations in every lane, full or masked (the last
// n mod kWidth columns), so results do not depend on how the matrix was cut into tiles or
// over threads (tests/test_tile_gemm.cpp).
//
// Include this after simd.h, which is included after isa_begin.h (see there): its functions
// are compiled for the translation unit's ISA and live in that ISA's namespace (isa.h). The
// vectors are simd.h's: AVX-512's in the AVX-512 copy, AVX2's where the build's ISA has AVX2
// and FMA (the default x86-64-v3), and plain arrays elsewhere.
#pragma once

namespace pptrain::cpu::PPTRAIN_CPU_ISA::tile {

using namespace simd;  // Vec, kWidth, Mask and their operations (simd.h)

// The most rows a micro-tile holds. 6 rows × 2 vectors are 12 accumulators, plus 2 loaded B
// vectors and a broadcast: 15 of AVX2's 16 registers. Per k the tile does 12 FMAs for 8 loads,
// so it is bound by the FMA units (2 per cycle on Zen 3 and on Intel cores since Skylake),
// not the load ports. AVX-512 keeps the shape (twice the columns per vector).
constexpr int kRows = 6;

// A(r, k) = a[r·row_stride + k·k_stride]: (lda, 1) for A, (1, lda) for Aᵀ.
struct Strided {
  const float* a;
  ptrdiff_t row_stride, k_stride;
  const float* at(ptrdiff_t r, ptrdiff_t k) const { return a + r * row_stride + k * k_stride; }
};

// Rows [0, MR) × columns [0, NV·kWidth) of C; with kTail, the last vector's lanes are only
// those of `tail` (the columns n mod kWidth), loaded and stored under that mask. A masked
// lane does the same FMAs as a full one, so the tail's results are the bits a wider matrix
// would have had there.
template <int MR, int NV, bool kTail = false>
inline void micro_tile(int k, float alpha, Strided a, const float* b, ptrdiff_t ldb, float beta, float* c,
                       ptrdiff_t ldc, Mask tail = no_lanes()) {
  // Vector v of a row of B or C: the last one under the tail's mask.
  auto load_v = [&](const float* p, int v) { return kTail && v == NV - 1 ? load(p, tail) : load(p); };
  Vec acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = zero();
  for (int kk = 0; kk < k; ++kk) {
    Vec bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = load_v(b + kk * ldb + v * kWidth, v);
    for (int r = 0; r < MR; ++r) {
      const Vec av = broadcast(a.at(r, kk));
      for (int v = 0; v < NV; ++v) acc[r][v] = fma(av, bv[v], acc[r][v]);
    }
  }
  const Vec alpha_v = splat(alpha), beta_v = splat(beta);
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) {
      float* cp = c + r * ldc + v * kWidth;
      Vec x = mul(alpha_v, acc[r][v]);
      if (beta != 0.0f) x = fma(beta_v, load_v(cp, v), x);  // β = 0 never reads C (it may hold NaN)
      if (kTail && v == NV - 1)
        store(cp, x, tail);
      else
        store(cp, x);
    }
}

// Rows [0, MR) × all n columns of C: panels of two vectors, then what is left (up to two
// vectors, the last one masked). A scalar tail of up to kWidth - 1 columns cost as much as
// the vector part of a short causal strip (measured: AVX-512 Q·Kᵀ at T = 128 slower than AVX2).
template <int MR>
inline void row_tile(int n, int k, float alpha, Strided a, const float* b, ptrdiff_t ldb, float beta, float* c,
                     ptrdiff_t ldc) {
  int j = 0;
  for (; j + 2 * kWidth <= n; j += 2 * kWidth) micro_tile<MR, 2>(k, alpha, a, b + j, ldb, beta, c + j, ldc);
  const int rest = n - j;
  if (rest > kWidth)
    micro_tile<MR, 2, true>(k, alpha, a, b + j, ldb, beta, c + j, ldc, first_lanes(rest - kWidth));
  else if (rest == kWidth)
    micro_tile<MR, 1>(k, alpha, a, b + j, ldb, beta, c + j, ldc);
  else if (rest > 0)
    micro_tile<MR, 1, true>(k, alpha, a, b + j, ldb, beta, c + j, ldc, first_lanes(rest));
}

// pack[kk·MR + r] = A(r, kk): an A read across its rows (Aᵀ of a row-major matrix) as one
// contiguous panel. Read in place, every k would touch a new cache line (and, for rows of 4
// KiB or more, a new page) once per column panel; packed, once in all (measured on a Zen 3
// core, dK and dV of T = 1024, HD = 64: 125 ms a call in place).
template <int MR>
inline Strided packed(Strided a, int k, float* pack) {
  for (int kk = 0; kk < k; ++kk)
    for (int r = 0; r < MR; ++r) pack[kk * MR + r] = *a.at(r, kk);
  return {pack, 1, MR};
}

// Packed only when the rows are read for more than one column panel: with one (n up to two
// vectors: HD = 32 under AVX-512) each k's line is touched once either way, and the packing
// is a copy of every element for nothing (measured on a Zen 4 core, T = 128, HD = 32: dK and
// dV 268 µs a call packed, 193 in place).
template <int MR>
inline void row_tile_packing(int n, int k, float alpha, Strided a, const float* b, ptrdiff_t ldb, float beta,
                             float* c, ptrdiff_t ldc, float* pack) {
  if (pack && a.k_stride != 1 && n > 2 * kWidth) a = packed<MR>(a, k, pack);
  row_tile<MR>(n, k, alpha, a, b, ldb, beta, c, ldc);
}

// C[m,n] = α·Σ_k A(r,k)·B[k,n] + β·C (β = 0: C is only written). B row-major with row
// stride ldb, C with ldc. Any m, n, k ≥ 0. pack (kRows·k floats, or null) is where an A
// read across its rows is packed first.
inline void gemm(int m, int n, int k, float alpha, Strided a, const float* b, ptrdiff_t ldb, float beta, float* c,
                 ptrdiff_t ldc, float* pack = nullptr) {
  int r = 0;
  for (; r + kRows <= m; r += kRows)
    row_tile_packing<kRows>(n, k, alpha, Strided{a.at(r, 0), a.row_stride, a.k_stride}, b, ldb, beta, c + r * ldc,
                            ldc, pack);
  const Strided rest{a.at(r, 0), a.row_stride, a.k_stride};
  float* c_rest = c + r * ldc;
  switch (m - r) {
    case 5: row_tile_packing<5>(n, k, alpha, rest, b, ldb, beta, c_rest, ldc, pack); break;
    case 4: row_tile_packing<4>(n, k, alpha, rest, b, ldb, beta, c_rest, ldc, pack); break;
    case 3: row_tile_packing<3>(n, k, alpha, rest, b, ldb, beta, c_rest, ldc, pack); break;
    case 2: row_tile_packing<2>(n, k, alpha, rest, b, ldb, beta, c_rest, ldc, pack); break;
    case 1: row_tile_packing<1>(n, k, alpha, rest, b, ldb, beta, c_rest, ldc, pack); break;
    default: break;
  }
}

// dst[j·cols + d] = src[j·ld + d]: a head's rows of the packed qkv (or of out/dout) as one
// contiguous [rows, cols] matrix, the B operand of the products over keys. In place, B's
// rows are ld floats apart (3·C: 9 KiB in GPT-2 124M), a new page every k of the product.
inline void copy_rows(float* dst, const float* src, int rows, int cols, ptrdiff_t ld) {
  for (int j = 0; j < rows; ++j)
    for (int d = 0; d < cols; ++d) dst[ptrdiff_t(j) * cols + d] = src[j * ld + d];
}

// dst[d·rows + j] = src[j·ld + d] for j < rows, d < cols: a head's K or V [rows, HD]
// (row stride ld inside the packed qkv) as Kᵀ [HD, rows], the B operand of Q·Kᵀ. In square
// blocks of one vector's width, transposed in registers (simd::transpose_block), so each
// store fills whole vectors of dst while the block's source lines stay in L1 (element by
// element, each store hit a line, and from T = 1024 a page, of its own: measured 92% of a
// flash backward's time outside the products there; in 16-row blocks one float at a time,
// still 9% of a T = 128, HD = 32 head's attention on a Zen 4 core). The edges that do not
// fill a block go one float at a time.
inline void transpose(float* dst, const float* src, int rows, int cols, ptrdiff_t ld) {
  const int full_rows = rows / kWidth * kWidth, full_cols = cols / kWidth * kWidth;
  for (int j0 = 0; j0 < full_rows; j0 += kWidth) {
    for (int d0 = 0; d0 < full_cols; d0 += kWidth)
      transpose_block(dst + ptrdiff_t(d0) * rows + j0, rows, src + j0 * ld + d0, ld);
    for (int d = full_cols; d < cols; ++d)
      for (int j = j0; j < j0 + kWidth; ++j) dst[ptrdiff_t(d) * rows + j] = src[j * ld + d];
  }
  for (int d = 0; d < cols; ++d)
    for (int j = full_rows; j < rows; ++j) dst[ptrdiff_t(d) * rows + j] = src[j * ld + d];
}

}  // namespace pptrain::cpu::PPTRAIN_CPU_ISA::tile
