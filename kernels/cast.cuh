// Casts between fp32 and bf16 (round to nearest even), e.g. fp32 master weights to the bf16
// copy the model computes with, or bf16 activations to fp32 for a loss or a check.
#pragma once
#include "launch.cuh"

namespace pptrain::kernels {

void launch_cast(const LaunchContext& ctx, bf16* dst, const float* src, size_t n);
void launch_cast(const LaunchContext& ctx, float* dst, const bf16* src, size_t n);

}  // namespace pptrain::kernels
