// Causal self-attention core, one (batch, head) pair per OpenMP task; inside the
// parallel region every sgemm runs single-threaded on its own head.
//
// The T×T score matrix is processed in row blocks of kBlock rows. Row block
// [r0, r1) only attends to keys [0, r1), so its sgemms stop at column r1: the causal
// mask skips about half of the QKᵀ and P·V work instead of computing and discarding it.
//
// Layout: qkv[B,T,(NH + 2·NKV)·HD]; query head h is columns h·HD.., key head j columns
// (NH + j)·HD.., value head j columns (NH + NKV + j)·HD..; query head h uses key/value head
// h / (NH/NKV) (grouped-query attention; NKV = NH is multi-head attention, C = NH·HD and the
// row 3C wide). out[B,T,NH·HD]. The backward runs one key/value head per task, its group's
// query heads one after another, so dK and dV add up without races in a fixed order.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/vector_math.h"
#include "core/error.h"
#include "backend/cpu/isa_begin.h"  // last: see there

namespace pptrain::cpu::PPTRAIN_CPU_ISA {

namespace {

constexpr int kBlock = 64;

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

// In place: row[0..=i] <- softmax(row[0..=i]), row[i+1..T) <- 0.
void causal_softmax_row(float* row, int i, int t) {
  const int n = pad_causal_row(row, i, t);
  float max_score = row[0];
#pragma omp simd reduction(max : max_score)
  for (int j = 1; j < n; ++j) max_score = row[j] > max_score ? row[j] : max_score;
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
  std::fill(row + n, row + t, 0.0f);
}

// Threads take whole (batch, head) pairs when there are enough of them and enough work;
// otherwise the pairs run one after another and each sgemm may use all threads.
bool parallel_over_pairs(int pairs, int t) {
  return pairs >= omp_get_max_threads() && size_t(pairs) * t * t >= kParallelMinElements;
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
#pragma omp parallel for schedule(static) if (parallel_over_pairs(pairs, t))
  for (int bh = 0; bh < pairs; ++bh) {
    const HeadView head = head_view(qkv, bh / nh, bh % nh, t, nh, nkv, hd);
    const int ld = int(head.qkv_stride);
    float* p = probs + size_t(bh) * t * t;
    float* o = out + head.out_offset;
    for (int r0 = 0; r0 < t; r0 += kBlock) {
      const int r1 = std::min(t, r0 + kBlock), rows = r1 - r0;
      // p[r0:r1, 0:r1] = q[r0:r1] · k[0:r1]ᵀ / √HD
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hd, score_scale,
                  head.q + size_t(r0) * ld, ld, head.k, ld, 0.0f, p + size_t(r0) * t, t);
      for (int i = r0; i < r1; ++i) causal_softmax_row(p + size_t(i) * t, i, t);
      // o[r0:r1] = p[r0:r1, 0:r1] · v[0:r1]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, r1, 1.0f, p + size_t(r0) * t,
                  t, head.v, ld, 0.0f, o + size_t(r0) * ld_out, ld_out);
    }
  }
}

