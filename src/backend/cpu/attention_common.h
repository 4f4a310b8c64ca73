// What the cpu attention's two paths share (attention.cpp: the plain one, which keeps the
// probabilities; attention_flash.cpp: the fused one, which recomputes them): the views of a
// head inside the packed tensors, the causal row's softmax, and how work spreads over the
// threads. Include it after vector_math.h, isa_begin.h, simd.h and tile_gemm.h: like them, it is
// compiled for the including file's ISA and lives in that ISA's namespace (isa.h).
#pragma once
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "core/error.h"

namespace pptrain::cpu::PPTRAIN_CPU_ISA::attention {

constexpr int kRows = tile::kRows;

// Views of one (batch, query head) pair inside the packed tensors.
struct HeadView {
  const float* q;  // [T,HD], row stride (NH + 2·NKV)·HD
  const float* k;  // of the head's key/value head
  const float* v;
  size_t qkv_stride;
  size_t out_offset;  // of (b, t=0, h) in out/dout, row stride NH·HD
  size_t q_offset, k_offset, v_offset;  // of (b, t=0, h) resp. its key/value head in qkv/dqkv
};

inline HeadView head_view(const float* qkv, int b, int h, int t, int nh, int nkv, int hd) {
  const int kv = h / (nh / nkv);
  const size_t stride = size_t(nh + 2 * nkv) * hd, row0 = size_t(b) * t * stride;
  HeadView view;
  view.qkv_stride = stride;
  view.out_offset = size_t(b) * t * nh * hd + size_t(h) * hd;
  view.q_offset = row0 + size_t(h) * hd;
  view.k_offset = row0 + size_t(nh + kv) * hd;
  view.v_offset = row0 + size_t(nh + nkv + kv) * hd;
  view.q = qkv + view.q_offset;
  view.k = qkv + view.k_offset;
  view.v = qkv + view.v_offset;
  return view;
}

inline void check_shape(const char* op, int b, int t, int nh, int nkv, int hd) {
  PPTRAIN_CHECK(b >= 0 && t > 0 && nh > 0 && nkv > 0 && nh % nkv == 0 && hd > 0, op, " shape b=", b, " t=", t,
                " nh=", nh, " hd=", hd, " nkv=", nkv);
}

// How far the score products of a strip whose last row is i run: row i has i + 1 scores,
// rounded up to whole 16-float vectors (AVX-512's width, a multiple of AVX2's) within the
// row's `capacity`, so that a product's last column panel is a full one rather than a masked
// remainder; the scores computed past a row's diagonal are never read (the row functions
// below mask them) and are overwritten with 0.
inline int causal_vector_length(int i, int capacity) {
  constexpr int kVector = 16;
  return std::min(capacity, (i + kVector) / kVector * kVector);
}

// Row i's scores [0, i] as the vectors the row functions below take: `full` whole ones, then
// `rem` lanes of one more (none when rem is 0) read and written under `tail`, whose other
// lanes are the masked scores. Every row loop runs on vectors: a row of T = 128 is 1 to 8 of
// them, too few for `omp simd`'s prologue, scalar remainder and per-loop reductions (simd.h).
struct CausalRow {
  int full, rem;
  simd::Mask tail;
  explicit CausalRow(int i) : full((i + 1) / simd::kWidth), rem((i + 1) % simd::kWidth), tail(simd::first_lanes(rem)) {}
  int tail_at() const { return full * simd::kWidth; }
};

// row[from, capacity) <- 0.
inline void zero_row_from(float* row, int from, int capacity) {
  using namespace simd;
  int j = from;
  for (; j + kWidth <= capacity; j += kWidth) store(row + j, zero());
  if (j < capacity) store(row + j, zero(), first_lanes(capacity - j));
}

// Stores the tail vector of a row (its masked lanes 0) within the row's capacity, then zeroes
// the rest of the row.
inline void store_tail_and_zero_rest(float* row, const CausalRow& cr, simd::Vec tail_values, int capacity) {
  using namespace simd;
  int next = cr.tail_at();
  if (cr.rem) {
    store(row + next, select(cr.tail, tail_values, zero()), first_lanes(std::min(kWidth, capacity - next)));
    next += kWidth;
  }
  zero_row_from(row, std::min(next, capacity), capacity);
}

// The max of a row's scores and the sum of their exps after it: what the flash path's
// log-sum-exp is made of.
struct RowSums {
  float max, sum;
};

// In place: row[0..=i] <- softmax(row[0..=i]), row[i+1..capacity) <- 0. The masked lanes of
// the tail vector are −inf going into the max and the exps (exp(−inf) is exactly 0), so they
// add nothing to either. A NaN score makes the row NaN (a diverging run still shows).
inline RowSums causal_softmax_row(float* row, int i, int capacity) {
  using namespace simd;
  const CausalRow cr(i);
  const Vec minus_inf = splat(-INFINITY);
  Vec most = minus_inf, last = minus_inf;
  for (int v = 0; v < cr.full; ++v) most = max(most, load(row + v * kWidth));
  if (cr.rem) {
    last = select(cr.tail, load(row + cr.tail_at(), cr.tail), minus_inf);
    most = max(most, last);
  }
  const float max_score = reduce_max(most);
  const Vec shift = splat(max_score);
  Vec sums = zero();
  for (int v = 0; v < cr.full; ++v) {
    const Vec e = exp_nonpositive(sub(load(row + v * kWidth), shift));
    store(row + v * kWidth, e);
    sums = add(sums, e);
  }
  if (cr.rem) {
    last = exp_nonpositive(sub(last, shift));
    sums = add(sums, last);
  }
  const float sum = reduce_add(sums);
  const Vec inv_sum = splat(1.0f / sum);
  for (int v = 0; v < cr.full; ++v) store(row + v * kWidth, mul(load(row + v * kWidth), inv_sum));
  store_tail_and_zero_rest(row, cr, mul(last, inv_sum), capacity);
  return {max_score, sum};
}

// How an op spreads over the threads. With enough work, threads take whole (batch, head)
// pairs when there are at least as many pairs as threads, else the pairs run one after
// another and each pair's strips are spread over the threads. With little work (forking
// threads costs more than it saves) everything runs on the calling thread.
struct Split {
  bool over_pairs, over_strips;
};
inline Split split_of(int pairs, int t) {
  const bool enough_work = size_t(pairs) * t * t >= kParallelMinElements;
  const bool enough_pairs = pairs >= omp_get_max_threads();
  return {enough_work && enough_pairs, enough_work && !enough_pairs};
}

// Runs body(pair) for every pair, one pair per thread when over_pairs, else in order.
template <typename Body>
void for_each_pair(int pairs, bool over_pairs, Body&& body) {
  if (over_pairs) {
#pragma omp parallel for schedule(static)
    for (int pair = 0; pair < pairs; ++pair) body(pair);
  } else {
    for (int pair = 0; pair < pairs; ++pair) body(pair);
  }
}

// Runs strip(first, end) over [0, n) in pieces of kRows, spread over the threads if parallel.
// Later strips of a causal head are longer, so they are handed out one by one. Not parallel,
// no OpenMP region at all: inside one (even of one thread) omp_get_thread_num() would be 0,
// and a strip would take thread 0's scratch instead of its pair's thread's.
template <typename Strip>
void for_each_strip(int n, bool parallel, Strip&& strip) {
  const int strips = (n + kRows - 1) / kRows;
  if (parallel) {
#pragma omp parallel for schedule(dynamic)
    for (int s = 0; s < strips; ++s) strip(s * kRows, std::min(n, (s + 1) * kRows));
  } else {
    for (int s = 0; s < strips; ++s) strip(s * kRows, std::min(n, (s + 1) * kRows));
  }
}

// Consecutive pieces of one thread's scratch array, handed out in order.
struct Carve {
  float* at;
  float* take(size_t floats) {
    float* piece = at;
    at += floats;
    return piece;
  }
};

// Asks for `rows` rows of `cols` floats, `ld` apart, to be brought into the L2 cache (a
// hint: no fault, no wait, nothing changes in memory).
// The most floats of the next head asked for ahead: a quarter of a 1 MiB L2 (Zen 4), so the
// hint cannot push out what the current head works on (at T = 1024 one head's P is 4 MiB).
constexpr size_t kPrefetchFloats = (size_t(256) << 10) / sizeof(float);
inline void prefetch_rows(const float* a, int rows, int cols, ptrdiff_t ld) {
  constexpr int kLine = 64 / sizeof(float);
  for (int j = 0; j < rows; ++j)
    for (int d = 0; d < cols; d += kLine) __builtin_prefetch(a + j * ld + d, 0, 2);
}

// dst[0:rows·cols) <- src, with stores that bypass the caches where dst is aligned for them:
// the probabilities a forward keeps are read again only by the backward, microbatches later.
inline void stream_rows(float* dst, const float* src, int rows, int cols) {
  using namespace simd;
  const size_t n = size_t(rows) * cols;
  if (reinterpret_cast<uintptr_t>(dst) % kStreamAlign != 0 || n % kWidth != 0) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  for (size_t j = 0; j < n; j += kWidth) stream(dst + j, load(src + j));
}

inline tile::Strided rows_of(const float* a, ptrdiff_t ld) { return {a, ld, 1}; }       // A = a[r·ld + k]
inline tile::Strided columns_of(const float* a, ptrdiff_t ld) { return {a, 1, ld}; }    // A = aᵀ: a[k·ld + r]

}  // namespace pptrain::cpu::PPTRAIN_CPU_ISA::attention
