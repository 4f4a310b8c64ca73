// Comparison bounds derived from the arithmetic, not tuned to a machine: the equivalence,
// checkpoint and bf16 suites compare two runs that compute the same thing in different
// orders (layouts, SIMD paths, CPUs) or precisions, and bound their difference by counting
// roundings.
//
// Rounding model. u is the unit roundoff: 2^-24 for fp32, 2^-8 for bf16 (8 significant
// bits). A value that passed through n roundings in series carries a relative error of at
// most γ_n = n·u/(1 − n·u) (Higham, Accuracy and Stability of Numerical Algorithms, §3.1),
// and a dot product or sum of n terms an error of at most γ_n·Σ|terms|. Worst-case γ_n
// grows like n, far beyond what thousands of roundings do: with the rounding errors
// independent and of mean zero, |Σ δ_i| ≤ λ·√n·u except with probability 2·exp(−λ²/2)
// (Hoeffding), which gives γ̃_n(λ) = exp(λ√n·u + n·u²/(1−u)) − 1 (Higham & Mary, SIAM J.
// Sci. Comput. 41(5), 2019). We take λ = 8: one bound fails with probability < 3e-14, all
// the comparisons of a suite run (< 1e7) with probability < 1e-6. rounding_bound(n, u) is
// the smaller of γ_n and γ̃_n(λ).
//
// Chains. A gradient is the end of a chain: forward through every block and the head,
// back through the head and every block, then the sum over the step's tokens. The counts
// below add, along the longest dependency path, the roundings each op makes (a length-n
// reduction counts n; an elementwise op its few operations; exp, tanh and log count 4 ulp
// = 8u, the accuracy of vectorised libm). First order, an op passes its input's relative
// error on at most unamplified in the normwise sense used by every comparison here
// (max |Δ| over a tensor / max |value| of that tensor): the pre-LN residual stream and
// LayerNorm keep activations O(1), so a tensor's normwise error is that of n = the path's
// roundings. Two runs that order their reductions differently (a layout against a single
// process, AVX2 against AVX-512) are each within that of the exact value, and their
// roundings are independent: their difference is a sum of 2n rounding errors,
// rounding_bound(2n, u).
#pragma once
#include <cstdint>

#include "core/config.h"

namespace pptrain::testing {

constexpr double kFp32Unit = 0x1p-24;
constexpr double kBf16Unit = 0x1p-8;
constexpr double kLambda = 8.0;

double gamma_n(double n, double u);                              // γ_n, +inf once n·u ≥ 1
double gamma_tilde(double n, double u, double lambda = kLambda);  // γ̃_n(λ)
double rounding_bound(double n, double u);                       // min(γ_n, γ̃_n(λ))

// fp32 roundings on the longest path of one step of model `m` whose step sums the
// gradients of `tokens` tokens (global batch · seq_len).
struct Fp32Chain {
  double loss;      // forward through every block and the head, then the mean over tokens
  double gradient;  // forward, backward to the first block, then the sum over the tokens
};
Fp32Chain fp32_chain(const ModelConfig& m, int64_t tokens);

// Normwise bounds on the difference of two fp32 runs of one step of `cfg` (any layouts,
// any orders) from the same parameters: |Δloss| / |loss| and, per tensor,
// max |Δgrad| / max |grad|.
struct StepBounds {
  double loss, gradient;
};
StepBounds fp32_step_bounds(const Config& cfg);

// bf16 roundings (u = 2^-8) on the longest path of one step of model `m` under
// training.precision bf16: every activation, activation gradient and the bf16 copy of
// every weight is rounded once where it is stored; sums run in fp32 (those roundings are
// added by the bf16 bounds below through the fp32 chain).
struct Bf16Chain {
  double loss, gradient;
};
Bf16Chain bf16_chain(const ModelConfig& m);

// Normwise bound on a bf16 step against the fp32 step of the same model and data (the
// fp32 side is exact to within the fp32 chain), and on two bf16 steps that round
// different partial results (tp = 2 against tp = 1): both sides then carry independent
// bf16 errors.
StepBounds bf16_against_fp32_bounds(const Config& cfg);
StepBounds bf16_against_bf16_bounds(const Config& cfg);

// AdamW (train/adamw.h) from identical state (θ, m, v) with gradients that differ by at
// most `noise` in absolute value. The update direction d = m̂ / (√v̂ + eps) satisfies
// |m̂ / √v̂| ≤ U_t after t steps from m = v = 0 (Cauchy–Schwarz on the two exponential
// averages):
//   U_t = (1−β1)/(1−β1^t) · √((1−β2^t)/(1−β2)) · √(Σ_{j<t} (β1²/β2)^j),
// so two directions differ by at most 2·U_t whatever the gradients: an element whose
// gradient is at the noise level may move by lr·U_t either way. Above the noise level d is
// Lipschitz in this step's gradient g (the moments of earlier steps are identical): with
// a = 1/(1−β1^t), b = 1/(1−β2^t) and v̂ ≥ b(1−β2)g²,
//   |∂d/∂g| ≤ (a(1−β1) + U_t·√(b(1−β2))) / (√(b(1−β2))·(|g| − noise)₊ + eps),
// so moderately small gradients amplify their noise, and large ones barely move d. Each
// run also rounds the update itself: 16 fp32 operations of magnitude at most
// |θ| + lr·(U_t + wd·|θ|).
struct AdamWStep {
  double lr, beta1, beta2, eps, weight_decay;
  int t;  // 1-based step
};
AdamWStep adamw_step(const Config& cfg, int step);  // lr from the config's schedule
double adam_direction_bound(double beta1, double beta2, int t);  // U_t
// Largest |θ_got − θ_ref| after the step for one element whose reference gradient is
// `grad`, whose value after the step is `value` (reference run), gradient noise `noise`.
double adamw_value_allowance(const AdamWStep& s, bool decays, double grad, double noise, double value);

}  // namespace pptrain::testing
