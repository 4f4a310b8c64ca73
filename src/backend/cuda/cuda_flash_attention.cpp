// CudaOps: fused causal attention, the handwritten flash kernels (kernels/flash_attention.cu),
// multi-head and grouped-query; or cuDNN's (model.attention: cudnn).
#include "backend/cuda/cuda_ops.h"
#include "flash_attention.cuh"

namespace pptrain::cuda {

using namespace pptrain::kernels;

// out[B,T,NH·HD], lse[B,NH,T] from qkv[B,T,3·NH·HD].
void CudaOps::flash_attention_forward(View out, float* lse, ConstView qkv, int b, int t, int nh, int hd) {
  gqa_flash_attention_forward(out, lse, qkv, b, t, nh, nh, hd);
}

// dqkv[B,T,3·NH·HD] (overwritten); delta[B,NH,T] scratch.
void CudaOps::flash_attention_backward_input(View dqkv, float* delta, ConstView dout, ConstView qkv, ConstView out,
                                             const float* lse, int b, int t, int nh, int hd) {
  gqa_flash_attention_backward_input(dqkv, delta, dout, qkv, out, lse, b, t, nh, nh, hd);
}

// out[B,T,NH·HD], lse[B,NH,T] from qkv[B,T,(NH + 2·NKV)·HD].
void CudaOps::gqa_flash_attention_forward(View out, float* lse, ConstView qkv, int b, int t, int nh, int nkv,
                                          int hd) {
  check_gqa_heads("gqa_flash_attention_forward", nh, nkv);
  if (cudnn_attention_) {  // model.attention: cudnn
    return cudnn_attention_->forward(out, lse, qkv, b, t, nh, nkv, hd);
  }
  dispatch("flash_attention_forward",
           [&](auto out, auto qkv) { launch_flash_attention_forward(ctx(), out, lse, qkv, b, t, nh, nkv, hd); },
           out, qkv);
}

// dqkv[B,T,(NH + 2·NKV)·HD] (overwritten); delta[B,NH,T] scratch.
void CudaOps::gqa_flash_attention_backward_input(View dqkv, float* delta, ConstView dout, ConstView qkv,
                                                 ConstView out, const float* lse, int b, int t, int nh, int nkv,
                                                 int hd) {
  check_gqa_heads("gqa_flash_attention_backward_input", nh, nkv);
  if (cudnn_attention_) {  // model.attention: cudnn
    return cudnn_attention_->backward_input(dqkv, dout, qkv, out, lse, b, t, nh, nkv, hd);
  }
  dispatch("flash_attention_backward_input",
           [&](auto dqkv, auto dout, auto qkv, auto out) {
             launch_flash_attention_backward_input(ctx(), dqkv, delta, dout, qkv, out, lse, b, t, nh, nkv, hd);
           },
           dqkv, dout, qkv, out);
}

}  // namespace pptrain::cuda
