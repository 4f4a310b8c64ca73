// Causal self-attention core. Work is spread over (batch, head) pairs, one pair per thread,
// when there are enough of them; otherwise the pairs run one after another and each pair's
// row (and column) strips are spread over the threads. Either way every product is one of
// tile_gemm.h's single-thread kernels, whose results do not depend on the split: the same
// bits on any thread count.
//
// Rows are taken in strips of tile::kRows (6) queries. Strip [r, last) only attends to keys
// [0, last), so its products stop there (rounded up to the softmax's vector length): the
// causal mask skips all but a sliver of the masked half of QKᵀ and P·V instead of computing
// and discarding it. Kᵀ (and Vᵀ for dP = dO·Vᵀ) is packed once per head, the B operand of
// the score products.
//
// Layout: qkv[B,T,(NH + 2·NKV)·HD]; query head h is columns h·HD.., key head j columns
// (NH + j)·HD.., value head j columns (NH + NKV + j)·HD..; query head h uses key/value head
// h / (NH/NKV) (grouped-query attention; NKV = NH is multi-head attention, C = NH·HD and the
// row 3C wide). out[B,T,NH·HD]. The backward runs one key/value head per task, its group's
// query heads one after another, so dK and dV add up without races in a fixed order.
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/vector_math.h"
#include "core/error.h"
#include "backend/cpu/isa_begin.h"  // last: see there
#include "backend/cpu/tile_gemm.h"  // after it: compiled for this file's ISA (see there)

