// CudaOps: the linear layer (with its fused GELU, DGELU and bias-gradient epilogues) and the
// attention core, i.e. everything built on GEMMs, in fp32 and bf16: each body is one lambda
// over the storage type T (float or kernels::bf16; fp32 accumulation either way) that
// dispatch() calls with the views as T* / const T*.
//
// cuBLAS is column-major; our tensors are row-major. A row-major [R,C] buffer read as
// column-major is its transpose [C,R] with the same leading dimension, so the row-major
// product C = op(A)·op(B) is computed as the column-major product Cᵀ = op(B)ᵀ·op(A)ᵀ:
// swap the operands (and M with N) and keep each operand's transpose flag.
#include <cmath>
#include <type_traits>

#include "attention.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "bias_grad.cuh"
#include "core/error.h"
#include "elementwise.cuh"

namespace pptrain::cuda {

using namespace pptrain::kernels;

namespace {

template <typename T>
constexpr cudaDataType data_type() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, bf16>);
  return std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;
}

// Elements of T in `elems` rounded up to whole 256-byte units, so that the next array
// carved from a workspace starts 256-byte aligned (GEMM operands and 128-bit kernel paths).
template <typename T>
size_t padded(size_t elems) {
  constexpr size_t kUnit = 256 / sizeof(T);
  return (elems + kUnit - 1) / kUnit * kUnit;
}

// The cuBLASLt problem of a row-major C[M,N] (+)= op(A)[M,K]·op(B)[K,N] (row strides lda,
// ldb, ldc), by the swap above: column-major Cᵀ = op(B)ᵀ·op(A)ᵀ. A per-row vector of the
// column-major problem (bias, BGRADA) is thus per column of the row-major C, and the aux
// matrix of the GELU epilogues is a row-major [M,N] with row stride aux_ld.
LtShape row_major(bool transpose_a, bool transpose_b, int m, int n, int k, int lda, int ldb, int ldc,
                  cudaDataType ab_type, cudaDataType c_type, LtEpilogue epilogue = LtEpilogue::none,
                  int64_t aux_ld = 0) {
  return LtShape{transpose_b, transpose_a, n, m, k, ldb, lda, ldc, ab_type, c_type, epilogue, aux_ld};
}

}  // namespace