void CpuOps::gqa_attention_backward_input(View dqkvv, ConstView doutv, ConstView qkvv, ConstView probsv, int b, int t,
                                          int nh, int nkv, int hd) {
  float *dqkv; const float *dout, *qkv, *probs;
  std::tie(dqkv, dout, qkv, probs) = fp32("gqa_attention_backward_input", dqkvv, doutv, qkvv, probsv);
  // With P = probs, dO = dout (per query head):
  //   dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP − rowsum(dP ∘ P)),
  //   dQ = dS K / √HD,  dK = dSᵀ Q / √HD;
  // a key/value head's dK and dV are the sums over its group's query heads.
  // P and dS are zero above the diagonal, so dV/dK rows [c0, c1) only need rows
  // i >= c0 of P/dS, and dQ rows [r0, r1) only keys [0, r1).
  check_shape("attention", b, t, nh, nkv, hd);
  const int group = nh / nkv, kv_pairs = b * nkv;
  const int ld_out = nh * hd;
  const float score_scale = 1.0f / std::sqrt(float(hd));
  reserve_thread_scratch(size_t(t) * t);
#pragma omp parallel for schedule(static) if (parallel_over_pairs(kv_pairs, t))
  for (int bkv = 0; bkv < kv_pairs; ++bkv) {
    float* ds = thread_scratch_[omp_get_thread_num()].reserve(size_t(t) * t);  // [T,T]
    for (int g = 0; g < group; ++g) {
      const int batch = bkv / nkv, h = bkv % nkv * group + g;
      const HeadView head = head_view(qkv, batch, h, t, nh, nkv, hd);
      const int ld = int(head.qkv_stride);
      const float* p = probs + (size_t(batch) * nh + h) * t * t;
      const float* d_o = dout + head.out_offset;
      float* dq = dqkv + head.q_offset;
      float* dk = dqkv + head.k_offset;
      float* dv = dqkv + head.v_offset;
      const float kv_beta = g == 0 ? 0.0f : 1.0f;  // the group's first head writes dK, dV; the others add

      for (int r0 = 0; r0 < t; r0 += kBlock) {
        const int r1 = std::min(t, r0 + kBlock), rows = r1 - r0;
        // dP[r0:r1, 0:r1] = dO[r0:r1] · v[0:r1]ᵀ
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hd, 1.0f,
                    d_o + size_t(r0) * ld_out, ld_out, head.v, ld, 0.0f, ds + size_t(r0) * t, t);
        for (int i = r0; i < r1; ++i) {
          float* ds_row = ds + size_t(i) * t;
          const float* p_row = p + size_t(i) * t;
          // Whole vectors as in the forward (pad_causal_row): P is 0 past the diagonal (the
          // forward zeroed it), so the padded elements add 0 to the dot and get dS = 0; their
          // dP is reset to 0 first so that an infinite one cannot make 0·inf.
          const int n = causal_vector_length(i, r1);
          std::fill(ds_row + i + 1, ds_row + n, 0.0f);
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
          for (int j = 0; j < n; ++j) dot += ds_row[j] * p_row[j];
#pragma omp simd
          for (int j = 0; j < n; ++j) ds_row[j] = p_row[j] * (ds_row[j] - dot);
          std::fill(ds_row + n, ds_row + r1, 0.0f);  // masked scores get no gradient
        }
        // dQ[r0:r1] = dS[r0:r1, 0:r1] · k[0:r1] / √HD
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, r1, score_scale,
                    ds + size_t(r0) * t, t, head.k, ld, 0.0f, dq + size_t(r0) * ld, ld);
      }
      for (int c0 = 0; c0 < t; c0 += kBlock) {
        const int c1 = std::min(t, c0 + kBlock), cols = c1 - c0, tail = t - c0;
        // dV[c0:c1] (+)= P[c0:T, c0:c1]ᵀ · dO[c0:T]
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hd, tail, 1.0f,
                    p + size_t(c0) * t + c0, t, d_o + size_t(c0) * ld_out, ld_out, kv_beta,
                    dv + size_t(c0) * ld, ld);
        // dK[c0:c1] (+)= dS[c0:T, c0:c1]ᵀ · q[c0:T] / √HD
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hd, tail, score_scale,
                    ds + size_t(c0) * t + c0, t, head.q + size_t(c0) * ld, ld, kv_beta,
                    dk + size_t(c0) * ld, ld);
      }
    }
  }
}

// ---- fused (flash) attention: the T×T matrix is never stored ------------------------------
//
// Per (batch, head) pair the rows are taken in blocks of kBlock queries; a block's scores
// S[rows, r1] live in a per-thread tile of kBlock·T floats (O(T) scratch per thread, never
// [B,NH,T,T]). The forward keeps lse_i = max_j s_ij + log Σ_j exp(s_ij − max_j s_ij), the
// natural log-sum-exp of row i's scaled scores over j ≤ i, so the backward recomputes
// P_ij = exp(s_ij − lse_i) exactly from the scores instead of reading them back.

namespace {

// Rows [r0, r1) of one head: s[rows, r1] = q[r0:r1] · k[0:r1]ᵀ / √HD (row stride r1).
void block_scores(float* s, const HeadView& head, int r0, int r1, int hd, float score_scale) {
  const int ld = int(head.qkv_stride);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hd, score_scale,
              head.q + size_t(r0) * ld, ld, head.k, ld, 0.0f, s, r1);
}

// In place, row i of a block with the scores s[0..=i]: s[j] <- softmax_j(s), s[i+1..r1) <- 0;
// returns the row's log-sum-exp.
float causal_softmax_lse_row(float* s, int i, int r1) {
  const int n = pad_causal_row(s, i, r1);
  float max_score = s[0];
#pragma omp simd reduction(max : max_score)
  for (int j = 1; j < n; ++j) max_score = s[j] > max_score ? s[j] : max_score;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < n; ++j) {
    const float e = exp_approx(s[j] - max_score);
    s[j] = e;
    sum += e;
  }
  const float inv_sum = 1.0f / sum;
