// CudaOps: the linear layer and the attention core, i.e. everything built on GEMMs.
//
// cuBLAS is column-major; our tensors are row-major. A row-major [R,C] buffer read as
// column-major is its transpose [C,R] with the same leading dimension, so the row-major
// product C = op(A)·op(B) is computed as the column-major product Cᵀ = op(B)ᵀ·op(A)ᵀ:
// swap the operands (and M with N) and keep each operand's transpose flag.
#include <cmath>

#include "attention.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "bias_grad.cuh"
#include "core/error.h"
#include "elementwise.cuh"

namespace pptrain::cuda {

using namespace pptrain::kernels;

void CudaOps::gemm(const char* what, bool transpose_a, bool transpose_b, int m, int n, int k,
                   const float* a, int lda, long long stride_a, const float* b, int ldb,
                   long long stride_b, float beta, float* c, int ldc, long long stride_c, int batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  const float alpha = 1.0f;
  const cublasOperation_t op_a = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasStatus_t status =
      batch == 1 ? cublasSgemm(cublas_.get(), op_b, op_a, n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc)
                 : cublasSgemmStridedBatched(cublas_.get(), op_b, op_a, n, m, k, &alpha, b, ldb, stride_b, a,
                                             lda, stride_a, &beta, c, ldc, stride_c, batch);
  if (status != CUBLAS_STATUS_SUCCESS)
    fail(batch == 1 ? "cublasSgemm" : "cublasSgemmStridedBatched", " (", what, ", M=", m, " N=", n,
         " K=", k, ") failed on ", where(), ": ", cublasGetStatusString(status));
}

// ---- linear: Y[N,O] = X[N,I] · W[O,I]ᵀ + b[O] ----------------------------------------------

void CudaOps::linear_forward(float* y, const float* x, const float* w, const float* b, int n, int in,
                             int out) {
  // Y[N,O] = X[N,I] · W[O,I]ᵀ
  gemm("linear forward", false, true, n, out, in, x, in, 0, w, in, 0, 0.0f, y, out, 0, 1);
  if (b) launch_add_bias<float>(ctx(), y, b, n, out);
}

void CudaOps::linear_backward_input(float* dx, const float* dy, const float* w, int n, int in, int out,
                                    bool accumulate) {
  // dX[N,I] (+)= dY[N,O] · W[O,I]
  gemm("linear dgrad", false, false, n, in, out, dy, out, 0, w, in, 0, accumulate ? 1.0f : 0.0f, dx, in,
       0, 1);
}

void CudaOps::linear_backward_weight(float* dw, float* db, const float* dy, const float* x, int n, int in,
                                     int out) {
  // dW[O,I] += dY[N,O]ᵀ · X[N,I]
  gemm("linear wgrad", true, false, out, in, n, dy, out, 0, x, in, 0, 1.0f, dw, in, 0, 1);
  if (db) {
    auto* ws = static_cast<float*>(column_workspace_.reserve(bias_backward_workspace_bytes(n, out)));
    launch_bias_backward<float>(ctx(), db, dy, ws, n, out);
  }
}

// ---- causal self-attention (the pipeline of kernels/attention.cuh) --------------------------

void CudaOps::attention_forward(float* out, float* probs, const float* qkv, int b, int t, int nh,
                                int hd) {
  const int bh = b * nh;
  const long long head = (long long)t * hd, square = (long long)t * t;  // per-head strides
  const size_t e = size_t(bh) * head;                                   // elements of q (and k, v, y)
  auto* ws = static_cast<float*>(attention_workspace_.reserve(4 * e * sizeof(float)));
  float *q = ws, *k = ws + e, *v = ws + 2 * e, *y = ws + 3 * e;  // each [B,NH,T,HD]
  launch_attention_permute<float>(ctx(), q, k, v, qkv, b, t, nh, hd);
  // scores[BH,T,T] = q kᵀ, into probs; the softmax then works in place.
  gemm("attention q·kᵀ", false, true, t, t, hd, q, hd, head, k, hd, head, 0.0f, probs, t, square, bh);
  launch_attention_softmax_forward<float>(ctx(), probs, probs, bh, t, 1.0f / std::sqrt(float(hd)));
  // y[BH,T,HD] = probs v
  gemm("attention probs·v", false, false, t, hd, t, probs, t, square, v, hd, head, 0.0f, y, hd, head, bh);
  launch_attention_unpermute<float>(ctx(), out, y, b, t, nh, hd);
}

void CudaOps::attention_backward_input(float* dqkv, const float* dout, const float* qkv,
                                       const float* probs, int b, int t, int nh, int hd) {
  const int bh = b * nh;
  const long long head = (long long)t * hd, square = (long long)t * t;
  const size_t e = size_t(bh) * head, s = size_t(bh) * square;
  auto* ws = static_cast<float*>(attention_workspace_.reserve((7 * e + s) * sizeof(float)));
  float *q = ws, *k = ws + e, *v = ws + 2 * e;           // [B,NH,T,HD], re-derived from qkv
  float *dy = ws + 3 * e;                                // [B,NH,T,HD]
  float *dq = ws + 4 * e, *dk = ws + 5 * e, *dv = ws + 6 * e;
  float* dprobs = ws + 7 * e;                            // [B,NH,T,T], then dscores in place
  launch_attention_permute<float>(ctx(), q, k, v, qkv, b, t, nh, hd);
  launch_attention_unpermute_backward<float>(ctx(), dy, dout, b, t, nh, hd);
  // dprobs = dy vᵀ;  dv = probsᵀ dy
  gemm("attention dy·vᵀ", false, true, t, t, hd, dy, hd, head, v, hd, head, 0.0f, dprobs, t, square, bh);
  gemm("attention probsᵀ·dy", true, false, t, hd, t, probs, t, square, dy, hd, head, 0.0f, dv, hd, head, bh);
  // dscores = softmax backward, with the 1/√HD of the forward folded in
  launch_attention_softmax_backward<float>(ctx(), dprobs, dprobs, probs, bh, t, 1.0f / std::sqrt(float(hd)));
  // dq = dscores k;  dk = dscoresᵀ q
  gemm("attention dscores·k", false, false, t, hd, t, dprobs, t, square, k, hd, head, 0.0f, dq, hd, head, bh);
  gemm("attention dscoresᵀ·q", true, false, t, hd, t, dprobs, t, square, q, hd, head, 0.0f, dk, hd, head, bh);
  launch_attention_permute_backward<float>(ctx(), dqkv, dq, dk, dv, b, t, nh, hd);
}

}  // namespace pptrain::cuda
