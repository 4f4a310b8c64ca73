// The op interface: every numeric operation the model and optimizer need, on raw
// backend buffers with explicit shapes (no STL containers on the hot path). The cpu
// backend (OpenBLAS + OpenMP) is the reference; the cuda backend implements the same
// interface with kernels/ and cuBLAS. Pointers are backend memory: host memory for
// cpu, device memory for cuda. All tensors are row-major.
//
// Precision: every op exists in fp32. The ops that touch activations or the weights a
// layer computes with also exist with bf16 storage (`training.precision: bf16`): weights
// (the bf16 working copy of the fp32 master), activations and their gradients are bf16;
// parameter gradients, layernorm statistics and cross-entropy row statistics stay fp32,
// and all arithmetic accumulates in fp32. A backend without bf16 (cpu) inherits the
// default bf16 overloads, which fail with a one-line message.
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

#include "core/bf16.h"

namespace pptrain {

class Ops {
 public:
  virtual ~Ops() = default;
  virtual std::string name() const = 0;

  // ---- memory ------------------------------------------------------------------
  virtual void* allocate(size_t bytes) = 0;  // zero-filled
  virtual void release(void* p) = 0;
  virtual void copy_to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // device to device
  virtual void zero(void* p, size_t bytes) = 0;
  virtual void synchronize() = 0;

  // ---- linear: Y[N,O] = X[N,I] · W[O,I]ᵀ + b[O] -----------------------------------
  // b may be null (no bias, or a row-parallel layer that adds its bias after the all-reduce).
  virtual void linear_forward(float* y, const float* x, const float* w, const float* b, int n,
                              int in, int out) = 0;
  // dX[N,I] = dY[N,O] · W[O,I]; with accumulate, dX += instead.
  virtual void linear_backward_input(float* dx, const float* dy, const float* w, int n, int in,
                                     int out, bool accumulate) = 0;
  // dW[O,I] += dYᵀ · X;  db[O] += Σ_rows dY  (db may be null).
  virtual void linear_backward_weight(float* dw, float* db, const float* dy, const float* x, int n,
                                      int in, int out) = 0;

  // ---- layernorm over C, eps = 1e-5 ----------------------------------------------
  // y = (x - mean) · rstd · g + b; saves mean[N] and rstd[N] for backward.
  virtual void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* g,
                                 const float* b, int n, int c) = 0;
  // dx (+)= rstd · (dŷ - mean(dŷ) - x̂ · mean(dŷ · x̂)), where dŷ = dy · g.
  virtual void layernorm_backward_input(float* dx, const float* dy, const float* x,
                                        const float* mean, const float* rstd, const float* g, int n,
                                        int c, bool accumulate) = 0;
  // dg += Σ_rows dy · x̂;  db += Σ_rows dy.
  virtual void layernorm_backward_weight(float* dg, float* db, const float* dy, const float* x,
                                         const float* mean, const float* rstd, int n, int c) = 0;

  // ---- GELU, tanh approximation (GPT-2) ------------------------------------------
  virtual void gelu_forward(float* y, const float* x, size_t n) = 0;
  virtual void gelu_backward(float* dx, const float* dy, const float* x, size_t n) = 0;  // dx = dy · gelu'(x)

  // ---- elementwise -----------------------------------------------------------------
  virtual void add(float* y, const float* a, const float* b, size_t n) = 0;  // y = a + b; y may alias a or b
  virtual void accumulate(float* y, const float* x, size_t n) = 0;           // y += x
  virtual void scale(float* y, float s, size_t n) = 0;                       // y *= s
  virtual void add_bias(float* y, const float* b, int n, int c) = 0;         // y[N,C] += b[C]

  // ---- embedding (token + position) ------------------------------------------------
  // y[N,C] = wte[tok - v0] + wpe[row mod T]. The token table is this rank's vocabulary
  // shard, rows [v0, v0 + VL); a token outside it contributes zero (the tensor-parallel
  // all-reduce adds the shards). wpe may be null (then only the token part).
  virtual void embedding_forward(float* y, const int32_t* tokens, const float* wte,
                                 const float* wpe, int n, int t, int c, int v0, int vl) = 0;
  // dwte[tok - v0] += dy[row] for tokens in the shard; dwpe[row mod T] += dy[row] if dwpe
  // is non-null. Deterministic: the sum order does not depend on thread timing.
  virtual void embedding_backward_weight(float* dwte, float* dwpe, const float* dy,
                                         const int32_t* tokens, int n, int t, int c, int v0,
                                         int vl) = 0;

  // ---- causal self-attention core ---------------------------------------------------
  // qkv[B,T,3·NH·HD]: per row the NH·HD query values, then keys, then values (head h at
  // columns h·HD.. of each block). out[B,T,NH·HD] = softmax(q kᵀ / √HD, causal) v.
  // probs[B,NH,T,T] keeps the softmax for backward (entries above the diagonal are 0).
  virtual void attention_forward(float* out, float* probs, const float* qkv, int b, int t, int nh,
                                 int hd) = 0;
  // dqkv[B,T,3·NH·HD] = gradient of the three blocks from dout[B,T,NH·HD] (overwrites).
  virtual void attention_backward_input(float* dqkv, const float* dout, const float* qkv,
                                        const float* probs, int b, int t, int nh, int hd) = 0;

