// AdamW on fp32 master weights with fp32 moments (Loshchilov & Hutter). Semantics of
// Ops::adamw, plus an optional bf16 copy of the updated weights for the bf16 model.
#pragma once
#include "launch.cuh"

namespace pptrain::kernels {

// g' = g · grad_scale (fp32; g is not written);  m_out = b1 m + (1-b1) g';
// v_out = b2 v + (1-b2) g'²;  p_out = p - lr (m̂ / (√v̂ + eps) + wd p), m̂ = m_out / (1 - b1ᵗ),
// v̂ = v_out / (1 - b2ᵗ), t 1-based. Each output is its input (in place) or overlaps no
// input (out of place). If p_bf16 is not null it receives p_out rounded to bf16 (nearest
// even, as cast).
void launch_adamw(const LaunchContext& ctx, float* p_out, float* m_out, float* v_out, bf16* p_bf16,
                  const float* p, const float* g, const float* m, const float* v, size_t n,
                  float grad_scale, float lr, float b1, float b2, float eps, float wd, int t);

// One tensor of launch_adamw_multi (its own pointers, size and weight decay).
struct AdamwTensorArgs {
  float *p_out, *m_out, *v_out;
  bf16* p_bf16;
  const float *p, *g, *m, *v;
  size_t n;
  float wd;
};

// launch_adamw on each of `count` tensors with the other arguments in common, in launches of
// up to kAdamwTensorsPerLaunch tensors each (the tensors travel in the kernel's parameters).
constexpr int kAdamwTensorsPerLaunch = 24;
void launch_adamw_multi(const LaunchContext& ctx, const AdamwTensorArgs* tensors, int count, float grad_scale,
                        float lr, float b1, float b2, float eps, int t);

}  // namespace pptrain::kernels
