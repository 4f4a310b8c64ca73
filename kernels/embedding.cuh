// Token + position embedding of a vocabulary shard, on weights and activations of storage
// type T (float or bf16); gradients are fp32. Semantics of Ops::embedding_forward /
// embedding_backward_weight (there is no dgrad: the inputs are token ids).
#pragma once
#include "launch.cuh"

namespace pptrain::kernels {

// y[N,C] = wte[tok - v0] + wpe[row mod T]; wte[VL,C] is the shard of vocabulary rows
// [v0, v0 + VL) and a token outside it contributes zero. wpe[T,C] may be null.
template <typename T>
void launch_embedding_forward(const LaunchContext& ctx, T* y, const int32_t* tokens, const T* wte,
                              const T* wpe, int n, int t, int c, int v0, int vl);

// dwte[tok - v0] += dy[row] for tokens in the shard; dwpe[row mod T] += dy[row] if dwpe is
// not null. Deterministic: every gradient element is summed by one thread in row order.
// `workspace`: embedding_backward_weight_workspace_bytes(n, vl) bytes of device memory (the
// rows sorted by vocabulary slice; any contents on entry).
size_t embedding_backward_weight_workspace_bytes(int n, int vl);
template <typename T>
void launch_embedding_backward_weight(const LaunchContext& ctx, float* dwte, float* dwpe,
                                      const T* dy, const int32_t* tokens, int32_t* workspace, int n,
                                      int t, int c, int v0, int vl);

}  // namespace pptrain::kernels