  // ---- vocabulary-parallel softmax cross-entropy -------------------------------------
  // logits[N,VL] are columns [v0, v0 + VL) of the full vocabulary; only the first `valid`
  // columns are real tokens, the rest is padding (vocab rounded up to a multiple of tp)
  // and is ignored. With tp > 1 the caller all-reduces rmax (max), then sumexp and
  // target_logit (sum) between the calls; full logits are never gathered.
  virtual void ce_row_max(float* rmax, const float* logits, int n, int vl, int valid) = 0;
  // sumexp[N] = Σ exp(logit - rmax); target_logit[N] = logits[target - v0] if the target is
  // in this shard, else 0.
  virtual void ce_sumexp_target(float* sumexp, float* target_logit, const float* logits,
                                const float* rmax, const int32_t* targets, int n, int vl, int valid,
                                int v0) = 0;
  // Σ_rows (log(sumexp) + rmax - target_logit): the summed loss, returned to the host.
  virtual double ce_loss_sum(const float* rmax, const float* sumexp, const float* target_logit,
                             int n) = 0;
  // dlogits = scale · (softmax - onehot(target)); padding columns get 0. May alias logits.
  virtual void ce_backward(float* dlogits, const float* logits, const float* rmax,
                           const float* sumexp, const int32_t* targets, int n, int vl, int valid,
                           int v0, float scale) = 0;

  // ---- optimizer -------------------------------------------------------------------
  // One AdamW step (Loshchilov & Hutter): m = b1 m + (1-b1) g; v = b2 v + (1-b2) g²;
  // p -= lr (m̂ / (√v̂ + eps) + wd p), with bias corrections for step t (1-based).
  virtual void adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float b1,
                     float b2, float eps, float wd, int t) = 0;
  // Σ x², accumulated in double, returned to the host.
  virtual double sum_squares(const float* x, size_t n) = 0;

  // ---- bf16 storage (same semantics as the fp32 op of the same name) ----------------
  virtual void cast(bfloat16* dst, const float* src, size_t n);  // round to nearest even
  virtual void cast(float* dst, const bfloat16* src, size_t n);
  virtual void linear_forward(bfloat16* y, const bfloat16* x, const bfloat16* w, const bfloat16* b,
                              int n, int in, int out);
  virtual void linear_backward_input(bfloat16* dx, const bfloat16* dy, const bfloat16* w, int n,
                                     int in, int out, bool accumulate);
  virtual void linear_backward_weight(float* dw, float* db, const bfloat16* dy, const bfloat16* x,
                                      int n, int in, int out);
  virtual void layernorm_forward(bfloat16* y, float* mean, float* rstd, const bfloat16* x,
                                 const bfloat16* g, const bfloat16* b, int n, int c);
  virtual void layernorm_backward_input(bfloat16* dx, const bfloat16* dy, const bfloat16* x,
                                        const float* mean, const float* rstd, const bfloat16* g,
                                        int n, int c, bool accumulate);
  virtual void layernorm_backward_weight(float* dg, float* db, const bfloat16* dy,
                                         const bfloat16* x, const float* mean, const float* rstd,
                                         int n, int c);
  virtual void gelu_forward(bfloat16* y, const bfloat16* x, size_t n);
  virtual void gelu_backward(bfloat16* dx, const bfloat16* dy, const bfloat16* x, size_t n);
  virtual void add(bfloat16* y, const bfloat16* a, const bfloat16* b, size_t n);
  virtual void add_bias(bfloat16* y, const bfloat16* b, int n, int c);
  virtual void embedding_forward(bfloat16* y, const int32_t* tokens, const bfloat16* wte,
                                 const bfloat16* wpe, int n, int t, int c, int v0, int vl);
  virtual void embedding_backward_weight(float* dwte, float* dwpe, const bfloat16* dy,
                                         const int32_t* tokens, int n, int t, int c, int v0,
                                         int vl);
  // probs[B,NH,T,T] is bf16 as well.
  virtual void attention_forward(bfloat16* out, bfloat16* probs, const bfloat16* qkv, int b, int t,
                                 int nh, int hd);
  virtual void attention_backward_input(bfloat16* dqkv, const bfloat16* dout, const bfloat16* qkv,
                                        const bfloat16* probs, int b, int t, int nh, int hd);
  virtual void ce_row_max(float* rmax, const bfloat16* logits, int n, int vl, int valid);
  virtual void ce_sumexp_target(float* sumexp, float* target_logit, const bfloat16* logits,
                                const float* rmax, const int32_t* targets, int n, int vl,
                                int valid, int v0);
  virtual void ce_backward(bfloat16* dlogits, const bfloat16* logits, const float* rmax,
                           const float* sumexp, const int32_t* targets, int n, int vl, int valid,
                           int v0, float scale);

 protected:
  // The body of every bf16 overload a backend does not provide.
  [[noreturn]] void no_bf16(const char* op) const;
};

// The reference backend (backend/cpu).
std::unique_ptr<Ops> make_cpu_ops();

}  // namespace pptrain
