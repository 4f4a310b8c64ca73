// AdamW (see adamw.cuh). Memory-bound: per element 4 fp32 reads and 3 fp32 writes (and one
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

__global__ void adamw_kernel(float* p_out, float* m_out, float* v_out, bf16* p_bf16, const float* p,
                             const float* g, const float* m, const float* v, size_t n, AdamwStep step,
                             bool vectorized) {
  size_t base = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * kPerThread;
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

}  // namespace

void launch_adamw(const LaunchContext& ctx, float* p_out, float* m_out, float* v_out, bf16* p_bf16,
                  const float* p, const float* g, const float* m, const float* v, size_t n,
                  float grad_scale, float lr, float b1, float b2, float eps, float wd, int t) {
  if (n == 0) return;
  PPTRAIN_CHECK(t >= 1, "adamw step count is 1-based, got ", t);
  AdamwStep step{grad_scale, lr, b1, b2, eps, wd, float(1.0 / (1.0 - std::pow(double(b1), t))),
                 float(1.0 / (1.0 - std::pow(double(b2), t)))};
  launch(ctx, "adamw", adamw_kernel, dim3(ceil_div(ceil_div(n, kPerThread), kBlock)), dim3(kBlock),
         0, p_out, m_out, v_out, p_bf16, p, g, m, v, n, step, aligned16(p_out, m_out, v_out, p, g, m, v));
}

}  // namespace pptrain::kernels
