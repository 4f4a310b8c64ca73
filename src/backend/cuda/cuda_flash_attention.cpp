// CudaOps: fused causal attention, the handwritten flash kernels (kernels/flash_attention.cu).
#include "backend/cuda/cuda_ops.h"
#include "flash_attention.cuh"

namespace pptrain::cuda {

using namespace pptrain::kernels;

// out[B,T,NH·HD], lse[B,NH,T] from qkv[B,T,3·NH·HD].
void CudaOps::flash_attention_forward(View out, float* lse, ConstView qkv, int b, int t, int nh, int hd) {
  if (cudnn_attention_) return cudnn_attention_->forward(out, lse, qkv, b, t, nh, hd);  // model.attention: cudnn
  dispatch("flash_attention_forward",
           [&](auto out, auto qkv) { launch_flash_attention_forward(ctx(), out, lse, qkv, b, t, nh, hd); }, out,
           qkv);
}

// dqkv[B,T,3·NH·HD] (overwritten); delta[B,NH,T] scratch.
void CudaOps::flash_attention_backward_input(View dqkv, float* delta, ConstView dout, ConstView qkv, ConstView out,
                                             const float* lse, int b, int t, int nh, int hd) {
  if (cudnn_attention_) return cudnn_attention_->backward_input(dqkv, dout, qkv, out, lse, b, t, nh, hd);  // cudnn
  dispatch("flash_attention_backward_input",
           [&](auto dqkv, auto dout, auto qkv, auto out) {
             launch_flash_attention_backward_input(ctx(), dqkv, delta, dout, qkv, out, lse, b, t, nh, hd);
           },
           dqkv, dout, qkv, out);
}

}  // namespace pptrain::cuda
