// Causal self-attention core, one (batch, head) pair per OpenMP task; inside the
// parallel region every sgemm runs single-threaded on its own head.
//
// The T×T score matrix is processed in row blocks of kBlock rows. Row block
// [r0, r1) only attends to keys [0, r1), so its sgemms stop at column r1: the causal
// mask skips about half of the QKᵀ and P·V work instead of computing and discarding it.
//
// Layout: qkv[B,T,3C] with C = NH·HD; head h of the query block is columns h·HD..,
// of the key block C + h·HD.., of the value block 2C + h·HD... out[B,T,C].
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/vector_math.h"
#include "core/error.h"

namespace pptrain::cpu {

namespace {

constexpr int kBlock = 64;

// Views of one (batch, head) pair inside the packed tensors.
struct HeadView {
  const float* q;  // [T,HD], row stride 3C
  const float* k;
  const float* v;
  size_t qkv_stride;
  size_t out_offset;  // of (b, t=0, h) in out/dout/dq, row stride C resp. 3C
  size_t qkv_offset;  // of (b, t=0, h) in qkv/dqkv
};

HeadView head_view(const float* qkv, int bh, int t, int nh, int hd) {
  const int b = bh / nh, h = bh % nh;
  const size_t c = size_t(nh) * hd;
  HeadView view;
  view.qkv_offset = size_t(b) * t * 3 * c + size_t(h) * hd;
  view.out_offset = size_t(b) * t * c + size_t(h) * hd;
  view.q = qkv + view.qkv_offset;
  view.k = view.q + c;
  view.v = view.q + 2 * c;
  view.qkv_stride = 3 * c;
  return view;
}

// In place: row[0..=i] <- softmax(row[0..=i]), row[i+1..T) <- 0.
void causal_softmax_row(float* row, int i, int t) {
  float max_score = row[0];
#pragma omp simd reduction(max : max_score)
  for (int j = 1; j <= i; ++j) max_score = row[j] > max_score ? row[j] : max_score;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j <= i; ++j) {
    float e = exp_approx(row[j] - max_score);
    row[j] = e;
    sum += e;
  }
  const float inv_sum = 1.0f / sum;
#pragma omp simd
  for (int j = 0; j <= i; ++j) row[j] *= inv_sum;
  std::fill(row + i + 1, row + t, 0.0f);
}

// Threads take whole (batch, head) pairs when there are enough of them and enough work;
// otherwise the pairs run one after another and each sgemm may use all threads.
bool parallel_over_pairs(int pairs, int t) {
  return pairs >= omp_get_max_threads() && size_t(pairs) * t * t >= kParallelMinElements;
}

}  // namespace

