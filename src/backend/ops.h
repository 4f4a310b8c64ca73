// The op interface: every numeric operation the model and optimizer need, on raw
// backend buffers with explicit shapes (no STL containers on the hot path). The cpu
// backend (OpenBLAS + OpenMP) is the reference; the cuda backend implements the same
// interface with kernels/ and cuBLAS. Pointers are backend memory: host memory for
// cpu, device memory for cuda. All tensors are row-major.
//
// Each op is declared once, in the list PPTRAIN_OPS below, and takes typed views:
// activations, their gradients and the weights a layer computes with are View /
// ConstView (pointer + dtype; the shape is the op's dimension arguments, documented per
// op). A view converts implicitly from float* or bfloat16*, so a layer templated over its
// storage type calls the same op either way, and nullptr ("absent") matches any dtype.
// The views of one call share one dtype. What is fp32 under every precision stays float*:
// parameter gradients, layernorm statistics, cross-entropy row statistics, optimizer
// state. All arithmetic accumulates in fp32.
//
// Precision: every backend runs every op in fp32. `training.precision: bf16` stores weights
// (the bf16 working copy of the fp32 master), activations and their gradients in bf16,
// which the cuda backend runs and the cpu backend does not: a backend given a dtype it
// lacks fails with one line naming the backend, the dtype and the op.
//
// Shapes use llm.c's letters: N rows (= B·T tokens of one microbatch), C channels,
// I/O a linear layer's input/output width, NH heads, HD head size, VL the columns of
// this rank's vocabulary shard.
//
// Backward follows the dgrad/wgrad split of DESIGN.md: *_backward_input computes the
// gradient w.r.t. the input only (the "I" pass); *_backward_weight accumulates parameter
// gradients (the "W" pass). Gradient buffers of parameters are always accumulated into
// (+=), so microbatches add up without extra copies.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "core/faults.h"
#include "core/rotary.h"

