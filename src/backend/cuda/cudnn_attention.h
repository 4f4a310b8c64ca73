// cuDNN's fused causal self-attention (scaled-dot-product attention, SDPA) for
// `model.attention: cudnn`: what flash_attention_forward and flash_attention_backward_input
// (ops.h) run on the cuda backend when cuDNN is chosen.
//
// Built with the cuDNN frontend's graph API (cudnn_frontend::graph::Graph): one graph per
// problem (B, NH, NKV, T, HD, dtype, direction), validated, planned (heuristics, support check,
// plan build: host time worth many attention calls) on first use and cached, as LtGemm
// caches GEMM plans; a training step repeats the same one or two problems every microbatch.
//
// No copies: Q, K, V, O, dO, dQ, dK, dV are strided views of the op's buffers (the strides
// are written out in cudnn_attention.cpp), and cuDNN's softmax statistics are the op's
// lse[B,NH,T] itself. The workspace cuDNN asks for comes from the CudaOps caching
// allocator, per call, stream-ordered like every other allocation.
//
// cuDNN appears only in cudnn_attention.cpp, behind Impl, so no other object sees its
// headers. Only the real CUDA build with cuDNN defines PPTRAIN_WITH_CUDNN (mk/cuda.mk); in
// any other build (the emulated one included) the constructor fails with one line saying
// the binary has no cuDNN and how to get one that has.
#pragma once
#include <cstddef>
#include <memory>

#include "backend/cuda/caching_allocator.h"
#include "backend/ops.h"

namespace pptrain::cuda {

class CudnnAttention {
 public:
  // A cuDNN handle bound to `stream` (the CudaOps compute stream); `allocator` (CudaOps's)
  // must outlive this object.
  CudnnAttention(cudaStream_t stream, CachingAllocator& allocator);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // out[B,T,NH·HD] = causal softmax(q kᵀ/√HD) v per head, and lse[B,NH,T] (fp32) the natural
  // log-sum-exp of each query row's scaled scores, from qkv[B,T,(NH + 2·NKV)·HD] (ops.h's
  // gqa_flash_attention_forward; NKV = NH is multi-head attention). bf16 views only; HD a
  // multiple of 8, at most 128; NKV divides NH.
  void forward(View out, float* lse, ConstView qkv, int b, int t, int nh, int nkv, int hd);

  // dqkv[B,T,(NH + 2·NKV)·HD] (overwritten) from dout[B,T,NH·HD] and the forward's qkv, out
  // and lse (ops.h's gqa_flash_attention_backward_input; cuDNN keeps Σ dout·out per row in
  // its own workspace, so the op's delta scratch is not used).
  void backward_input(View dqkv, ConstView dout, ConstView qkv, ConstView out, const float* lse, int b, int t,
                      int nh, int nkv, int hd);

  size_t graphs() const;  // problems planned so far

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pptrain::cuda