template <typename T>
void CudaOps::gemm_batched(const char* what, bool transpose_a, bool transpose_b, int m, int n, int k, const T* a,
                           int lda, long long stride_a, const T* b, int ldb, long long stride_b, T* c, int ldc,
                           long long stride_c, int batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  const float alpha = 1.0f, beta = 0.0f;
  const cublasOperation_t op_a = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  constexpr cudaDataType type = data_type<T>();
  cublasStatus_t status = cublasGemmStridedBatchedEx(cublas_.get(), op_b, op_a, n, m, k, &alpha, b, type, ldb,
                                                     stride_b, a, type, lda, stride_a, &beta, c, type, ldc,
                                                     stride_c, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (status != CUBLAS_STATUS_SUCCESS)
    fail("cublasGemmStridedBatchedEx (", what, ", M=", m, " N=", n, " K=", k, ") failed on ", where(), ": ",
         cublas_status(status));
}

// ---- linear: Y[N,O] = X[N,I] · W[O,I]ᵀ + b[O] ----------------------------------------------

void CudaOps::linear_forward(View y, ConstView x, ConstView w, ConstView b, int n, int in, int out) {
  // Y[N,O] = X[N,I] · W[O,I]ᵀ, with b added in fp32 before Y is rounded (bias epilogue: the
  // bias runs along the rows of the column-major Yᵀ[O,N]).
  dispatch("linear_forward", [&]<typename T>(T* y, const T* x, const T* w, const T* b) {
    constexpr cudaDataType type = data_type<T>();
    const LtEpilogue epilogue = b ? LtEpilogue::bias : LtEpilogue::none;
    lt_.run("linear forward", row_major(false, true, n, out, in, in, in, out, type, type, epilogue), w, x, b, 0.0f,
            y);
  }, y, x, w, b);
}

void CudaOps::linear_forward_residual(View y, ConstView x, ConstView w, ConstView b, ConstView residual, int n, int in,
                                      int out) {
  // Y = X · Wᵀ + residual (C of the GEMM, beta 1), + b in the epilogue: all in fp32, Y rounded
  // once, no pass of its own for the bias or the residual.
  // Where the library has no algorithm for the bias epilogue with a C (asked once per shape,
  // cached), the bias is added by its own kernel after the GEMM.
  const bool bias_done = dispatch("linear_forward_residual", [&]<typename T>(T* y, const T* x, const T* w, const T* b,
                                                                          const T* r) {
    constexpr cudaDataType type = data_type<T>();
    const char* what = "linear forward + residual";
    if (b && lt_.run_if_supported(what, row_major(false, true, n, out, in, in, in, out, type, type, LtEpilogue::bias),
                                  w, x, b, 1.0f, y, nullptr, r))
      return true;
    lt_.run(what, row_major(false, true, n, out, in, in, in, out, type, type), w, x, nullptr, 1.0f, y, nullptr, r);
    return !b;
  }, y, x, w, b, residual);
  if (!bias_done) add_bias(y, b, n, out);
}

void CudaOps::linear_backward_input(View dx, ConstView dy, ConstView w, int n, int in, int out, bool accumulate) {
  // dX[N,I] (+)= dY[N,O] · W[O,I]
  dispatch("linear_backward_input", [&]<typename T>(T* dx, const T* dy, const T* w) {
    constexpr cudaDataType type = data_type<T>();
    lt_.run("linear dgrad", row_major(false, false, n, in, out, out, in, in, type, type), w, dy, nullptr,
            accumulate ? 1.0f : 0.0f, dx);
  }, dx, dy, w);
}

void CudaOps::linear_gelu_forward(View y, View pre, ConstView x, ConstView w, ConstView b, int n, int in, int out) {
  // pre[N,O] = X[N,I] · W[O,I]ᵀ + b[O] and y[N,O] = gelu(pre) from one GEMM: the epilogue
  // adds the bias in fp32, stores pre (the aux matrix, row stride O) and gelu(pre), each
  // rounded once. Unfused, pre is written, read back and y written: one pass over [N,O] and
  // one launch more. cuBLASLt requires the aux stride O to be a multiple of 8; else the
  // unfused ops run.
  if (!aux_ld_ok(out) || !b.data) {
    linear_forward(pre, x, w, b, n, in, out);
    gelu_forward(y, pre, size_t(n) * out);
    return;
  }
  dispatch("linear_gelu_forward", [&]<typename T>(T* y, T* pre, const T* x, const T* w, const T* b) {
    constexpr cudaDataType type = data_type<T>();
    lt_.run("linear forward + GELU",
            row_major(false, true, n, out, in, in, in, out, type, type, LtEpilogue::gelu_aux_bias, out), w, x, b,
            0.0f, y, pre);
  }, y, pre, x, w, b);
}

void CudaOps::linear_backward_input_dgelu(View dpre, ConstView dy, ConstView w, ConstView pre, int n, int in,
                                          int out) {
  // dpre[N,I] = (dY[N,O] · W[O,I]) ∘ gelu'(pre[N,I]) from one GEMM (DGELU epilogue: the
  // product is multiplied by gelu' of the aux matrix pre before its one rounding). Unfused,
  // the product is written, read back with pre and dpre written. The aux stride I must be a
  // multiple of 8; else the unfused ops run.
  if (!aux_ld_ok(in)) {
    linear_backward_input(dpre, dy, w, n, in, out, false);
    gelu_backward(dpre, dpre, pre, size_t(n) * in);
    return;
  }
  dispatch("linear_backward_input_dgelu", [&]<typename T>(T* dpre, const T* dy, const T* w, const T* pre) {
    constexpr cudaDataType type = data_type<T>();
    lt_.run("linear dgrad + GELU backward",
            row_major(false, false, n, in, out, out, in, in, type, type, LtEpilogue::dgelu, in), w, dy, nullptr,
            0.0f, dpre, pre);
  }, dpre, dy, w, pre);
}

void CudaOps::linear_backward_weight(float* dw, float* db, ConstView dy, ConstView x, int n, int in, int out) {
  dispatch("linear_backward_weight", [&]<typename T>(const T* dy, const T* x) {
    // dW[O,I] += dY[N,O]ᵀ · X[N,I], into the fp32 gradient whatever the storage type.
    // Column-major this is D[I,O] += A[I,N] · B[O,N]ᵀ with A = Xᵀ and B = dYᵀ as stored (a
    // row-major buffer read column-major): B is dY and k runs over the N rows, so Σ_rows dY
    // is the BGRADB epilogue (Σ_k op(B)[k, j], one value per column of D = per output
    // channel), taken while the GEMM streams dY anyway instead of a second pass over dY[N,O]
    // (N·O reads) by the bias_grad kernel. The epilogue stores the bias gradient (of D's
    // type, fp32) while db accumulates over microbatches, so it goes to a scratch vector and
    // one O-length add accumulates it (2·O reads, O writes).
    // Where the library does not run BGRADB for these types (run_if_supported), the plain
    // GEMM and the kernel run. cuBLASLt leaves the reduction order of the epilogue to the
    // algorithm it picks: reproducible for the same GPU model and library version.
    const LtShape plain = row_major(true, false, out, in, n, out, in, in, data_type<T>(), CUDA_R_32F);
    if (db) {
      LtShape fused = plain;
      fused.epilogue = LtEpilogue::bgradb;
      auto* db_step = static_cast<float*>(column_workspace_.reserve(sizeof(float) * size_t(out)));
      if (lt_.run_if_supported("linear wgrad + bias gradient", fused, x, dy, db_step, 1.0f, dw)) {
        launch_accumulate(ctx(), db, static_cast<const float*>(db_step), size_t(out));
        return;
      }
    }
    lt_.run("linear wgrad", plain, x, dy, nullptr, 1.0f, dw);
    if (db) {
      auto* ws = static_cast<float*>(column_workspace_.reserve(bias_backward_workspace_bytes(n, out)));
      launch_bias_backward(ctx(), db, dy, ws, n, out);
    }
  }, dy, x);
}

// ---- causal self-attention (the pipeline of kernels/attention.cuh) --------------------------
// Grouped-query: the G = NH/NKV query heads of key/value head kv are heads kv·G .. kv·G+G-1,
// adjacent in [B,NH,T,HD], so each GEMM is one strided batch over the B·NKV groups of a
// [G·T, ·] matrix of the group's query rows against the group's [T,HD] k or v; dk and dv sum
// over the group's heads in the GEMM's k loop. Multi-head attention is the case G = 1.
// With bf16 storage every GEMM output (scores, y, dprobs, dv, dq, dk) is rounded to bf16
// once, and probs are kept in bf16 for backward.

void CudaOps::attention_forward(View out, View probs, ConstView qkv, int b, int t, int nh, int hd) {
  gqa_attention_forward(out, probs, qkv, b, t, nh, nh, hd);
}

void CudaOps::attention_backward_input(View dqkv, ConstView dout, ConstView qkv, ConstView probs, int b, int t,
                                       int nh, int hd) {
  gqa_attention_backward_input(dqkv, dout, qkv, probs, b, t, nh, nh, hd);
}

void CudaOps::gqa_attention_forward(View out, View probs, ConstView qkv, int b, int t, int nh, int nkv, int hd) {
  check_gqa_heads("gqa_attention_forward", nh, nkv);
  dispatch("attention_forward", [&]<typename T>(T* out, T* probs, const T* qkv) {
    const int groups = b * nkv, g = nh / nkv;                                // GEMM batch, heads per group
    const long long head = (long long)t * hd, square = (long long)t * t;     // per-head strides
    const size_t eq = padded<T>(size_t(b) * nh * head), ekv = padded<T>(size_t(groups) * head);
    auto* ws = static_cast<T*>(attention_workspace_.reserve((2 * eq + 2 * ekv) * sizeof(T)));
    T *q = ws, *y = ws + eq;                        // [B,NH,T,HD]
    T *k = ws + 2 * eq, *v = ws + 2 * eq + ekv;     // [B,NKV,T,HD]
    launch_attention_permute(ctx(), q, k, v, qkv, b, t, nh, nkv, hd);
    // scores[B,NH,T,T] = q kᵀ, per group [G·T,HD]·[T,HD]ᵀ, into probs; the softmax then works in place.
    gemm_batched("attention q·kᵀ", false, true, g * t, t, hd, q, hd, g * head, k, hd, head, probs, t, g * square,
                 groups);
    launch_attention_softmax_forward(ctx(), probs, probs, b * nh, t, 1.0f / std::sqrt(float(hd)));
    // y[B,NH,T,HD] = probs v, per group [G·T,T]·[T,HD]
    gemm_batched("attention probs·v", false, false, g * t, hd, t, probs, t, g * square, v, hd, head, y, hd,
                 g * head, groups);
    launch_attention_unpermute(ctx(), out, y, b, t, nh, hd);
  }, out, probs, qkv);
}

void CudaOps::gqa_attention_backward_input(View dqkv, ConstView dout, ConstView qkv, ConstView probs, int b, int t,
                                           int nh, int nkv, int hd) {
  check_gqa_heads("gqa_attention_backward_input", nh, nkv);
  dispatch("attention_backward_input", [&]<typename T>(T* dqkv, const T* dout, const T* qkv, const T* probs) {
    const int groups = b * nkv, g = nh / nkv;
    const long long head = (long long)t * hd, square = (long long)t * t;
    const size_t eq = padded<T>(size_t(b) * nh * head), ekv = padded<T>(size_t(groups) * head);
    const size_t s = padded<T>(size_t(b) * nh * square);
    auto* ws = static_cast<T*>(attention_workspace_.reserve((3 * eq + 4 * ekv + s) * sizeof(T)));
    T *q = ws, *dy = ws + eq, *dq = ws + 2 * eq;                        // [B,NH,T,HD]
    T *k = ws + 3 * eq, *v = k + ekv, *dk = k + 2 * ekv, *dv = k + 3 * ekv;  // [B,NKV,T,HD]
    T* dprobs = k + 4 * ekv;  // [B,NH,T,T], then dscores in place
    launch_attention_permute(ctx(), q, k, v, qkv, b, t, nh, nkv, hd);
    launch_attention_unpermute_backward(ctx(), dy, dout, b, t, nh, hd);
    // dprobs = dy vᵀ (per group [G·T,HD]·[T,HD]ᵀ);  dv = probsᵀ dy ([G·T,T]ᵀ·[G·T,HD]: Σ over the group)
    gemm_batched("attention dy·vᵀ", false, true, g * t, t, hd, dy, hd, g * head, v, hd, head, dprobs, t,
                 g * square, groups);
    gemm_batched("attention probsᵀ·dy", true, false, t, hd, g * t, probs, t, g * square, dy, hd, g * head, dv, hd,
                 head, groups);
    // dscores = softmax backward, with the 1/√HD of the forward folded in
    launch_attention_softmax_backward(ctx(), dprobs, dprobs, probs, b * nh, t, 1.0f / std::sqrt(float(hd)));
    // dq = dscores k (per group [G·T,T]·[T,HD]);  dk = dscoresᵀ q ([G·T,T]ᵀ·[G·T,HD]: Σ over the group)
    gemm_batched("attention dscores·k", false, false, g * t, hd, t, dprobs, t, g * square, k, hd, head, dq, hd,
                 g * head, groups);
    gemm_batched("attention dscoresᵀ·q", true, false, t, hd, g * t, dprobs, t, g * square, q, hd, g * head, dk, hd,
                 head, groups);
    launch_attention_permute_backward(ctx(), dqkv, dq, dk, dv, b, t, nh, nkv, hd);
  }, dqkv, dout, qkv, probs);
}

}  // namespace pptrain::cuda