namespace pptrain {

// ---- typed views -----------------------------------------------------------------------

enum class DType : uint8_t { f32, bf16 };
constexpr const char* dtype_name(DType t) { return t == DType::f32 ? "fp32" : "bf16"; }
constexpr size_t dtype_size(DType t) { return t == DType::f32 ? sizeof(float) : sizeof(bfloat16); }

// Backend memory of one dtype. Null data means "absent" (an optional operand) and
// matches any dtype.
struct View {
  void* data = nullptr;
  DType dtype = DType::f32;
  View(float* p) : data(p), dtype(DType::f32) {}
  View(bfloat16* p) : data(p), dtype(DType::bf16) {}
  View(std::nullptr_t) {}
};
struct ConstView {
  const void* data = nullptr;
  DType dtype = DType::f32;
  ConstView(const float* p) : data(p), dtype(DType::f32) {}
  ConstView(const bfloat16* p) : data(p), dtype(DType::bf16) {}
  ConstView(View v) : data(v.data), dtype(v.dtype) {}
  ConstView(std::nullptr_t) {}
};

// One tensor of Ops::adamw_multi: the arguments of Ops::adamw that differ between tensors.
struct AdamwTensor {
  float *p_out, *m_out, *v_out;
  View p_working;  // the bf16 working copy, or null
  const float *p, *g, *m, *v;
  size_t n;
  float wd;
};

// ---- the ops ---------------------------------------------------------------------------
// Every op once, as KIND(return type, name, (parameters), (argument names)), by family:
//   OP        each backend writes the body;
//   LAUNCHED  the cuda body is generated (cuda_kernel_ops.cpp): the one call
//             kernels::launch_<name>(ctx, arguments...) at the views' storage type, so the
//             launcher takes the op's parameters in order (a view as T* / const T*).
// Ops declares each entry pure virtual; CpuOps and CudaOps declare their overrides from
// the same list (PPTRAIN_EACH_OP(PPTRAIN_OP_OVERRIDE)). A new LAUNCHED op is its entry
// here, its cpu body (backend/cpu/<family>.cpp) and its launcher in kernels/<family>.cuh
// (declaration) and kernels/<family>.cu (kernel, launcher, float and bf16 instantiations).
#define PPTRAIN_OPS(OP, LAUNCHED)                                                                  \
  /* ---- storage ----------------------------------------------------------------------------- */ \
  /* dst[n] = src[n] in dst's dtype: fp32 -> bf16 rounds to nearest even, bf16 -> fp32 is exact,   \
     the same dtype copies. */                                                                     \
  OP(void, cast, (View dst, ConstView src, size_t n), (dst, src, n))                               \
                                                                                                   \
  /* ---- linear: Y[N,O] = X[N,I] · W[O,I]ᵀ + b[O] -------------------------------------------- */ \
  /* b may be null (no bias, or a row-parallel layer that adds its bias after the all-reduce). */  \
  OP(void, linear_forward,                                                                         \
     (View y, ConstView x, ConstView w, ConstView b, int n, int in, int out),                      \
     (y, x, w, b, n, in, out))                                                                     \
  /* y[N,O] = X[N,I] · W[O,I]ᵀ + b[O] + residual[N,O] (b may be null; residual may be y itself):   \
     a projection joining the residual stream where tp = 1 (under tp the partial sums are          \
     all-reduced first). The cpu body is linear_forward, add_bias and add (their arithmetic, bit   \
     for bit; in place, the product added onto y); the cuda body is one cuBLASLt GEMM reading       \
     residual as its C (beta 1) with the bias epilogue, y rounded once: two passes over [N,O]      \
     fewer. Used by GPT-2's MLP output and the Llama family's o_proj and down. */                  \
  OP(void, linear_forward_residual,                                                                \
     (View y, ConstView x, ConstView w, ConstView b, ConstView residual, int n, int in, int out),  \
     (y, x, w, b, residual, n, in, out))                                                           \
  /* dX[N,I] = dY[N,O] · W[O,I]; with accumulate, dX += instead. */                                \
  OP(void, linear_backward_input,                                                                  \
     (View dx, ConstView dy, ConstView w, int n, int in, int out, bool accumulate),                \
     (dx, dy, w, n, in, out, accumulate))                                                          \
  /* dW[O,I] += dYᵀ · X;  db[O] += Σ_rows dY  (db may be null). */                                 \
  OP(void, linear_backward_weight,                                                                 \
     (float* dw, float* db, ConstView dy, ConstView x, int n, int in, int out),                    \
     (dw, db, dy, x, n, in, out))                                                                  \
  /* Fused FC1 + GELU (tanh form, as gelu_forward): pre[N,O] = X·Wᵀ + b (kept for backward) and    \
     y[N,O] = gelu(pre). The cpu body is linear_forward then gelu_forward; the cuda body is one    \
     cuBLASLt GEMM with the GELU_AUX_BIAS epilogue (y and pre rounded once each from fp32) where   \
     O is a multiple of 8 (the aux leading-dimension rule), else the two unfused ops. */          \
  OP(void, linear_gelu_forward,                                                                    \
     (View y, View pre, ConstView x, ConstView w, ConstView b, int n, int in, int out),            \
     (y, pre, x, w, b, n, in, out))                                                                \
  /* Fused dgrad through the GELU: dpre[N,I] = (dY[N,O] · W[O,I]) ∘ gelu'(pre[N,I]) (overwrites).  \
     The cpu body is linear_backward_input then gelu_backward; the cuda body is one cuBLASLt GEMM  \
     with the DGELU epilogue where I is a multiple of 8, else the two unfused ops. */              \
  OP(void, linear_backward_input_dgelu,                                                            \
     (View dpre, ConstView dy, ConstView w, ConstView pre, int n, int in, int out),                \
     (dpre, dy, w, pre, n, in, out))                                                               \
                                                                                                   \
  /* ---- layernorm over C, eps = 1e-5 -------------------------------------------------------- */ \
  /* y[N,C] = (x - mean) · rstd · g[C] + b[C]; saves mean[N] and rstd[N] for backward. */          \
  LAUNCHED(void, layernorm_forward,                                                                \
           (View y, float* mean, float* rstd, ConstView x, ConstView g, ConstView b, int n,        \
            int c),                                                                                \
           (y, mean, rstd, x, g, b, n, c))                                                         \
  /* dx[N,C] = residual[N,C] + rstd · (dŷ - mean(dŷ) - x̂ · mean(dŷ · x̂)), where dŷ = dy · g:     \
     the residual stream's gradient joins the layernorm's in the same pass. residual may be null  \
     (dx = the layernorm term alone; dx is then not read); dx may alias residual or dy. The sum   \
     is residual[i] + term in fp32, rounded once to the storage type. */                          \
  LAUNCHED(void, layernorm_backward_input,                                                         \
           (View dx, ConstView dy, ConstView x, const float* mean, const float* rstd, ConstView g, \
            int n, int c, ConstView residual),                                                     \
           (dx, dy, x, mean, rstd, g, n, c, residual))                                             \
  /* dg += Σ_rows dy · x̂;  db += Σ_rows dy. */                                                     \
  OP(void, layernorm_backward_weight,                                                              \
     (float* dg, float* db, ConstView dy, ConstView x, const float* mean, const float* rstd,       \
      int n, int c),                                                                               \
     (dg, db, dy, x, mean, rstd, n, c))                                                            \
  /* Bias add, residual add and the following layernorm in one pass over memory:                 \
     sum[N,C] = (a + bias[C]) + b (the residual stream, kept; bias may be null; sum may alias a),  \
     y[N,C] = layernorm(sum) with g, beta as layernorm_forward, mean[N] and rstd[N] saved. Same    \
     values as add_bias (a + bias, rounded to the storage type), add, then layernorm_forward. */  \
  LAUNCHED(void, residual_layernorm_forward,                                                       \
           (View sum, View y, float* mean, float* rstd, ConstView a, ConstView bias, ConstView b,  \
            ConstView g, ConstView beta, int n, int c),                                            \
           (sum, y, mean, rstd, a, bias, b, g, beta, n, c))                                        \
                                                                                                   \
  /* ---- RMSNorm over C (Llama; Hugging Face LlamaRMSNorm) ----------------------------------- */ \
  /* y[N,C] = (x · rstd) · g[C], rstd = 1 / √(mean(x²) + eps) (eps inside the root); saves         \
     rstd[N] for backward. */                                                                      \
  LAUNCHED(void, rmsnorm_forward,                                                                  \
           (View y, float* rstd, ConstView x, ConstView g, int n, int c, float eps),               \
           (y, rstd, x, g, n, c, eps))                                                             \
  /* dx[N,C] = residual + rstd · (dŷ - x̂ · mean(dŷ · x̂)), x̂ = x · rstd, dŷ = dy · g; residual    \
     may be null (then dx is not read); dx may alias residual or dy, as layernorm's dgrad. */      \
  LAUNCHED(void, rmsnorm_backward_input,                                                           \
           (View dx, ConstView dy, ConstView x, const float* rstd, ConstView g, int n, int c,      \
            ConstView residual),                                                                   \
           (dx, dy, x, rstd, g, n, c, residual))                                                   \
  /* dg[C] += Σ_rows dy · x̂. */                                                                    \
  OP(void, rmsnorm_backward_weight,                                                                \
     (float* dg, ConstView dy, ConstView x, const float* rstd, int n, int c),                      \
     (dg, dy, x, rstd, n, c))                                                                      \
                                                                                                   \
  /* ---- rotary position embedding (RoPE, rotate-half convention of Hugging Face Llama) ------- */ \
  /* In place on the query and key heads of qkv[B,T,(NH + 2·NKV)·HD] (the values are untouched):   \
     for each head and i < HD/2, with angle a = pos · rope.inv_freq[i] (core/rotary.h: theta and \
     the scaling) and pos = the row's position in its sequence (row mod T), (x_i, x_{i+HD/2}) <-  \
     (x_i cos a - x_{i+HD/2} sin a, x_{i+HD/2} cos a + x_i sin a). HD is even, rope.planes HD/2. */ \
  OP(void, rotary_forward, (View qkv, int b, int t, int nh, int nkv, int hd, const RotaryFrequencies& rope), \
     (qkv, b, t, nh, nkv, hd, rope))                                                               \
  /* The dgrad, in place on dqkv of the same layout: the transposed (inverse) rotation, so the    \
     gradient at the rotated q, k becomes the gradient at the projections' outputs. */            \
  OP(void, rotary_backward_input,                                                                  \
     (View dqkv, int b, int t, int nh, int nkv, int hd, const RotaryFrequencies& rope),            \
     (dqkv, b, t, nh, nkv, hd, rope))                                                              \
                                                                                                   \
  /* ---- SwiGLU (Llama MLP): y = silu(gate) · up, silu(x) = x · sigmoid(x) ------------------- */ \
  /* y[n] from gate[n], up[n]; y may alias neither. */                                             \
  LAUNCHED(void, swiglu_forward, (View y, ConstView gate, ConstView up, size_t n),                 \
           (y, gate, up, n))                                                                       \
  /* dgate[n] = dy · up · silu'(gate), dup[n] = dy · silu(gate) (both overwritten). */             \
  LAUNCHED(void, swiglu_backward_input,                                                            \
           (View dgate, View dup, ConstView dy, ConstView gate, ConstView up, size_t n),           \
           (dgate, dup, dy, gate, up, n))                                                          \
                                                                                                   \
  /* ---- GELU, tanh approximation (GPT-2) ---------------------------------------------------- */ \
  /* y[n] = 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))); y may alias x. */                          \
  LAUNCHED(void, gelu_forward, (View y, ConstView x, size_t n), (y, x, n))                         \
  /* dx[n] = dy · gelu'(x). */                                                                     \
  LAUNCHED(void, gelu_backward, (View dx, ConstView dy, ConstView x, size_t n), (dx, dy, x, n))    \
                                                                                                   \
  /* ---- elementwise ------------------------------------------------------------------------- */ \
  /* y[n] = a + b; y may alias a or b. */                                                          \
  LAUNCHED(void, add, (View y, ConstView a, ConstView b, size_t n), (y, a, b, n))                  \
  /* y[n] += x. */                                                                                 \
  LAUNCHED(void, accumulate, (View y, ConstView x, size_t n), (y, x, n))                           \
  /* y[n] *= s. */                                                                                 \
  LAUNCHED(void, scale, (View y, float s, size_t n), (y, s, n))                                    \
  /* y[N,C] += b[C]. */                                                                            \
  LAUNCHED(void, add_bias, (View y, ConstView b, int n, int c), (y, b, n, c))                      \
  /* y[rows, cols] (rows y_stride elements apart) <- x[rows, cols] (rows x_stride apart): a block  \
     of columns between packed rows (Qwen3's q and k heads out of qkv and back); no overlap. */    \
  LAUNCHED(void, copy_columns, (View y, ConstView x, int rows, int cols, int y_stride, int x_stride), \
           (y, x, rows, cols, y_stride, x_stride))                                                 \
                                                                                                   \
  /* ---- embedding (token + position) -------------------------------------------------------- */ \
  /* y[N,C] = wte[tok - v0] + wpe[row mod T]. The token table wte[VL,C] is this rank's             \
     vocabulary shard, rows [v0, v0 + VL); a token outside it contributes zero (the                \
     tensor-parallel all-reduce adds the shards). wpe[T,C] may be null (then only the token        \
     part). */                                                                                     \
  LAUNCHED(void, embedding_forward,                                                                \
           (View y, const int32_t* tokens, ConstView wte, ConstView wpe, int n, int t, int c,      \
            int v0, int vl),                                                                       \
           (y, tokens, wte, wpe, n, t, c, v0, vl))                                                 \
  /* dwte[tok - v0] += dy[row] for tokens in the shard; dwpe[row mod T] += dy[row] if dwpe is      \
     non-null. Deterministic: the sum order does not depend on thread timing. */                   \
  OP(void, embedding_backward_weight,                                                              \
     (float* dwte, float* dwpe, ConstView dy, const int32_t* tokens, int n, int t, int c, int v0,  \
      int vl),                                                                                     \
     (dwte, dwpe, dy, tokens, n, t, c, v0, vl))                                                    \
                                                                                                   \
  /* ---- causal self-attention core ---------------------------------------------------------- */ \
  /* qkv[B,T,3·NH·HD]: per row the NH·HD query values, then keys, then values (head h at           \
     columns h·HD.. of each block). out[B,T,NH·HD] = softmax(q kᵀ / √HD, causal) v.                \
     probs[B,NH,T,T] keeps the softmax for backward (entries above the diagonal are 0), in the     \
     views' dtype. */                                                                              \
  OP(void, attention_forward, (View out, View probs, ConstView qkv, int b, int t, int nh, int hd), \
     (out, probs, qkv, b, t, nh, hd))                                                              \
  /* dqkv[B,T,3·NH·HD] = gradient of the three blocks from dout[B,T,NH·HD] (overwrites). */        \
  OP(void, attention_backward_input,                                                               \
     (View dqkv, ConstView dout, ConstView qkv, ConstView probs, int b, int t, int nh, int hd),    \
     (dqkv, dout, qkv, probs, b, t, nh, hd))                                                       \
                                                                                                   \
  /* ---- causal self-attention, fused (flash): the T×T matrix is never stored ---------------- */ \
  /* out[B,T,NH·HD] as attention_forward; lse[B,NH,T] (fp32) = log Σ_{j≤i} exp(q_i·k_j / √HD),      \
     each query row's log-sum-exp of the scaled scores (natural log), kept for backward instead    \
     of probs. Memory O(B·NH·T), not O(B·NH·T²). */                                                \
  OP(void, flash_attention_forward,                                                                \
     (View out, float* lse, ConstView qkv, int b, int t, int nh, int hd),                          \
     (out, lse, qkv, b, t, nh, hd))                                                                \
  /* dqkv[B,T,3·NH·HD] (overwrites) from dout[B,T,NH·HD] and the forward's qkv, out and lse; the   \
     probabilities are recomputed from lse tile by tile. delta[B,NH,T] is fp32 scratch the         \
     backend may use for Σ_d dout·out per row. */                                                  \
  OP(void, flash_attention_backward_input,                                                         \
     (View dqkv, float* delta, ConstView dout, ConstView qkv, ConstView out, const float* lse,     \
      int b, int t, int nh, int hd),                                                               \
     (dqkv, delta, dout, qkv, out, lse, b, t, nh, hd))                                             \
                                                                                                   \
  /* ---- grouped-query attention (GQA): the four attention ops above with NKV key/value heads -- */ \
  /* qkv[B,T,(NH + 2·NKV)·HD]: per row the NH query heads, then NKV key heads, then NKV value      \
     heads; NKV divides NH and query head h attends with key/value head h / (NH/NKV) (Hugging      \
     Face's repeat_kv). NKV = NH is multi-head attention: the ops above are that case. out,         \
     probs, lse and delta as above; dqkv has qkv's layout, its key/value gradients summed over     \
     each group's query heads. */                                                                  \
  OP(void, gqa_attention_forward,                                                                  \
     (View out, View probs, ConstView qkv, int b, int t, int nh, int nkv, int hd),                 \
     (out, probs, qkv, b, t, nh, nkv, hd))                                                         \
  OP(void, gqa_attention_backward_input,                                                           \
     (View dqkv, ConstView dout, ConstView qkv, ConstView probs, int b, int t, int nh, int nkv,    \
      int hd),                                                                                     \
     (dqkv, dout, qkv, probs, b, t, nh, nkv, hd))                                                  \
  OP(void, gqa_flash_attention_forward,                                                            \
     (View out, float* lse, ConstView qkv, int b, int t, int nh, int nkv, int hd),                 \
     (out, lse, qkv, b, t, nh, nkv, hd))                                                           \
  OP(void, gqa_flash_attention_backward_input,                                                     \
     (View dqkv, float* delta, ConstView dout, ConstView qkv, ConstView out, const float* lse,     \
      int b, int t, int nh, int nkv, int hd),                                                      \
     (dqkv, delta, dout, qkv, out, lse, b, t, nh, nkv, hd))                                        \
                                                                                                   \
  /* ---- vocabulary-parallel softmax cross-entropy ------------------------------------------- */ \
  /* logits[N,VL] are columns [v0, v0 + VL) of the full vocabulary; only the first `valid`         \
     columns are real tokens, the rest is padding (vocab rounded up to a multiple of tp) and is    \
     ignored. With tp > 1 the caller all-reduces rmax (max), then sumexp and target_logit (sum)    \
     between the calls; full logits are never gathered. The row statistics are fp32 [N].           \
     rmax = max over the valid columns. */                                                         \
  LAUNCHED(void, ce_row_max, (float* rmax, ConstView logits, int n, int vl, int valid),            \
           (rmax, logits, n, vl, valid))                                                           \
  /* sumexp = Σ exp(logit - rmax); target_logit = logits[target - v0] if the target is in this     \
     shard, else 0. */                                                                             \
  LAUNCHED(void, ce_sumexp_target,                                                                 \
           (float* sumexp, float* target_logit, ConstView logits, const float* rmax,               \
            const int32_t* targets, int n, int vl, int valid, int v0),                             \
           (sumexp, target_logit, logits, rmax, targets, n, vl, valid, v0))                        \
  /* loss[0] = Σ_rows (log(sumexp) + rmax - target_logit), the summed loss, in double in the      \
     backend's memory: the caller reads it when it needs it (a step reads its microbatches'        \
     losses once, after the pipeline, instead of waiting for each). */                            \
  OP(void, ce_loss_sum,                                                                            \
     (double* loss, const float* rmax, const float* sumexp, const float* target_logit, int n),     \
     (loss, rmax, sumexp, target_logit, n))                                                        \
  /* dlogits[N,VL] = scale · (softmax - onehot(target)); padding columns get 0. May alias          \
     logits. */                                                                                    \
  LAUNCHED(void, ce_backward,                                                                      \
           (View dlogits, ConstView logits, const float* rmax, const float* sumexp,                \
            const int32_t* targets, int n, int vl, int valid, int v0, float scale),                \
           (dlogits, logits, rmax, sumexp, targets, n, vl, valid, v0, scale))                      \
  /* The tp = 1 path in one op (v0 = 0): what ce_row_max, ce_sumexp_target and ce_backward       \
     write (rmax, sumexp, target_logit, dlogits), with the row statistics computed in one pass    \
     (an online softmax on cuda: the max and the sum of exponentials together, so they round      \
     apart from the split calls' by float summation order only). May alias logits. */            \
  LAUNCHED(void, ce_fused,                                                                         \
           (View dlogits, float* rmax, float* sumexp, float* target_logit, ConstView logits,      \
            const int32_t* targets, int n, int vl, int valid, float scale),                        \
           (dlogits, rmax, sumexp, target_logit, logits, targets, n, vl, valid, scale))            \
                                                                                                   \
  /* ---- optimizer (fp32: masters, gradients and moments) ------------------------------------ */ \
  /* One AdamW step (Loshchilov & Hutter) from p[n], g[n], m[n], v[n] into p_out[n], m_out[n],     \
     v_out[n]: with g' = g · grad_scale (one fp32 multiply: the clip factor, 1 when not clipping;  \
     g itself is left unscaled), m_out = b1 m + (1-b1) g'; v_out = b2 v + (1-b2) g'²;              \
     p_out = p - lr (m̂ / (√v̂ + eps) + wd p), with bias corrections for step t (1-based). Each      \
     output is its input (in place) or overlaps no input (out of place: post-validation keeps      \
     the inputs as its backup); element-wise, so both give the same bits. p_working[n] is null or  \
     the bf16 working copy: it receives p_out rounded to nearest even, the same bits as            \
     cast(p_working, p_out, n). */                                                                 \
  OP(void, adamw,                                                                                  \
     (float* p_out, float* m_out, float* v_out, View p_working, const float* p, const float* g,    \
      const float* m, const float* v, size_t n, float grad_scale, float lr, float b1, float b2,    \
      float eps, float wd, int t),                                                                 \
     (p_out, m_out, v_out, p_working, p, g, m, v, n, grad_scale, lr, b1, b2, eps, wd, t))          \
  /* adamw on each tensor of the list with one step's common arguments (each tensor its own      \
     weight decay): the bits of one adamw call per tensor. The cuda body updates many tensors per  \
     launch: most tensors of a model are small (biases, norm gains), and one launch each was a     \
     third of the optimizer's time on GPUs. */                                                     \
  OP(void, adamw_multi,                                                                            \
     (const std::vector<AdamwTensor>& tensors, float grad_scale, float lr, float b1, float b2,      \
      float eps, int t),                                                                           \
     (tensors, grad_scale, lr, b1, b2, eps, t))                                                    \
  /* Σ x², accumulated in double, returned to the host. */                                         \
  OP(double, sum_squares, (const float* x, size_t n), (x, n))

// What a backend's allocator holds, in bytes (Ops::memory_stats): what Ops::allocate handed
// out (and on cuda cuDNN's per-call workspace, taken from the same allocator). A backend's
// own scratch (the cpu backend's per-thread attention tiles and packed weight copies, the
// cuda backend's GEMM and reduction workspaces, cuBLASLt's) is not in the first three
// figures: it is `outside`, apart.
struct MemoryStats {
  size_t in_use = 0;    // allocated and not yet released
  size_t peak = 0;      // the most in_use since construction or the last reset_peak_memory()
  size_t reserved = 0;  // held from the system: in_use with the allocator's rounding, and for
                        // cuda the released blocks its cache keeps from the driver
  size_t outside = 0;   // the backend's own scratch, held now outside the allocator
};

// Both kinds alike, and the two declarations every backend needs.
#define PPTRAIN_EACH_OP(X) PPTRAIN_OPS(X, X)
#define PPTRAIN_OP_PURE(ret, name, params, args) virtual ret name params = 0;
#define PPTRAIN_OP_OVERRIDE(ret, name, params, args) ret name params override;

// Marks in a backend's own order of work, for timing its ops (backend/profiled_ops.h):
// mark(i) records mark i where the backend's work has got to (marks are numbered from 0
// and reused after resolve); resolve(n) waits until marks 0..n-1 are reached and returns
// each one's time in milliseconds after mark 0. Between two marks lies exactly the work
// issued between them, so an op's time is the difference of the marks around it.
class OpClock {
 public:
  virtual ~OpClock() = default;
  virtual void mark(size_t i) = 0;
  virtual std::vector<double> resolve(size_t n) = 0;
};

// What the device ran for the ops (backend/profiled_ops.h, logging.kernel_profile): every
// kernel, copy and fill issued between start() and stop(), with the op call that issued it.
// begin_call(i) .. end_call() bracket op call i of a step (the work issued in between is
// that call's); collect() waits for the device and returns what ran since the last
// collect(), times in ms on the device's clock (their origin is arbitrary: only
// differences mean something). Work issued outside a call (communication, the trainer's
// own copies) has call -1. Outside start()..stop() nothing is recorded and nothing slows.
struct KernelRecord {
  std::string name;  // the kernel's (demangled), or "memcpy" / "memset"
  double start_ms = 0, end_ms = 0;
  long long call = -1;
};
class KernelRecorder {
 public:
  virtual ~KernelRecorder() = default;
  virtual void start() = 0;
  virtual void stop() = 0;
  virtual void begin_call(size_t call) = 0;
  virtual void end_call() = 0;
  virtual std::vector<KernelRecord> collect() = 0;
};

class Ops {
 public:
  virtual ~Ops() = default;
  virtual std::string name() const = 0;
  // A clock for op profiling. The default reads the host's steady clock at each mark, which
  // is right for a backend whose ops complete before they return (cpu); cuda records events
  // on its stream, so profiling adds no host wait inside a step.
  virtual std::unique_ptr<OpClock> make_op_clock();
  // Kernel records for op profiling; the default throws Error (a backend that runs no
  // kernels: cpu). cuda: CUPTI's activity records (one recorder per process at a time).
  virtual std::unique_ptr<KernelRecorder> make_kernel_recorder();

