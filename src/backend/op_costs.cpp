// What each op computes and moves per call (profiled_ops.h's OpCost), from its arguments:
// FLOPs count 2 per multiply-add of the matrix products (GEMMs and attention's two or
// three products per pass; causal attention does half of each T x T product); bytes count
// each tensor the op reads or writes once, at its storage type (fp32 row statistics at 4).
// An op's achieved rate in the profile is these over its measured time: a lower bound on
// the traffic of a kernel that reads a tensor twice, the floor a fused kernel can reach.
#include "backend/profiled_ops.h"

namespace pptrain::op_costs {

namespace {
double es(ConstView v) { return double(dtype_size(v.dtype)); }
constexpr double kF32 = 4;
// Causal attention's two products per pass (Q Kᵀ, P V): 2 x 2 T² HD / 2 per head.
double attention_flops(int b, int t, int nh, int hd) { return 2.0 * b * nh * double(t) * t * hd; }
}  // namespace

OpCost cast(View dst, ConstView src, size_t n) { return {0, n * (es(dst) + es(src))}; }

// y[N,O] = x[N,I] wᵀ + b
OpCost linear_forward(View y, ConstView x, ConstView w, ConstView b, int n, int in, int out) {
  return {2.0 * n * in * out, es(y) * (double(n) * in + double(in) * out + double(n) * out)};
}
// + the residual [N,O] read
OpCost linear_forward_residual(View y, ConstView x, ConstView w, ConstView b, ConstView residual, int n, int in,
                               int out) {
  return {2.0 * n * in * out, es(y) * (double(n) * in + double(in) * out + 2.0 * n * out)};
}
OpCost linear_backward_input(View dx, ConstView dy, ConstView w, int n, int in, int out, bool accumulate) {
  return {2.0 * n * in * out, es(dx) * (double(n) * out + double(in) * out + (accumulate ? 2.0 : 1.0) * n * in)};
}
// dw[O,I] (fp32) += dyᵀ x
OpCost linear_backward_weight(float* dw, float* db, ConstView dy, ConstView x, int n, int in, int out) {
  return {2.0 * n * in * out, es(dy) * (double(n) * out + double(n) * in) + kF32 * 2.0 * in * out};
}
OpCost linear_gelu_forward(View y, View pre, ConstView x, ConstView w, ConstView b, int n, int in, int out) {
  return {2.0 * n * in * out, es(y) * (double(n) * in + double(in) * out + 2.0 * n * out)};
}
OpCost linear_backward_input_dgelu(View dpre, ConstView dy, ConstView w, ConstView pre, int n, int in, int out) {
  return {2.0 * n * in * out, es(dpre) * (double(n) * out + double(in) * out + 2.0 * n * in)};
}

// Norms: x and y (and dy, dx, residual) of [N,C]; the row statistics are small.
OpCost layernorm_forward(View y, float* mean, float* rstd, ConstView x, ConstView g, ConstView b, int n, int c) {
  return {0, es(y) * 2.0 * n * c};
}
OpCost layernorm_backward_input(View dx, ConstView dy, ConstView x, const float* mean, const float* rstd,
                                ConstView g, int n, int c, ConstView residual) {
  return {0, es(dx) * (residual.data ? 4.0 : 3.0) * n * c};
}
OpCost layernorm_backward_weight(float* dg, float* db, ConstView dy, ConstView x, const float* mean,
                                 const float* rstd, int n, int c) {
  return {0, es(dy) * 2.0 * n * c};
}
OpCost residual_layernorm_forward(View sum, View y, float* mean, float* rstd, ConstView a, ConstView bias,
                                  ConstView b, ConstView g, ConstView beta, int n, int c) {
  return {0, es(y) * 4.0 * n * c};
}
OpCost rmsnorm_forward(View y, float* rstd, ConstView x, ConstView g, int n, int c, float eps) {
  return {0, es(y) * 2.0 * n * c};
}
OpCost rmsnorm_backward_input(View dx, ConstView dy, ConstView x, const float* rstd, ConstView g, int n, int c,
                              ConstView residual) {
  return {0, es(dx) * (residual.data ? 4.0 : 3.0) * n * c};
}
OpCost rmsnorm_backward_weight(float* dg, ConstView dy, ConstView x, const float* rstd, int n, int c) {
  return {0, es(dy) * 2.0 * n * c};
}

// Rotary: the query and key heads, read and written in place.
OpCost rotary_forward(View qkv, int b, int t, int nh, int nkv, int hd, const RotaryFrequencies&) {
  return {0, es(qkv) * 2.0 * b * t * (nh + nkv) * hd};
}
OpCost rotary_backward_input(View dqkv, int b, int t, int nh, int nkv, int hd, const RotaryFrequencies&) {
  return {0, es(dqkv) * 2.0 * b * t * (nh + nkv) * hd};
}

OpCost swiglu_forward(View y, ConstView gate, ConstView up, size_t n) { return {0, es(y) * 3.0 * n}; }
OpCost swiglu_backward_input(View dgate, View dup, ConstView dy, ConstView gate, ConstView up, size_t n) {
  return {0, es(dy) * 5.0 * n};
}
OpCost gelu_forward(View y, ConstView x, size_t n) { return {0, es(y) * 2.0 * n}; }
OpCost gelu_backward(View dx, ConstView dy, ConstView x, size_t n) { return {0, es(dx) * 3.0 * n}; }
OpCost add(View y, ConstView a, ConstView b, size_t n) { return {0, es(y) * 3.0 * n}; }
OpCost accumulate(View y, ConstView x, size_t n) { return {0, es(y) * 3.0 * n}; }
OpCost scale(View y, float s, size_t n) { return {0, es(y) * 2.0 * n}; }
OpCost add_bias(View y, ConstView b, int n, int c) { return {0, es(y) * 2.0 * n * c}; }
OpCost copy_columns(View y, ConstView x, int rows, int cols, int y_stride, int x_stride) {
  return {0, es(y) * 2.0 * rows * cols};
}

OpCost embedding_forward(View y, const int32_t* tokens, ConstView wte, ConstView wpe, int n, int t, int c, int v0,
                         int vl) {
  return {0, es(y) * (wpe.data ? 3.0 : 2.0) * n * c};
}
OpCost embedding_backward_weight(float* dwte, float* dwpe, ConstView dy, const int32_t* tokens, int n, int t,
                                 int c, int v0, int vl) {
  return {0, (es(dy) + kF32 * 2.0 * (dwpe ? 2.0 : 1.0)) * n * c};
}

// Attention: qkv in, out (and probs) out; backward twice the products, flash three
// (it recomputes Q Kᵀ).
OpCost attention_forward(View out, View probs, ConstView qkv, int b, int t, int nh, int hd) {
  return {attention_flops(b, t, nh, hd), es(out) * (4.0 * b * t * nh * hd + double(b) * nh * t * t)};
}
OpCost attention_backward_input(View dqkv, ConstView dout, ConstView qkv, ConstView probs, int b, int t, int nh,
                                int hd) {
  return {2 * attention_flops(b, t, nh, hd), es(dqkv) * (7.0 * b * t * nh * hd + double(b) * nh * t * t)};
}
OpCost flash_attention_forward(View out, float* lse, ConstView qkv, int b, int t, int nh, int hd) {
  return {attention_flops(b, t, nh, hd), es(out) * 4.0 * b * t * nh * hd};
}
OpCost flash_attention_backward_input(View dqkv, float* delta, ConstView dout, ConstView qkv, ConstView out,
                                      const float* lse, int b, int t, int nh, int hd) {
  return {2.5 * attention_flops(b, t, nh, hd), es(dqkv) * 8.0 * b * t * nh * hd};
}
OpCost gqa_attention_forward(View out, View probs, ConstView qkv, int b, int t, int nh, int nkv, int hd) {
  return {attention_flops(b, t, nh, hd),
          es(out) * (2.0 * b * t * (nh + nkv) * hd + double(b) * nh * t * t)};
}
OpCost gqa_attention_backward_input(View dqkv, ConstView dout, ConstView qkv, ConstView probs, int b, int t, int nh,
                                    int nkv, int hd) {
  return {2 * attention_flops(b, t, nh, hd),
          es(dqkv) * (2.0 * b * t * (nh + 2 * nkv) * hd + 1.0 * b * t * nh * hd + double(b) * nh * t * t)};
}
OpCost gqa_flash_attention_forward(View out, float* lse, ConstView qkv, int b, int t, int nh, int nkv, int hd) {
  return {attention_flops(b, t, nh, hd), es(out) * 2.0 * b * t * (nh + nkv) * hd};
}
OpCost gqa_flash_attention_backward_input(View dqkv, float* delta, ConstView dout, ConstView qkv, ConstView out,
                                          const float* lse, int b, int t, int nh, int nkv, int hd) {
  return {2.5 * attention_flops(b, t, nh, hd), es(dqkv) * (2.0 * b * t * (nh + 2 * nkv) * hd + 2.0 * b * t * nh * hd)};
}

// Cross-entropy: the logits [N,VL] dominate.
OpCost ce_row_max(float* rmax, ConstView logits, int n, int vl, int valid) { return {0, es(logits) * n * double(vl)}; }
OpCost ce_sumexp_target(float* sumexp, float* target_logit, ConstView logits, const float* rmax,
                        const int32_t* targets, int n, int vl, int valid, int v0) {
  return {0, es(logits) * n * double(vl)};
}
OpCost ce_loss_sum(double* loss, const float* rmax, const float* sumexp, const float* target_logit, int n) {
  return {0, kF32 * 3.0 * n + sizeof(double)};
}
OpCost ce_backward(View dlogits, ConstView logits, const float* rmax, const float* sumexp, const int32_t* targets,
                   int n, int vl, int valid, int v0, float scale) {
  return {0, es(logits) * 2.0 * n * double(vl)};
}

OpCost ce_fused(View dlogits, float* rmax, float* sumexp, float* target_logit, ConstView logits,
                const int32_t* targets, int n, int vl, int valid, float scale) {
  return {0, es(logits) * 2.0 * n * double(vl)};  // read once, written once
}

// AdamW: p, g, m, v read, p, m, v written (and the bf16 copy).
OpCost adamw(float* p_out, float* m_out, float* v_out, View p_working, const float* p, const float* g,
             const float* m, const float* v, size_t n, float grad_scale, float lr, float b1, float b2, float eps,
             float wd, int t) {
  return {0, (kF32 * 7.0 + (p_working.data ? es(p_working) : 0.0)) * n};
}
OpCost adamw_multi(const std::vector<AdamwTensor>& tensors, float grad_scale, float lr, float b1, float b2, float eps,
                   int t) {
  OpCost sum{0, 0};
  for (const AdamwTensor& x : tensors) sum.bytes += (kF32 * 7.0 + (x.p_working.data ? es(x.p_working) : 0.0)) * x.n;
  return sum;
}
OpCost sum_squares(const float* x, size_t n) { return {0, kF32 * n}; }

}  // namespace pptrain::op_costs
