// Softmax cross-entropy over a vocabulary-parallel LM head. logits[N,VL] are columns
// [v0, v0 + VL) of the full vocabulary; only the first `valid` columns are real tokens, the
// rest is padding (vocabulary rounded up to a multiple of tp) and is ignored. With tp > 1
// the caller all-reduces rmax (max), then sumexp and target_logit (sum) between the calls;
// full logits are never gathered. Semantics of Ops::ce_*. logits/dlogits are of storage
// type T (float or bf16); the per-row statistics are fp32.
#pragma once
#include "launch.cuh"

namespace pptrain::kernels {

// rmax[N] = max over valid columns.
template <typename T>
void launch_ce_row_max(const LaunchContext& ctx, float* rmax, const T* logits, int n, int vl,
                       int valid);
// sumexp[N] = Σ exp(logit - rmax); target_logit[N] = logits[target - v0] if the target is
// in this shard, else 0.
template <typename T>
void launch_ce_sumexp_target(const LaunchContext& ctx, float* sumexp, float* target_logit,
                             const T* logits, const float* rmax, const int32_t* targets, int n,
                             int vl, int valid, int v0);
// loss[0] = Σ_rows (log(sumexp) + rmax - target_logit), one double in device memory,
// summed in a fixed order.
void launch_ce_loss_sum(const LaunchContext& ctx, double* loss, const float* rmax,
                        const float* sumexp, const float* target_logit, int n);
// dlogits = scale · (softmax - onehot(target)); padding columns get 0. May alias logits.
template <typename T>
void launch_ce_backward(const LaunchContext& ctx, T* dlogits, const T* logits, const float* rmax,
                        const float* sumexp, const int32_t* targets, int n, int vl, int valid,
                        int v0, float scale);
// The tp = 1 path in one pass over the logits (v0 = 0): writes what the three calls above
// write (rmax, sumexp, target_logit) and dlogits. dlogits may alias logits.
template <typename T>
void launch_ce_fused(const LaunchContext& ctx, T* dlogits, float* rmax, float* sumexp,
                     float* target_logit, const T* logits, const int32_t* targets, int n, int vl,
                     int valid, float scale);

}  // namespace pptrain::kernels
