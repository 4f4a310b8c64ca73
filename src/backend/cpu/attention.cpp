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
// The forward works each strip of scores in a thread's scratch [kRows, T] (softmax, then P·V
// from there) and only then copies it to probs, with stores that bypass the caches where
// aligned (attention_common.h's stream_rows): P is read again only by the backward,
// microbatches later, and written through the caches it cost a read of every line first and
// pushed the next products' operands out (pp 2 ZB-V on a Zen 4 VM, `logging.op_profile`: this
// op 14.7 ms a step per rank against 12.3-12.5).
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
#include "backend/cpu/simd.h"  // after it: compiled for this file's ISA (see there)
#include "backend/cpu/tile_gemm.h"  // after simd.h
#include "backend/cpu/attention_common.h"  // after these (see there)

namespace pptrain::cpu::PPTRAIN_CPU_ISA {

using namespace attention;

namespace {

// Row i of dS in place: ds[0..=i] holds dP and becomes dS = P ∘ (dP − Σ_j dP_j P_j);
// ds[i+1..capacity) <- 0 (masked scores get no gradient: dK reads them). The scores past the
// diagonal that the dP product computed are masked out of the sum, not multiplied by P's 0,
// so an infinite one cannot make 0·inf.
void score_gradient_row(float* ds, const float* p, int i, int capacity) {
  using namespace simd;
  const CausalRow cr(i);
  Vec dots = zero(), ds_tail = zero(), p_tail = zero();
  for (int v = 0; v < cr.full; ++v) dots = fma(load(ds + v * kWidth), load(p + v * kWidth), dots);
  if (cr.rem) {
    ds_tail = load(ds + cr.tail_at(), cr.tail);
    p_tail = load(p + cr.tail_at(), cr.tail);
    dots = fma(ds_tail, p_tail, dots);
  }
  const Vec dot = splat(reduce_add(dots));
  for (int v = 0; v < cr.full; ++v) store(ds + v * kWidth, mul(load(p + v * kWidth), sub(load(ds + v * kWidth), dot)));
  store_tail_and_zero_rest(ds, cr, mul(p_tail, sub(ds_tail, dot)), capacity);
}

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
  const size_t strip_at = 2 * size_t(hd) * t, scratch = strip_at + size_t(kRows) * t;
  reserve_thread_scratch(scratch);
  for_each_pair(pairs, split.over_pairs, [&](int bh) {
    const HeadView head = head_view(qkv, bh / nh, bh % nh, t, nh, nkv, hd);
    const int ld = int(head.qkv_stride);
    Carve carve{thread_scratch_[omp_get_thread_num()].reserve(scratch)};
    float *kt = carve.take(size_t(hd) * t), *v = carve.take(size_t(hd) * t);  // kᵀ [HD,T], v [T,HD]
    tile::transpose(kt, head.k, t, hd, ld);
    tile::copy_rows(v, head.v, t, hd, ld);
    float* p = probs + size_t(bh) * t * t;
    float* o = out + head.out_offset;
    for_each_strip(t, split.over_strips, [&](int r, int last) {
      const int rows = last - r;
      float* s = thread_scratch_[omp_get_thread_num()].reserve(scratch) + strip_at;  // [kRows, T]
      // s[0:rows, 0:cols] = q[r:last] · k[0:cols]ᵀ / √HD; cols covers every row's padded length
      const int cols = causal_vector_length(last - 1, t);
      tile::gemm(rows, cols, hd, score_scale, rows_of(head.q + size_t(r) * ld, ld), kt, t, 0.0f, s, t);
      for (int i = r; i < last; ++i) causal_softmax_row(s + size_t(i - r) * t, i, t);
      // o[r:last] = s[0:rows, 0:last] · v[0:last]  (s is 0 past each row's diagonal)
      tile::gemm(rows, hd, last, 1.0f, rows_of(s, t), v, hd, 0.0f, o + size_t(r) * ld_out, ld_out);
      stream_rows(p + size_t(r) * t, s, rows, t);
      // Streamed stores are weakly ordered: each thread fences its own before the region's
      // barrier hands P to other threads (strips on several threads, else once per head).
      if (split.over_strips) simd::store_fence();
    });
    simd::store_fence();
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
        for (int i = r; i < last; ++i) score_gradient_row(ds + size_t(i) * t, p + size_t(i) * t, i, t);
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

}  // namespace pptrain::cpu::PPTRAIN_CPU_ISA
