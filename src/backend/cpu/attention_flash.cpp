// Fused (flash) causal self-attention on the cpu: the T×T matrix is never stored. Layout,
// threading and row strips as the plain path's (attention.cpp, attention_common.h).
//
// The forward takes a head's rows in strips as the plain path does, a strip's scores in a
// per-thread tile of kRows·T floats; the backward in blocks of kBlock rows, its P and dS in
// two tiles of kBlock·T (O(T) scratch per thread, never [B,NH,T,T]). The forward keeps
// lse_i = max_j s_ij + log Σ_j exp(s_ij − max_j s_ij), the natural log-sum-exp of row i's
// scaled scores over j ≤ i, so the backward recomputes P_ij = exp(s_ij − lse_i) exactly from
// the scores instead of reading them back.
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

// Row block of the flash backward: its P and dS tiles [kBlock, T] are what dK and dV are
// accumulated from, kBlock rows deep per product.
constexpr int kBlock = 64;

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
// (masked scores have no probability and get no gradient). The tail vector's masked lanes
// are selected to 0, not computed from the products' values past the diagonal, so an
// infinite one cannot make 0·inf.
void probabilities_and_score_gradient_row(float* p, float* ds, int i, int r1, float lse, float delta) {
  using namespace simd;
  const CausalRow cr(i);
  const Vec shift = splat(lse), centre = splat(delta);
  for (int v = 0; v < cr.full; ++v) {
    const Vec pv = exp_nonpositive(sub(load(p + v * kWidth), shift));
    store(p + v * kWidth, pv);
    store(ds + v * kWidth, mul(pv, sub(load(ds + v * kWidth), centre)));
  }
  Vec p_tail = zero(), ds_tail = zero();
  if (cr.rem) {
    p_tail = select(cr.tail, exp_nonpositive(sub(load(p + cr.tail_at(), cr.tail), shift)), zero());
    ds_tail = mul(p_tail, sub(load(ds + cr.tail_at(), cr.tail), centre));
  }
  store_tail_and_zero_rest(p, cr, p_tail, r1);
  store_tail_and_zero_rest(ds, cr, ds_tail, r1);
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
