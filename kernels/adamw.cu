// AdamW (see adamw.cuh). The multi-tensor launch runs the same per-thread body over a batch of
// tensors, each owning a range of the grid's blocks. Memory-bound: per element 4 fp32 reads and 3 fp32 writes (and one
// bf16 write with the working copy), in place or out of place alike. Thread i updates
// elements [4i, 4i + 4) with 128-bit accesses when all arrays are 16-byte aligned, else
// element by element (also for the ragged tail); it reads its elements of every input before
// writing its elements of any output, so an output equal to its input is safe. The bias
// corrections are computed once on the host in double precision.
#include "adamw.cuh"
#include "device.cuh"

#include <cmath>

namespace pptrain::kernels {
namespace {

constexpr int kBlock = 256;
constexpr int kPerThread = 4;

struct AdamwStep {
  float grad_scale, lr, b1, b2, eps, wd;
  float inv_bias1, inv_bias2;  // 1 / (1 - b1ᵗ), 1 / (1 - b2ᵗ)
  // Updates one parameter: p, m, v hold the current values on entry and the updated ones on
  // return, from the unscaled gradient.
  __device__ __forceinline__ void apply(float& p, float g_raw, float& m, float& v) const {
    const float g = g_raw * grad_scale;  // the clip factor: one fp32 multiply
    m = b1 * m + (1.0f - b1) * g;
    v = b2 * v + (1.0f - b2) * g * g;
    float m_hat = m * inv_bias1, v_hat = v * inv_bias2;
    p -= lr * (m_hat / (sqrtf(v_hat) + eps) + wd * p);
  }
};

// Thread `thread` of a tensor's grid: its kPerThread elements of the tensor.
__device__ __forceinline__ void adamw_elements(size_t thread, float* p_out, float* m_out, float* v_out, bf16* p_bf16,
                                               const float* p, const float* g, const float* m, const float* v,
                                               size_t n, const AdamwStep& step, bool vectorized) {
  size_t base = thread * kPerThread;
  if (base >= n) return;
  if (vectorized && base + kPerThread <= n) {
    Pack128<float> pp = load_pack(p + base), gg = load_pack(g + base);
    Pack128<float> mm = load_pack(m + base), vv = load_pack(v + base);
    for (int k = 0; k < kPerThread; ++k) step.apply(pp.v[k], gg.v[k], mm.v[k], vv.v[k]);
    store_pack(p_out + base, pp);
    store_pack(m_out + base, mm);
    store_pack(v_out + base, vv);
    if (p_bf16)
      for (int k = 0; k < kPerThread; ++k) p_bf16[base + k] = from_float<bf16>(pp.v[k]);
  } else {
    size_t end = base + kPerThread < n ? base + kPerThread : n;
    for (size_t i = base; i < end; ++i) {
      float pi = p[i], mi = m[i], vi = v[i];
      step.apply(pi, g[i], mi, vi);
      p_out[i] = pi;
      m_out[i] = mi;
      v_out[i] = vi;
      if (p_bf16) p_bf16[i] = from_float<bf16>(pi);
    }
  }
}

__global__ void adamw_kernel(float* p_out, float* m_out, float* v_out, bf16* p_bf16, const float* p,
                             const float* g, const float* m, const float* v, size_t n, AdamwStep step,
                             bool vectorized) {
  adamw_elements(size_t(blockIdx.x) * blockDim.x + threadIdx.x, p_out, m_out, v_out, p_bf16, p, g, m, v, n, step,
                 vectorized);
}

// The tensors of one multi-tensor launch, by value in the kernel's parameters (about 2 KB of
// the 4 KB a launch may pass): tensor i owns blocks [block_begin[i], block_begin[i + 1]).
struct AdamwBatch {
  AdamwTensorArgs tensors[kAdamwTensorsPerLaunch];
  int block_begin[kAdamwTensorsPerLaunch + 1];
  bool vectorized[kAdamwTensorsPerLaunch];
  int count;
};

__global__ void adamw_multi_kernel(AdamwBatch batch, AdamwStep step) {
  int i = 0;  // the tensor of this block: a short scan over at most kAdamwTensorsPerLaunch starts
  while (i + 1 < batch.count && int(blockIdx.x) >= batch.block_begin[i + 1]) ++i;
  const AdamwTensorArgs& x = batch.tensors[i];
  AdamwStep own = step;
  own.wd = x.wd;
  adamw_elements(size_t(int(blockIdx.x) - batch.block_begin[i]) * blockDim.x + threadIdx.x, x.p_out, x.m_out,
                 x.v_out, x.p_bf16, x.p, x.g, x.m, x.v, x.n, own, batch.vectorized[i]);
}

AdamwStep make_step(float grad_scale, float lr, float b1, float b2, float eps, float wd, int t) {
  PPTRAIN_CHECK(t >= 1, "adamw step count is 1-based, got ", t);
  return AdamwStep{grad_scale, lr, b1, b2, eps, wd, float(1.0 / (1.0 - std::pow(double(b1), t))),
                   float(1.0 / (1.0 - std::pow(double(b2), t)))};
}

}  // namespace

void launch_adamw(const LaunchContext& ctx, float* p_out, float* m_out, float* v_out, bf16* p_bf16,
                  const float* p, const float* g, const float* m, const float* v, size_t n,
                  float grad_scale, float lr, float b1, float b2, float eps, float wd, int t) {
  if (n == 0) return;
  const AdamwStep step = make_step(grad_scale, lr, b1, b2, eps, wd, t);
  launch(ctx, "adamw", adamw_kernel, dim3(ceil_div(ceil_div(n, kPerThread), kBlock)), dim3(kBlock),
         0, p_out, m_out, v_out, p_bf16, p, g, m, v, n, step, aligned16(p_out, m_out, v_out, p, g, m, v));
}

void launch_adamw_multi(const LaunchContext& ctx, const AdamwTensorArgs* tensors, int count, float grad_scale,
                        float lr, float b1, float b2, float eps, int t) {
  const AdamwStep step = make_step(grad_scale, lr, b1, b2, eps, 0.0f, t);
  AdamwBatch batch{};
  auto flush = [&] {
    if (batch.count == 0) return;
    launch(ctx, "adamw_multi", adamw_multi_kernel, dim3(batch.block_begin[batch.count]), dim3(kBlock), 0, batch,
           step);
    batch = AdamwBatch{};
  };
  for (int k = 0; k < count; ++k) {
    const AdamwTensorArgs& x = tensors[k];
    if (x.n == 0) continue;
    const size_t blocks = ceil_div(ceil_div(x.n, kPerThread), kBlock);
    PPTRAIN_CHECK(blocks < (1u << 30), "adamw_multi: a tensor of ", x.n, " elements");
    if (batch.count == kAdamwTensorsPerLaunch || size_t(batch.block_begin[batch.count]) + blocks >= (1u << 31) - 1)
      flush();
    const int i = batch.count++;
    batch.tensors[i] = x;
    batch.vectorized[i] = aligned16(x.p_out, x.m_out, x.v_out, x.p, x.g, x.m, x.v);
    batch.block_begin[i + 1] = batch.block_begin[i] + int(blocks);
  }
  flush();
}

}  // namespace pptrain::kernels