#pragma omp simd
  for (int j = 0; j < n; ++j) s[j] *= inv_sum;
  std::fill(s + n, s + r1, 0.0f);
  return max_score + std::log(sum);  // sum >= 1 (the max term is exp(0))
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
  // Per query head and row block [r0, r1): S = q kᵀ / √HD (causal), P = softmax(S),
  // lse = log Σ exp S, out[r0:r1] = P · v[0:r1]. lse[B,NH,T].
  check_shape("flash attention", b, t, nh, nkv, hd);
  const int pairs = b * nh;
  const int ld_out = nh * hd;
  const float score_scale = 1.0f / std::sqrt(float(hd));
  reserve_thread_scratch(size_t(kBlock) * t);
#pragma omp parallel for schedule(static) if (parallel_over_pairs(pairs, t))
  for (int bh = 0; bh < pairs; ++bh) {
    const HeadView head = head_view(qkv, bh / nh, bh % nh, t, nh, nkv, hd);
    const int ld = int(head.qkv_stride);
    float* o = out + head.out_offset;
    float* head_lse = lse + size_t(bh) * t;
    float* p = thread_scratch_[omp_get_thread_num()].reserve(size_t(kBlock) * t);  // [kBlock, r1]
    for (int r0 = 0; r0 < t; r0 += kBlock) {
      const int r1 = std::min(t, r0 + kBlock), rows = r1 - r0;
      block_scores(p, head, r0, r1, hd, score_scale);
      for (int i = r0; i < r1; ++i) head_lse[i] = causal_softmax_lse_row(p + size_t(i - r0) * r1, i, r1);
      // o[r0:r1] = p[rows, r1] · v[0:r1]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, r1, 1.0f, p, r1, head.v, ld, 0.0f,
                  o + size_t(r0) * ld_out, ld_out);
    }
  }
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
  // thread per key/value head.
  check_shape("flash attention", b, t, nh, nkv, hd);
  const int group = nh / nkv, kv_pairs = b * nkv;
  const int ld_out = nh * hd;
  const float score_scale = 1.0f / std::sqrt(float(hd));
  reserve_thread_scratch(2 * size_t(kBlock) * t);
#pragma omp parallel for schedule(static) if (parallel_over_pairs(kv_pairs, t))
  for (int bkv = 0; bkv < kv_pairs; ++bkv) {
    float* p = thread_scratch_[omp_get_thread_num()].reserve(2 * size_t(kBlock) * t);  // [kBlock, r1]
    float* ds = p + size_t(kBlock) * t;                                                  // [kBlock, r1]
    const int batch = bkv / nkv;
    for (int g = 0; g < group; ++g) {
      const int h = bkv % nkv * group + g;
      const HeadView head = head_view(qkv, batch, h, t, nh, nkv, hd);
      const int ld = int(head.qkv_stride);
      const float* d_o = dout + head.out_offset;
      const float* o = out + head.out_offset;
      const float* head_lse = lse + (size_t(batch) * nh + h) * t;
      float* head_delta = delta + (size_t(batch) * nh + h) * t;
      float* dq = dqkv + head.q_offset;
      float* dk = dqkv + head.k_offset;
      float* dv = dqkv + head.v_offset;
      for (int i = 0; i < t; ++i) {
        if (g == 0) {
          std::fill(dk + size_t(i) * ld, dk + size_t(i) * ld + hd, 0.0f);
          std::fill(dv + size_t(i) * ld, dv + size_t(i) * ld + hd, 0.0f);
        }
        head_delta[i] = dot(d_o + size_t(i) * ld_out, o + size_t(i) * ld_out, hd);
      }
      for (int r0 = 0; r0 < t; r0 += kBlock) {
        const int r1 = std::min(t, r0 + kBlock), rows = r1 - r0;
        block_scores(p, head, r0, r1, hd, score_scale);
        // dP[rows, r1] = dO[r0:r1] · v[0:r1]ᵀ
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hd, 1.0f, d_o + size_t(r0) * ld_out,
                    ld_out, head.v, ld, 0.0f, ds, r1);
        for (int i = r0; i < r1; ++i)
          probabilities_and_score_gradient_row(p + size_t(i - r0) * r1, ds + size_t(i - r0) * r1, i, r1,
                                               head_lse[i], head_delta[i]);
        // dQ[r0:r1] = dS · k[0:r1] / √HD
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, r1, score_scale, ds, r1, head.k, ld,
                    0.0f, dq + size_t(r0) * ld, ld);
        // dK[0:r1] += dSᵀ · q[r0:r1] / √HD
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hd, rows, score_scale, ds, r1,
                    head.q + size_t(r0) * ld, ld, 1.0f, dk, ld);
        // dV[0:r1] += Pᵀ · dO[r0:r1]
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hd, rows, 1.0f, p, r1, d_o + size_t(r0) * ld_out,
                    ld_out, 1.0f, dv, ld);
      }
    }
  }
}

}  // namespace pptrain::cpu::PPTRAIN_CPU_ISA
