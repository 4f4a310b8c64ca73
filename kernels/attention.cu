// Attention kernels around the batched GEMMs (see attention.cuh).
//
// Permutes: one thread per element of the per-head side ([B,NH,T,HD] and, for qkv, the
// key/value heads after the query heads). Consecutive threads walk d, which is also the
// fastest index of the [B,T,heads,HD] side, so both the read and the write of a warp are
// contiguous runs of HD elements.
//
// Softmax forward/backward: one warp per score row (b, h, i), 8 rows per 256-thread block.
// Lane l handles columns l, l + 32, ... ≤ i; the row max and sums are warp butterflies
// (__shfl_xor_sync). Each lane rewrites only the columns it read, after the warp-wide
// reductions, so both kernels may run in place.
#include "attention.cuh"
#include "device.cuh"

namespace pptrain::kernels {
namespace {

constexpr int kBlock = 256;

// For element i of a [B,H,T,HD] tensor: the offset of the same (b, t, h, d) inside a
// [B,T,H,HD] tensor (rows of H heads).
__device__ __forceinline__ size_t row_offset(size_t i, int t, int heads, int hd) {
  int d = int(i % hd);
  size_t rest = i / hd;
  int ti = int(rest % t);
  rest /= t;
  int h = int(rest % heads);
  size_t bi = rest / heads;
  return ((bi * t + ti) * heads + h) * hd + d;
}

// Element i of [B, NH + 2·NKV, T, HD], the heads of q, k and v stacked per batch index: its
// place in q[B,NH,T,HD], k or v[B,NKV,T,HD], as a pointer into whichever holds it.
template <typename P>
__device__ __forceinline__ P* head_element(size_t i, P* q, P* k, P* v, int t, int nh, int nkv, int hd) {
  size_t head_size = size_t(t) * hd, within = i % head_size, rest = i / head_size;
  int h = int(rest % (nh + 2 * nkv));
  size_t bi = rest / (nh + 2 * nkv);
  if (h < nh) return q + (bi * nh + h) * head_size + within;
  if (h < nh + nkv) return k + (bi * nkv + h - nh) * head_size + within;
  return v + (bi * nkv + h - nh - nkv) * head_size + within;
}

// qkv as rows of NH + 2·NKV heads; one thread per element, consecutive threads walk d.
template <typename T>
__global__ void permute_kernel(T* q, T* k, T* v, const T* qkv, size_t total, int t, int nh, int nkv, int hd) {
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  *head_element(i, q, k, v, t, nh, nkv, hd) = qkv[row_offset(i, t, nh + 2 * nkv, hd)];
}

template <typename T>
__global__ void permute_backward_kernel(T* dqkv, const T* dq, const T* dk, const T* dv, size_t total, int t,
                                        int nh, int nkv, int hd) {
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  dqkv[row_offset(i, t, nh + 2 * nkv, hd)] = *head_element(i, dq, dk, dv, t, nh, nkv, hd);
}

// to_heads: dst[B,NH,T,HD] = src[B,T,NH,HD]; else the reverse.
template <typename T>
__global__ void unpermute_kernel(T* dst, const T* src, size_t total, int t, int nh, int hd,
                                 bool to_heads) {
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  size_t j = row_offset(i, t, nh, hd);
  if (to_heads) dst[i] = src[j];
  else dst[j] = src[i];
}

template <typename T>
__global__ void softmax_forward_kernel(T* probs, const T* scores, int rows, int t, float scale) {
  int lane = threadIdx.x % kWarp;
  int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (row >= rows) return;  // whole warps leave; no block barrier follows
  int i = row % t;          // query position: columns 0..i are visible
  const T* s = scores + size_t(row) * t;
  float m = -INFINITY;
  for (int j = lane; j <= i; j += kWarp) m = fmaxf(m, scale * to_float(s[j]));
  m = warp_reduce(m, Max{});
  float sum = 0.0f;
  for (int j = lane; j <= i; j += kWarp) sum += expf(scale * to_float(s[j]) - m);
  float inv = 1.0f / warp_reduce(sum, Sum{});
  T* p = probs + size_t(row) * t;
  for (int j = lane; j < t; j += kWarp)
    p[j] = from_float<T>(j <= i ? expf(scale * to_float(s[j]) - m) * inv : 0.0f);
}

template <typename T>
__global__ void softmax_backward_kernel(T* dscores, const T* dprobs, const T* probs, int rows, int t,
                                        float scale) {
  int lane = threadIdx.x % kWarp;
  int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (row >= rows) return;
  int i = row % t;
  const T* p = probs + size_t(row) * t;
  const T* dp = dprobs + size_t(row) * t;
  float dot = 0.0f;  // Σ_k p_ik dp_ik
  for (int j = lane; j <= i; j += kWarp) dot += to_float(p[j]) * to_float(dp[j]);
  dot = warp_reduce(dot, Sum{});
  T* ds = dscores + size_t(row) * t;
  for (int j = lane; j < t; j += kWarp)
    ds[j] = from_float<T>(j <= i ? scale * to_float(p[j]) * (to_float(dp[j]) - dot) : 0.0f);
}

dim3 element_grid(size_t total) { return dim3(ceil_div(total, kBlock)); }
dim3 row_grid(int rows) { return dim3(ceil_div(rows, kBlock / kWarp)); }

}  // namespace

template <typename T>
void launch_attention_permute(const LaunchContext& ctx, T* q, T* k, T* v, const T* qkv, int b, int t,
                              int nh, int nkv, int hd) {
  size_t total = size_t(b) * (nh + 2 * nkv) * t * hd;
  if (total == 0) return;
  launch(ctx, "attention_permute", permute_kernel<T>, element_grid(total), dim3(kBlock), 0, q, k, v,
         qkv, total, t, nh, nkv, hd);
}

template <typename T>
void launch_attention_permute_backward(const LaunchContext& ctx, T* dqkv, const T* dq, const T* dk,
                                       const T* dv, int b, int t, int nh, int nkv, int hd) {
  size_t total = size_t(b) * (nh + 2 * nkv) * t * hd;
  if (total == 0) return;
  launch(ctx, "attention_permute_backward", permute_backward_kernel<T>, element_grid(total),
         dim3(kBlock), 0, dqkv, dq, dk, dv, total, t, nh, nkv, hd);
}

template <typename T>
void launch_attention_unpermute(const LaunchContext& ctx, T* out, const T* y, int b, int t, int nh,
                                int hd) {
  size_t total = size_t(b) * nh * t * hd;
  if (total == 0) return;
  launch(ctx, "attention_unpermute", unpermute_kernel<T>, element_grid(total), dim3(kBlock), 0, out,
         y, total, t, nh, hd, false);
}

template <typename T>
void launch_attention_unpermute_backward(const LaunchContext& ctx, T* dy, const T* dout, int b,
                                         int t, int nh, int hd) {
  size_t total = size_t(b) * nh * t * hd;
  if (total == 0) return;
  launch(ctx, "attention_unpermute_backward", unpermute_kernel<T>, element_grid(total),
         dim3(kBlock), 0, dy, dout, total, t, nh, hd, true);
}

template <typename T>
void launch_attention_softmax_forward(const LaunchContext& ctx, T* probs, const T* scores, int bh,
                                      int t, float scale) {
  int rows = bh * t;
  if (rows <= 0) return;
  launch(ctx, "attention_softmax_forward", softmax_forward_kernel<T>, row_grid(rows), dim3(kBlock),
         0, probs, scores, rows, t, scale);
}

template <typename T>
void launch_attention_softmax_backward(const LaunchContext& ctx, T* dscores, const T* dprobs,
                                       const T* probs, int bh, int t, float scale) {
  int rows = bh * t;
  if (rows <= 0) return;
  launch(ctx, "attention_softmax_backward", softmax_backward_kernel<T>, row_grid(rows),
         dim3(kBlock), 0, dscores, dprobs, probs, rows, t, scale);
}

#define PPTRAIN_INSTANTIATE(T)                                                                   \
  template void launch_attention_permute<T>(const LaunchContext&, T*, T*, T*, const T*, int, int, \
                                            int, int, int);                                      \
  template void launch_attention_permute_backward<T>(const LaunchContext&, T*, const T*,          \
                                                     const T*, const T*, int, int, int, int, int); \
  template void launch_attention_unpermute<T>(const LaunchContext&, T*, const T*, int, int, int,  \
                                              int);                                              \
  template void launch_attention_unpermute_backward<T>(const LaunchContext&, T*, const T*, int,   \
                                                       int, int, int);                           \
  template void launch_attention_softmax_forward<T>(const LaunchContext&, T*, const T*, int, int, \
                                                    float);                                      \
  template void launch_attention_softmax_backward<T>(const LaunchContext&, T*, const T*,          \
                                                     const T*, int, int, float);
PPTRAIN_INSTANTIATE(float)
PPTRAIN_INSTANTIATE(bf16)
#undef PPTRAIN_INSTANTIATE

}  // namespace pptrain::kernels