namespace pptrain::cpu::PPTRAIN_CPU_ISA {

namespace {

// Row block of the flash backward: its P and dS tiles [kBlock, T] are what dK and dV are
// accumulated from, kBlock rows deep per product.
constexpr int kBlock = 64;
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

HeadView head_view(const float* qkv, int b, int h, int t, int nh, int nkv, int hd) {
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

void check_shape(const char* op, int b, int t, int nh, int nkv, int hd) {
  PPTRAIN_CHECK(b >= 0 && t > 0 && nh > 0 && nkv > 0 && nh % nkv == 0 && hd > 0, op, " shape b=", b, " t=", t,
                " nh=", nh, " hd=", hd, " nkv=", nkv);
}

// The length a causal row's loops run to: row i has i + 1 scores, and the loops below would
// finish its last (i + 1) mod width of them one at a time, the exp's branches included (on
// T = 128 rows, as many scalar iterations as vector ones). Instead the row is padded with
// −inf up to a whole number of 16-float vectors (AVX-512's width, a multiple of AVX2's),
// within the row's `capacity` (its masked part, which is zeroed after anyway): −inf adds
// nothing to a max, and exp_approx(−inf − max) is exactly 0, so the padded elements come out
// as the masked ones must, 0, and the sum is unchanged.
int causal_vector_length(int i, int capacity) {
  constexpr int kVector = 16;
  return std::min(capacity, (i + kVector) / kVector * kVector);
}

int pad_causal_row(float* row, int i, int capacity) {
  const int padded = causal_vector_length(i, capacity);
  std::fill(row + i + 1, row + padded, -INFINITY);
  return padded;
}

// The max of a row's scores and the sum of their exps after it: what the flash path's
// log-sum-exp is made of.
struct RowSums {
  float max, sum;
};

// In place: row[0..=i] <- softmax(row[0..=i]), row[i+1..capacity) <- 0.
RowSums causal_softmax_row(float* row, int i, int capacity) {
  const int n = pad_causal_row(row, i, capacity);
  // From j = 0, not 1: n is a whole number of vectors, n − 1 is not (a scalar tail of 15).
  float max_score = row[0];
#pragma omp simd reduction(max : max_score)
  for (int j = 0; j < n; ++j) max_score = row[j] > max_score ? row[j] : max_score;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < n; ++j) {
    float e = exp_approx(row[j] - max_score);
    row[j] = e;
    sum += e;
  }
  const float inv_sum = 1.0f / sum;
#pragma omp simd
  for (int j = 0; j < n; ++j) row[j] *= inv_sum;
  std::fill(row + n, row + capacity, 0.0f);
  return {max_score, sum};
}

// How an op spreads over the threads. With enough work, threads take whole (batch, head)
// pairs when there are at least as many pairs as threads, else the pairs run one after
// another and each pair's strips are spread over the threads. With little work (forking
// threads costs more than it saves) everything runs on the calling thread.
struct Split {
  bool over_pairs, over_strips;
};
Split split_of(int pairs, int t) {
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
void prefetch_rows(const float* a, int rows, int cols, ptrdiff_t ld) {
  constexpr int kLine = 64 / sizeof(float);
  for (int j = 0; j < rows; ++j)
    for (int d = 0; d < cols; d += kLine) __builtin_prefetch(a + j * ld + d, 0, 2);
}

tile::Strided rows_of(const float* a, ptrdiff_t ld) { return {a, ld, 1}; }       // A = a[r·ld + k]
tile::Strided columns_of(const float* a, ptrdiff_t ld) { return {a, 1, ld}; }    // A = aᵀ: a[k·ld + r]

}  // namespace

void CpuOps::attention_forward(View outv, View probsv, ConstView qkvv, int b, int t, int nh, int hd) {
  fp32("attention_forward", outv, probsv, qkvv);
  check_shape("attention", b, t, nh, nh, hd);
  gqa_attention_forward(outv, probsv, qkvv, b, t, nh, nh, hd);
}

void CpuOps::attention_backward_input(View dqkvv, ConstView doutv, ConstView qkvv, ConstView probsv, int b, int t,
                                      int nh, int hd) {
  fp32("attention_backward_input", dqkvv, doutv, qkvv, probsv);
  check_shape("attention", b, t, nh, nh, hd);
  gqa_attention_backward_input(dqkvv, doutv, qkvv, probsv, b, t, nh, nh, hd);
}

void CpuOps::gqa_attention_forward(View outv, View probsv, ConstView qkvv, int b, int t, int nh, int nkv, int hd) {
  float *out, *probs; const float *qkv;
  std::tie(out, probs, qkv) = fp32("gqa_attention_forward", outv, probsv, qkvv);
  // probs[B,NH,T,T] = softmax(q kᵀ / √HD, causal); out[B,T,NH·HD] = probs · v
  check_shape("attention", b, t, nh, nkv, hd);
  const int pairs = b * nh;
  const int ld_out = nh * hd;
  const float score_scale = 1.0f / std::sqrt(float(hd));
  const Split split = split_of(pairs, t);
  reserve_thread_scratch(2 * size_t(hd) * t);
  for_each_pair(pairs, split.over_pairs, [&](int bh) {
    const HeadView head = head_view(qkv, bh / nh, bh % nh, t, nh, nkv, hd);
    const int ld = int(head.qkv_stride);
    Carve carve{thread_scratch_[omp_get_thread_num()].reserve(2 * size_t(hd) * t)};
    float *kt = carve.take(size_t(hd) * t), *v = carve.take(size_t(hd) * t);  // kᵀ [HD,T], v [T,HD]
    tile::transpose(kt, head.k, t, hd, ld);
    tile::copy_rows(v, head.v, t, hd, ld);
    float* p = probs + size_t(bh) * t * t;
    float* o = out + head.out_offset;
    for_each_strip(t, split.over_strips, [&](int r, int last) {
      const int rows = last - r;
      // p[r:last, 0:cols] = q[r:last] · k[0:cols]ᵀ / √HD; cols covers every row's padded length
      const int cols = causal_vector_length(last - 1, t);
      tile::gemm(rows, cols, hd, score_scale, rows_of(head.q + size_t(r) * ld, ld), kt, t, 0.0f,
                 p + size_t(r) * t, t);
      for (int i = r; i < last; ++i) causal_softmax_row(p + size_t(i) * t, i, t);
      // o[r:last] = p[r:last, 0:last] · v[0:last]  (p is 0 past each row's diagonal)
      tile::gemm(rows, hd, last, 1.0f, rows_of(p + size_t(r) * t, t), v, hd, 0.0f, o + size_t(r) * ld_out, ld_out);
    });
  });
}

void CpuOps::gqa_attention_backward_input(View dqkvv, ConstView doutv, ConstView qkvv, ConstView probsv, int b, int t,
                                          int nh, int nkv, int hd) {
  float *dqkv; const float *dout, *qkv, *probs;
  std::tie(dqkv, dout, qkv, probs) = fp32("gqa_attention_backward_input", dqkvv, doutv, qkvv, probsv);
  // With P = probs, dO = dout (per query head):
  //   dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP − rowsum(dP ∘ P)),
  //   dQ = dS K / √HD,  dK = dSᵀ Q / √HD;
  // a key/value head's dK and dV are the sums over its group's query heads.
  // P and dS are zero above the diagonal, so dQ rows [r, last) only need keys [0, last), and
  // dV/dK rows [c, end) only rows i >= c of P/dS.
  check_shape("attention", b, t, nh, nkv, hd);
  const int group = nh / nkv, kv_pairs = b * nkv;
  const int ld_out = nh * hd;
  const float score_scale = 1.0f / std::sqrt(float(hd));
  const Split split = split_of(kv_pairs, t);
  // vᵀ [HD,T], k, q, dO [T,HD] and dS [T,T] of the pair's thread, then each strip's
  // thread's packed panel [T,kRows]
  const size_t pack_at = 4 * size_t(hd) * t + size_t(t) * t, scratch = pack_at + size_t(kRows) * t;
  reserve_thread_scratch(scratch);
  for_each_pair(kv_pairs, split.over_pairs, [&](int bkv) {
    Carve carve{thread_scratch_[omp_get_thread_num()].reserve(scratch)};
    float *vt = carve.take(size_t(hd) * t), *k = carve.take(size_t(hd) * t), *q = carve.take(size_t(hd) * t),
          *d_o = carve.take(size_t(hd) * t), *ds = carve.take(size_t(t) * t);
    const int batch = bkv / nkv;
    for (int g = 0; g < group; ++g) {
      const int h = bkv % nkv * group + g;
      const HeadView head = head_view(qkv, batch, h, t, nh, nkv, hd);
      const int ld = int(head.qkv_stride);
      // The next query head's inputs (its q, dO and P, and at a new pair k and v) are asked
      // into L2 while this one computes. In a training step the backward reads activations
      // the forward wrote microbatches earlier, long gone from the caches; without the hint
      // every strip of a head starts by waiting for memory (measured: pp 2 ZB-V on a Zen 4
      // VM, this op 0.99 ms a call in the step against 0.56 ms warm; with it 0.87 ms).
      if (g + 1 < group || bkv + 1 < kv_pairs) {
        const int next_pair = g + 1 < group ? bkv : bkv + 1, next_g = g + 1 < group ? g + 1 : 0;
        const int next_batch = next_pair / nkv, next_h = next_pair % nkv * group + next_g;
        const HeadView next = head_view(qkv, next_batch, next_h, t, nh, nkv, hd);
        // Its first rows, as many as fit the budget (all of them at T = 128): a row of P
        // and one of q, dO, k and v each.
        const int rows = int(std::min(size_t(t), kPrefetchFloats / (size_t(t) + 4 * size_t(hd))));
        prefetch_rows(probs + (size_t(next_batch) * nh + next_h) * t * t, rows, t, t);
        prefetch_rows(next.q, rows, hd, ld);
        prefetch_rows(dout + next.out_offset, rows, hd, ld_out);
        if (next_g == 0) {
          prefetch_rows(next.k, rows, hd, ld);
          prefetch_rows(next.v, rows, hd, ld);
        }
      }
      if (g == 0) {  // the group's one key/value head
        tile::transpose(vt, head.v, t, hd, ld);
        tile::copy_rows(k, head.k, t, hd, ld);
      }
      tile::copy_rows(q, head.q, t, hd, ld);
      tile::copy_rows(d_o, dout + head.out_offset, t, hd, ld_out);
      const float* p = probs + (size_t(batch) * nh + h) * t * t;
      float* dq = dqkv + head.q_offset;
      float* dk = dqkv + head.k_offset;
      float* dv = dqkv + head.v_offset;
      const float kv_beta = g == 0 ? 0.0f : 1.0f;  // the group's first head writes dK, dV; the others add

      for_each_strip(t, split.over_strips, [&](int r, int last) {
        const int rows = last - r;
        // dP[r:last, 0:cols] = dO[r:last] · v[0:cols]ᵀ
        tile::gemm(rows, causal_vector_length(last - 1, t), hd, 1.0f, rows_of(d_o + size_t(r) * hd, hd), vt, t, 0.0f,
                   ds + size_t(r) * t, t);
        for (int i = r; i < last; ++i) {
          float* ds_row = ds + size_t(i) * t;
          const float* p_row = p + size_t(i) * t;
          // Whole vectors as in the forward (pad_causal_row): P is 0 past the diagonal (the
          // forward zeroed it), so the padded elements add 0 to the dot and get dS = 0; their
          // dP is reset to 0 first so that an infinite one cannot make 0·inf.
          const int n = causal_vector_length(i, t);
          std::fill(ds_row + i + 1, ds_row + n, 0.0f);
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
          for (int j = 0; j < n; ++j) dot += ds_row[j] * p_row[j];
#pragma omp simd
          for (int j = 0; j < n; ++j) ds_row[j] = p_row[j] * (ds_row[j] - dot);
          std::fill(ds_row + n, ds_row + t, 0.0f);  // masked scores get no gradient (dK reads them)
        }
        // dQ[r:last] = dS[r:last, 0:last] · k[0:last] / √HD
        tile::gemm(rows, hd, last, score_scale, rows_of(ds + size_t(r) * t, t), k, hd, 0.0f, dq + size_t(r) * ld, ld);
      });
      for_each_strip(t, split.over_strips, [&](int c, int end) {
        const int cols = end - c, tail = t - c;
        float* pack = thread_scratch_[omp_get_thread_num()].reserve(scratch) + pack_at;
        // dV[c:end] (+)= P[c:T, c:end]ᵀ · dO[c:T]
        tile::gemm(cols, hd, tail, 1.0f, columns_of(p + size_t(c) * t + c, t), d_o + size_t(c) * hd, hd, kv_beta,
                   dv + size_t(c) * ld, ld, pack);
        // dK[c:end] (+)= dS[c:T, c:end]ᵀ · q[c:T] / √HD
        tile::gemm(cols, hd, tail, score_scale, columns_of(ds + size_t(c) * t + c, t), q + size_t(c) * hd, hd, kv_beta,
                   dk + size_t(c) * ld, ld, pack);
      });
    }
  });
}

// ---- fused (flash) attention: the T×T matrix is never stored ------------------------------
//
// The forward takes a head's rows in strips as the plain path does, a strip's scores in a
// per-thread tile of kRows·T floats; the backward in blocks of kBlock rows, its P and dS in
// two tiles of kBlock·T (O(T) scratch per thread, never [B,NH,T,T]). The forward keeps
// lse_i = max_j s_ij + log Σ_j exp(s_ij − max_j s_ij), the natural log-sum-exp of row i's
// scaled scores over j ≤ i, so the backward recomputes P_ij = exp(s_ij − lse_i) exactly from
// the scores instead of reading them back.

namespace {

// In place, row i of a block with the scores s[0..=i]: s[j] <- softmax_j(s), s[i+1..r1) <- 0;
// returns the row's log-sum-exp.
float causal_softmax_lse_row(float* s, int i, int r1) {
  const RowSums sums = causal_softmax_row(s, i, r1);
  return sums.max + std::log(sums.sum);  // sum >= 1 (the max term is exp(0))
}

float dot(const float* a, const float* b, int n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int d = 0; d < n; ++d) sum += a[d] * b[d];
  return sum;
}

// Row i of a block: p[0..r1) holds the scores s_ij and becomes P_ij = exp(s_ij − lse_i);
// ds[0..r1) holds dP_ij and becomes dS_ij = P_ij (dP_ij − delta_i); both are 0 for j > i
// (masked scores have no probability and get no gradient).
// Padded to whole vectors as the forward's rows are (pad_causal_row): a padded P is exactly 0,
// and its dP is reset to 0 first so that an infinite one cannot make 0·inf.
void probabilities_and_score_gradient_row(float* p, float* ds, int i, int r1, float lse, float delta) {
  const int n = pad_causal_row(p, i, r1);
  std::fill(ds + i + 1, ds + n, 0.0f);
#pragma omp simd
  for (int j = 0; j < n; ++j) {
    p[j] = exp_approx(p[j] - lse);
    ds[j] = p[j] * (ds[j] - delta);
  }
  std::fill(p + n, p + r1, 0.0f);
  std::fill(ds + n, ds + r1, 0.0f);
}

}  // namespace

void CpuOps::flash_attention_forward(View outv, float* lse, ConstView qkvv, int b, int t, int nh, int hd) {
  fp32("flash_attention_forward", outv, qkvv);
  check_shape("flash attention", b, t, nh, nh, hd);
  gqa_flash_attention_forward(outv, lse, qkvv, b, t, nh, nh, hd);
}

void CpuOps::flash_attention_backward_input(View dqkvv, float* delta, ConstView doutv, ConstView qkvv,
                                            ConstView outv, const float* lse, int b, int t, int nh, int hd) {
  fp32("flash_attention_backward_input", dqkvv, doutv, qkvv, outv);
  check_shape("flash attention", b, t, nh, nh, hd);
  gqa_flash_attention_backward_input(dqkvv, delta, doutv, qkvv, outv, lse, b, t, nh, nh, hd);
}

void CpuOps::gqa_flash_attention_forward(View outv, float* lse, ConstView qkvv, int b, int t, int nh, int nkv,
                                         int hd) {
  float* out;
  const float* qkv;
  std::tie(out, qkv) = fp32("gqa_flash_attention_forward", outv, qkvv);
  // Per query head and row strip [r, last): S = q kᵀ / √HD (causal), P = softmax(S),
  // lse = log Σ exp S, out[r:last] = P · v[0:last]. lse[B,NH,T].
  check_shape("flash attention", b, t, nh, nkv, hd);
  const int pairs = b * nh;
  const int ld_out = nh * hd;
  const float score_scale = 1.0f / std::sqrt(float(hd));
  const Split split = split_of(pairs, t);
  const size_t strip_at = 2 * size_t(hd) * t;  // kᵀ [HD,T] and v [T,HD], then a strip's scores
  const size_t scratch = strip_at + size_t(kRows) * t;
  reserve_thread_scratch(scratch);
  for_each_pair(pairs, split.over_pairs, [&](int bh) {
    const HeadView head = head_view(qkv, bh / nh, bh % nh, t, nh, nkv, hd);
    const int ld = int(head.qkv_stride);
    float* kt = thread_scratch_[omp_get_thread_num()].reserve(scratch);
    float* v = kt + size_t(hd) * t;
    tile::transpose(kt, head.k, t, hd, ld);
    tile::copy_rows(v, head.v, t, hd, ld);
    float* o = out + head.out_offset;
    float* head_lse = lse + size_t(bh) * t;
    for_each_strip(t, split.over_strips, [&](int r, int last) {
      // The strip's own thread's tile (the pair's thread, or one of the strips' threads).
      float* s = thread_scratch_[omp_get_thread_num()].reserve(scratch) + strip_at;  // [rows, cols]
      const int rows = last - r, cols = causal_vector_length(last - 1, t);
      tile::gemm(rows, cols, hd, score_scale, rows_of(head.q + size_t(r) * ld, ld), kt, t, 0.0f, s, cols);
      for (int i = r; i < last; ++i) head_lse[i] = causal_softmax_lse_row(s + size_t(i - r) * cols, i, cols);
      // o[r:last] = s[rows, 0:last] · v[0:last]
      tile::gemm(rows, hd, last, 1.0f, rows_of(s, cols), v, hd, 0.0f, o + size_t(r) * ld_out, ld_out);
    });
  });
}

void CpuOps::gqa_flash_attention_backward_input(View dqkvv, float* delta, ConstView doutv, ConstView qkvv,
                                                ConstView outv, const float* lse, int b, int t, int nh, int nkv,
                                                int hd) {
  float* dqkv;
  const float *dout, *qkv, *out;
  std::tie(dqkv, dout, qkv, out) = fp32("gqa_flash_attention_backward_input", dqkvv, doutv, qkvv, outv);
  // Per query head, with P_ij = exp(s_ij − lse_i) recomputed row block by row block:
  //   delta_i = Σ_d dO_id · O_id  (= Σ_j P_ij dP_ij, since O_i = Σ_j P_ij v_j and dP_ij = dO_i · v_j)
  //   dP = dO vᵀ,  dS = P ∘ (dP − delta),
  //   dQ[r0:r1] = dS k[0:r1] / √HD,  dK[0:r1] += dSᵀ q[r0:r1] / √HD,  dV[0:r1] += Pᵀ dO[r0:r1].
  // dK and dV add up over the group's query heads and their row blocks in a fixed order, one
  // thread per key/value head (or, with few heads, one per column strip of dK and dV).
  check_shape("flash attention", b, t, nh, nkv, hd);
  const int group = nh / nkv, kv_pairs = b * nkv;
  const int ld_out = nh * hd;
  const float score_scale = 1.0f / std::sqrt(float(hd));
  const Split split = split_of(kv_pairs, t);
  // kᵀ and vᵀ [HD,T], k, q, dO and the dK, dV sums [T,HD], the block's P and dS [kBlock, r1]
  // (the pair's thread's), then each column strip's thread's packed panel [kBlock, kRows].
  // dK and dV add up in contiguous sums, not in place: every row block adds to them, and rows
  // of the packed dqkv are a page or more apart.
  const size_t pack_at = 7 * size_t(hd) * t + 2 * size_t(kBlock) * t, scratch = pack_at + size_t(kRows) * kBlock;
  reserve_thread_scratch(scratch);
  for_each_pair(kv_pairs, split.over_pairs, [&](int bkv) {
    Carve carve{thread_scratch_[omp_get_thread_num()].reserve(scratch)};
    float *kt = carve.take(size_t(hd) * t), *vt = carve.take(size_t(hd) * t), *k = carve.take(size_t(hd) * t),
          *q = carve.take(size_t(hd) * t), *d_o = carve.take(size_t(hd) * t);
    float *dk_sum = carve.take(size_t(hd) * t), *dv_sum = carve.take(size_t(hd) * t);
    float *p = carve.take(size_t(kBlock) * t), *ds = carve.take(size_t(kBlock) * t);
    const int batch = bkv / nkv;
    std::fill(dk_sum, dk_sum + size_t(hd) * t, 0.0f);
    std::fill(dv_sum, dv_sum + size_t(hd) * t, 0.0f);
    for (int g = 0; g < group; ++g) {
      const int h = bkv % nkv * group + g;
      const HeadView head = head_view(qkv, batch, h, t, nh, nkv, hd);
      const int ld = int(head.qkv_stride);
      const float* o = out + head.out_offset;
      const float* head_lse = lse + (size_t(batch) * nh + h) * t;
      float* head_delta = delta + (size_t(batch) * nh + h) * t;
      float* dq = dqkv + head.q_offset;
      if (g == 0) {  // the group's one key/value head
        tile::transpose(kt, head.k, t, hd, ld);
        tile::transpose(vt, head.v, t, hd, ld);
        tile::copy_rows(k, head.k, t, hd, ld);
      }
      tile::copy_rows(q, head.q, t, hd, ld);
      tile::copy_rows(d_o, dout + head.out_offset, t, hd, ld_out);
      for (int i = 0; i < t; ++i) head_delta[i] = dot(d_o + size_t(i) * hd, o + size_t(i) * ld_out, hd);
      for (int r0 = 0; r0 < t; r0 += kBlock) {
        const int r1 = std::min(t, r0 + kBlock), rows = r1 - r0;
        for_each_strip(rows, split.over_strips, [&](int first, int end) {
          const int r = r0 + first, last = r0 + end, strip = end - first, cols = causal_vector_length(last - 1, r1);
          float* p_rows = p + size_t(first) * r1;  // [strip, r1]
          float* ds_rows = ds + size_t(first) * r1;
          // s = q[r:last] · k[0:cols]ᵀ / √HD;  dP = dO[r:last] · v[0:cols]ᵀ
          tile::gemm(strip, cols, hd, score_scale, rows_of(head.q + size_t(r) * ld, ld), kt, t, 0.0f, p_rows, r1);
          tile::gemm(strip, cols, hd, 1.0f, rows_of(d_o + size_t(r) * hd, hd), vt, t, 0.0f, ds_rows, r1);
          for (int i = r; i < last; ++i)
            probabilities_and_score_gradient_row(p + size_t(i - r0) * r1, ds + size_t(i - r0) * r1, i, r1,
                                                 head_lse[i], head_delta[i]);
          // dQ[r:last] = dS · k[0:last] / √HD
          tile::gemm(strip, hd, last, score_scale, rows_of(ds_rows, r1), k, hd, 0.0f, dq + size_t(r) * ld, ld);
        });
        for_each_strip(r1, split.over_strips, [&](int c, int end) {
          // Keys [c, end) get gradient from the block's rows i >= c (P and dS are 0 above it).
          const int i0 = std::max(r0, c), depth = r1 - i0;
          const size_t at = size_t(i0 - r0) * r1 + c;
          float* pack = thread_scratch_[omp_get_thread_num()].reserve(scratch) + pack_at;
          // dK[c:end] += dS[i0:r1, c:end]ᵀ · q[i0:r1] / √HD
          tile::gemm(end - c, hd, depth, score_scale, columns_of(ds + at, r1), q + size_t(i0) * hd, hd, 1.0f,
                     dk_sum + size_t(c) * hd, hd, pack);
          // dV[c:end] += P[i0:r1, c:end]ᵀ · dO[i0:r1]
          tile::gemm(end - c, hd, depth, 1.0f, columns_of(p + at, r1), d_o + size_t(i0) * hd, hd, 1.0f,
                     dv_sum + size_t(c) * hd, hd, pack);
        });
      }
    }
    // The key/value head's dK and dV, from the sums over its group's query heads
    const HeadView kv_head = head_view(qkv, batch, bkv % nkv * group, t, nh, nkv, hd);
    const size_t ld = kv_head.qkv_stride;
    for (int i = 0; i < t; ++i) {
      std::copy(dk_sum + size_t(i) * hd, dk_sum + size_t(i + 1) * hd, dqkv + kv_head.k_offset + i * ld);
      std::copy(dv_sum + size_t(i) * hd, dv_sum + size_t(i + 1) * hd, dqkv + kv_head.v_offset + i * ld);
    }
  });
}

}  // namespace pptrain::cpu::PPTRAIN_CPU_ISA