void CpuOps::attention_forward(View outv, View probsv, ConstView qkvv, int b, int t, int nh,
                               int hd) {
  float *out, *probs; const float *qkv;
  std::tie(out, probs, qkv) = fp32("attention_forward", outv, probsv, qkvv);
  // probs[B,NH,T,T] = softmax(q kᵀ / √HD, causal); out[B,T,C] = probs · v
  PPTRAIN_CHECK(b >= 0 && t > 0 && nh > 0 && hd > 0, "attention shape b=", b, " t=", t, " nh=", nh,
                " hd=", hd);
  const int pairs = b * nh;
  const int ld_out = nh * hd;
  const float score_scale = 1.0f / std::sqrt(float(hd));
#pragma omp parallel for schedule(static) if (parallel_over_pairs(pairs, t))
  for (int bh = 0; bh < pairs; ++bh) {
    const HeadView head = head_view(qkv, bh, t, nh, hd);
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

void CpuOps::attention_backward_input(View dqkvv, ConstView doutv, ConstView qkvv,
                                      ConstView probsv, int b, int t, int nh, int hd) {
  float *dqkv; const float *dout, *qkv, *probs;
  std::tie(dqkv, dout, qkv, probs) = fp32("attention_backward_input", dqkvv, doutv, qkvv, probsv);
  // With P = probs, dO = dout (per head):
  //   dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP − rowsum(dP ∘ P)),
  //   dQ = dS K / √HD,  dK = dSᵀ Q / √HD.
  // P and dS are zero above the diagonal, so dV/dK rows [c0, c1) only need rows
  // i >= c0 of P/dS, and dQ rows [r0, r1) only keys [0, r1).
  PPTRAIN_CHECK(b >= 0 && t > 0 && nh > 0 && hd > 0, "attention shape b=", b, " t=", t, " nh=", nh,
                " hd=", hd);
  const int pairs = b * nh;
  const int ld_out = nh * hd;
  const float score_scale = 1.0f / std::sqrt(float(hd));
  reserve_thread_scratch(size_t(t) * t);
#pragma omp parallel for schedule(static) if (parallel_over_pairs(pairs, t))
  for (int bh = 0; bh < pairs; ++bh) {
    const HeadView head = head_view(qkv, bh, t, nh, hd);
    const int ld = int(head.qkv_stride);
    const float* p = probs + size_t(bh) * t * t;
    const float* d_o = dout + head.out_offset;
    float* dq = dqkv + head.qkv_offset;
    float* dk = dq + ld_out;
    float* dv = dq + 2 * ld_out;
    float* ds = thread_scratch_[omp_get_thread_num()].reserve(size_t(t) * t);  // [T,T]

    for (int r0 = 0; r0 < t; r0 += kBlock) {
      const int r1 = std::min(t, r0 + kBlock), rows = r1 - r0;
      // dP[r0:r1, 0:r1] = dO[r0:r1] · v[0:r1]ᵀ
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hd, 1.0f,
                  d_o + size_t(r0) * ld_out, ld_out, head.v, ld, 0.0f, ds + size_t(r0) * t, t);
      for (int i = r0; i < r1; ++i) {
        float* ds_row = ds + size_t(i) * t;
        const float* p_row = p + size_t(i) * t;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int j = 0; j <= i; ++j) dot += ds_row[j] * p_row[j];
#pragma omp simd
        for (int j = 0; j <= i; ++j) ds_row[j] = p_row[j] * (ds_row[j] - dot);
        std::fill(ds_row + i + 1, ds_row + r1, 0.0f);  // masked scores get no gradient
      }
      // dQ[r0:r1] = dS[r0:r1, 0:r1] · k[0:r1] / √HD
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, r1, score_scale,
                  ds + size_t(r0) * t, t, head.k, ld, 0.0f, dq + size_t(r0) * ld, ld);
    }
    for (int c0 = 0; c0 < t; c0 += kBlock) {
      const int c1 = std::min(t, c0 + kBlock), cols = c1 - c0, tail = t - c0;
      // dV[c0:c1] = P[c0:T, c0:c1]ᵀ · dO[c0:T]
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hd, tail, 1.0f,
                  p + size_t(c0) * t + c0, t, d_o + size_t(c0) * ld_out, ld_out, 0.0f,
                  dv + size_t(c0) * ld, ld);
      // dK[c0:c1] = dS[c0:T, c0:c1]ᵀ · q[c0:T] / √HD
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hd, tail, score_scale,
                  ds + size_t(c0) * t + c0, t, head.q + size_t(c0) * ld, ld, 0.0f,
                  dk + size_t(c0) * ld, ld);
    }
  }
}

}  // namespace pptrain::cpu

namespace pptrain::cpu {
void CpuOps::flash_attention_forward(View, float*, ConstView, int, int, int, int) {
  fail("flash_attention_forward: not yet on the cpu backend");
}
void CpuOps::flash_attention_backward_input(View, float*, ConstView, ConstView, ConstView, const float*, int,
                                            int, int, int) {
  fail("flash_attention_backward_input: not yet on the cpu backend");
}
}  // namespace pptrain::cpu