  // ---- memory ------------------------------------------------------------------
  virtual void* allocate(size_t bytes) = 0;  // zero-filled
  virtual void release(void* p) = 0;
  virtual void copy_to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // device to device
  virtual void zero(void* p, size_t bytes) = 0;
  virtual void synchronize() = 0;
  // The allocator's figures (see MemoryStats for what each backend counts), and a new
  // starting point for the peak: after it, peak = in_use until more is allocated.
  virtual MemoryStats memory_stats() const = 0;
  virtual void reset_peak_memory() = 0;

  // hold_weights(m), m > 0, opens a window that runs m microbatches and in which the caller
  // promises that every weight the linear ops read (their w) is constant from its first use
  // on: the passes of a training step or an evaluation. hold_weights(0) closes it. A backend
  // may meanwhile keep weights in a layout of its own (cpu: packed for oneDNN's matmul where
  // m makes it pay, backend/cpu/packed_weights.h) and must take them anew in the next window.
  // The default keeps nothing.
  virtual void hold_weights(int microbatches) { (void)microbatches; }
  // Inside a window: a linear op of it will read w [out, in] (its forward x·wᵀ, or with
  // `dgrad` its dy·w) over `rows` rows a call. A backend that keeps weights in a layout of its
  // own may make w's copy now instead of at that op (the same copy, the same results): the
  // pipeline asks while it waits for a transfer (runtime/executor.h), so the work leaves the
  // path the other ranks wait on. False where this window keeps no such copies (then none of
  // its weights needs asking for): the default.
  virtual bool prepare_linear_weight(ConstView w, int rows, int in, int out, bool dgrad) {
    (void)w, (void)rows, (void)in, (void)out, (void)dgrad;
    return false;
  }

  // ---- the ops of PPTRAIN_OPS ------------------------------------------------------
  PPTRAIN_EACH_OP(PPTRAIN_OP_PURE)
};

// hold_weights(microbatches) for a scope, and hold_weights(0) when it ends, also by an
// exception.
class WeightsHeld {
 public:
  WeightsHeld(Ops& ops, int microbatches) : ops_(ops) { ops_.hold_weights(microbatches); }
  ~WeightsHeld() { ops_.hold_weights(0); }
  WeightsHeld(const WeightsHeld&) = delete;
  WeightsHeld& operator=(const WeightsHeld&) = delete;

 private:
  Ops& ops_;
};

// The reference backend (backend/cpu). `faults`: the planted faults acting on this rank
// (core/faults.h; uncounted_release acts in its memory accounting).
std::unique_ptr<Ops> make_cpu_ops(const Faults& faults = {});

}  // namespace pptrain
