#include "backend/cuda/cuda_ops.h"
namespace pptrain::cuda {
void CudaOps::flash_attention_forward(View out, float* lse, ConstView qkv, int b, int t, int nh, int hd) {
  if (cudnn_attention_) return cudnn_attention_->forward(out, lse, qkv, b, t, nh, hd);  // model.attention: cudnn
  fail("flash_attention_forward: not yet on the cuda backend");
}
void CudaOps::flash_attention_backward_input(View dqkv, float* delta, ConstView dout, ConstView qkv, ConstView out,
                                             const float* lse, int b, int t, int nh, int hd) {
  if (cudnn_attention_) return cudnn_attention_->backward_input(dqkv, dout, qkv, out, lse, b, t, nh, hd);  // cudnn
  fail("flash_attention_backward_input: not yet on the cuda backend");
}
}  // namespace pptrain::cuda
