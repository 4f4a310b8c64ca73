// CudaOps: the ops the Llama family adds (RMSNorm, rotary embedding, SwiGLU, grouped-query
// attention) before their kernels exist. Config validation refuses model.arch: llama with
// device: cuda, so no run reaches these bodies; a direct call fails with one line. Grouped-
// query attention with as many key/value heads as query heads is multi-head attention and
// runs the existing kernels.
#include "backend/cuda/cuda_ops.h"

namespace pptrain::cuda {

namespace {

[[noreturn]] void not_yet(const char* op) { fail(op, " is not implemented on the cuda backend yet"); }

}  // namespace

void CudaOps::rmsnorm_forward(View, float*, ConstView, ConstView, int, int, float) { not_yet("rmsnorm_forward"); }
void CudaOps::rmsnorm_backward_input(View, ConstView, ConstView, const float*, ConstView, int, int, ConstView) {
  not_yet("rmsnorm_backward_input");
}
void CudaOps::rmsnorm_backward_weight(float*, ConstView, ConstView, const float*, int, int) {
  not_yet("rmsnorm_backward_weight");
}
void CudaOps::rotary_forward(View, int, int, int, int, int, float) { not_yet("rotary_forward"); }
void CudaOps::rotary_backward_input(View, int, int, int, int, int, float) { not_yet("rotary_backward_input"); }
void CudaOps::swiglu_forward(View, ConstView, ConstView, size_t) { not_yet("swiglu_forward"); }
void CudaOps::swiglu_backward_input(View, View, ConstView, ConstView, ConstView, size_t) {
  not_yet("swiglu_backward_input");
}

void CudaOps::gqa_attention_forward(View out, View probs, ConstView qkv, int b, int t, int nh, int nkv, int hd) {
  if (nkv != nh) not_yet("gqa_attention_forward with fewer key/value heads than query heads");
  attention_forward(out, probs, qkv, b, t, nh, hd);
}

void CudaOps::gqa_attention_backward_input(View dqkv, ConstView dout, ConstView qkv, ConstView probs, int b, int t,
                                           int nh, int nkv, int hd) {
  if (nkv != nh) not_yet("gqa_attention_backward_input with fewer key/value heads than query heads");
  attention_backward_input(dqkv, dout, qkv, probs, b, t, nh, hd);
}

void CudaOps::gqa_flash_attention_forward(View out, float* lse, ConstView qkv, int b, int t, int nh, int nkv,
                                          int hd) {
  if (nkv != nh) not_yet("gqa_flash_attention_forward with fewer key/value heads than query heads");
  flash_attention_forward(out, lse, qkv, b, t, nh, hd);
}

void CudaOps::gqa_flash_attention_backward_input(View dqkv, float* delta, ConstView dout, ConstView qkv,
                                                 ConstView out, const float* lse, int b, int t, int nh, int nkv,
                                                 int hd) {
  if (nkv != nh) not_yet("gqa_flash_attention_backward_input with fewer key/value heads than query heads");
  flash_attention_backward_input(dqkv, delta, dout, qkv, out, lse, b, t, nh, hd);
}

}  // namespace pptrain::cuda
