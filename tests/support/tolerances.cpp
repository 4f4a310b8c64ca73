#include "support/tolerances.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "train/lr_schedule.h"

namespace pptrain::testing {

double gamma_n(double n, double u) {
  return n * u < 1 ? n * u / (1 - n * u) : std::numeric_limits<double>::infinity();
}

double gamma_tilde(double n, double u, double lambda) {
  return std::expm1(lambda * std::sqrt(n) * u + n * u * u / (1 - u));
}

double rounding_bound(double n, double u) { return std::min(gamma_n(n, u), gamma_tilde(n, u)); }

namespace {

constexpr double kTranscendental = 8;  // exp, tanh, log, rsqrt: 4 ulp = 8u

// Roundings per GPT-2 block on the longest path (C = d_model, HD = C / n_head, T = seq_len).
struct BlockCounts {
  double forward, backward;
};
BlockCounts fp32_llama_block(const ModelConfig& m);

BlockCounts fp32_block(const ModelConfig& m) {
  if (m.llama()) return fp32_llama_block(m);
  const double C = m.d_model, HD = double(m.d_model) / m.n_head, T = m.seq_len;
  const double layernorm = 2 * C + kTranscendental + 3;  // mean, variance (C each), rsqrt, x̂·g + b
  const double attention = HD + 1                       // scores q·k, scale
                           + kTranscendental + T + 1     // exp, sum over keys, divide
                           + T;                          // probabilities · v
  const double gelu = 6 + kTranscendental;               // tanh approximation
  const double forward = layernorm + (C + 1)             // ln_1, qkv (+ bias)
                         + attention + (C + 2)           // proj (+ bias, + residual)
                         + layernorm + (C + 1) + gelu    // ln_2, fc, GELU
                         + (4 * C + 2);                  // MLP proj (+ bias, + residual)
  const double layernorm_grad = 2 * C + 6;               // Σ dy·g, Σ dy·g·x̂, the combination
  const double fused = m.attention == "flash" || m.attention == "cudnn";
  const double attention_grad = HD                       // dP = dy·vᵀ
                                + T + 3                  // dS = P ∘ (dP − Σ P·dP), scale
                                + T                      // dq = dS·k (dk, dv alike)
                                // fused: P = exp(s − lse) recomputed (log, exp, the
                                // subtraction) and dk, dv summed over ⌈T/64⌉ row blocks
                                + fused * (2 * kTranscendental + 2 + std::ceil(T / 64));
  const double backward = C + 1 + gelu                   // MLP proj dgrad, GELU'
                          + 4 * C + layernorm_grad + 1   // fc dgrad (over 4C), ln_2', residual
                          + C + attention_grad           // proj dgrad, attention
                          + 3 * C + layernorm_grad + 1;  // qkv dgrad (over 3C), ln_1', residual
  return {forward, backward};
}

// The attention core's roundings as above (grouped-query attention sums dK and dV over the
// group's NH/NKV query heads: that many more terms).
double attention_forward_count(const ModelConfig& m) {
  const double HD = double(m.d_model) / m.n_head, T = m.seq_len;
  return HD + 1 + kTranscendental + T + 1 + T;
}
double attention_backward_count(const ModelConfig& m) {
  const double HD = double(m.d_model) / m.n_head, T = m.seq_len, group = double(m.n_head) / m.kv_heads();
  const double fused = m.attention == "flash" || m.attention == "cudnn";
  return HD + T + 3 + T + group + fused * (2 * kTranscendental + 2 + std::ceil(T / 64));
}

// Roundings per Llama block on the longest path (F = ffn_hidden, QL = (NH + 2·NKV)·HD).
BlockCounts fp32_llama_block(const ModelConfig& m) {
  const double C = m.d_model, F = m.mlp_hidden();
  const double QL = double(m.n_head + 2 * m.kv_heads()) * (double(m.d_model) / m.n_head);
  const double rmsnorm = C + kTranscendental + 3;          // Σ x², rsqrt, x·rstd·g
  const double rotary = 2 * kTranscendental + 3;          // cos, sin (of an fp32 angle), the turn
  const double swiglu = kTranscendental + 4;              // exp, 1 + e, divide, · gate, · up
  const double forward = rmsnorm + C + rotary              // ln_1, qkv, rotary
                         + attention_forward_count(m)     // attention
                         + C + 1                           // proj, + residual
                         + rmsnorm + C + swiglu            // ln_2, gate / up, SwiGLU
                         + F + 1;                          // down, + residual
  const double rmsnorm_grad = C + 5;                       // Σ dy·g·x̂, the combination
  const double backward = C + swiglu + 2                   // down dgrad (over C), SwiGLU'
                          + 2 * F + 1 + rmsnorm_grad + 1   // gate and up dgrad (over F each), ln_2', residual
                          + C + attention_backward_count(m) + rotary  // proj dgrad, attention, rotary'
                          + QL + rmsnorm_grad + 1;         // qkv dgrad (over QL), ln_1', residual
  return {forward, backward};
}

}  // namespace

Fp32Chain fp32_chain(const ModelConfig& m, int64_t tokens) {
  const double C = m.d_model, V = m.vocab_size, L = m.n_layer, N = double(tokens);
  const BlockCounts block = fp32_block(m);
  const double embedding = 1;                                          // wte + wpe
  const double head = (2 * C + kTranscendental + 3) + C                // ln_f, logits
                      + 2 * kTranscendental + V + 1;                   // exp, Σ over vocab, log, − target
  const double head_grad = kTranscendental + 3 + V + (2 * C + 6);      // softmax − one-hot, dh over V, ln_f'
  // The loss is the mean of N per-token losses; a weight gradient the sum over the N
  // tokens of dy·x, summed across microbatches, dp replicas and (the tied embedding)
  // the embedding and head stages: at most 2N terms in any order.
  const double forward = embedding + L * block.forward + head;
  return {forward + N + 1, forward + head_grad + L * block.backward + 2 * N};
}

StepBounds fp32_step_bounds(const Config& cfg) {
  const int64_t tokens = int64_t(cfg.global_batch_sequences()) * cfg.model.seq_len;
  const Fp32Chain chain = fp32_chain(cfg.model, tokens);
  return {rounding_bound(2 * chain.loss, kFp32Unit), rounding_bound(2 * chain.gradient, kFp32Unit)};
}

Bf16Chain bf16_chain(const ModelConfig& m) {
  // Per block, stored bf16 values on the path. Forward: ln_1, qkv, scores, probabilities,
  // attention output, proj output, + bias, + residual, ln_2, fc, GELU, MLP proj output,
  // + bias, + residual (14), and the bf16 copies of the six weight sets it multiplies by
  // (ln_1, qkv, proj, ln_2, fc, MLP proj; a weight rounded by u moves each product by u).
  // Backward: dGELU, dfc, dln_2, dx2, dattn, dP, dS, dqkv, dln_1, dx (10) and the same six
  // weight sets again.
  const double forward = 14 + 6, backward = 10 + 6;
  const double embedding = 1 + 1;     // the wte/wpe copies, their sum
  const double head = 1 + 1 + 1 + 1;  // ln_f and its weights, logits, the wte copy
  const double head_grad = 1 + 1 + 1 + 1 + 1;  // dlogits, dh, wte copy, dln_f, ln_f weights
  const double L = m.n_layer;
  const double fwd = embedding + L * forward + head;
  return {fwd, fwd + head_grad + L * backward};
}

StepBounds bf16_against_fp32_bounds(const Config& cfg) {
  const Bf16Chain chain = bf16_chain(cfg.model);
  const StepBounds fp32 = fp32_step_bounds(cfg);
  return {rounding_bound(chain.loss, kBf16Unit) + fp32.loss, rounding_bound(chain.gradient, kBf16Unit) + fp32.gradient};
}

StepBounds bf16_against_bf16_bounds(const Config& cfg) {
  const Bf16Chain chain = bf16_chain(cfg.model);
  const StepBounds fp32 = fp32_step_bounds(cfg);
  return {rounding_bound(2 * chain.loss, kBf16Unit) + fp32.loss,
          rounding_bound(2 * chain.gradient, kBf16Unit) + fp32.gradient};
}

double adam_direction_bound(double beta1, double beta2, int t) {
  double geometric = 0;
  for (int j = 0; j < t; ++j) geometric += std::pow(beta1 * beta1 / beta2, j);
  const double u = (1 - beta1) / (1 - std::pow(beta1, t)) * std::sqrt((1 - std::pow(beta2, t)) / (1 - beta2)) *
                   std::sqrt(geometric);
  // The moments are fp32 sums of 2t rounded terms each.
  return u * (1 + 2 * gamma_n(4 * t, kFp32Unit));
}

AdamWStep adamw_step(const Config& cfg, int step) {
  const auto& t = cfg.training;
  return {learning_rate(step - 1, t.steps, t.warmup_steps, t.lr, t.min_lr), t.beta1, t.beta2, t.eps,
          t.weight_decay, step};
}

double adamw_value_allowance(const AdamWStep& s, bool decays, double grad, double noise, double value) {
  const double U = adam_direction_bound(s.beta1, s.beta2, s.t);
  const double a = 1 / (1 - std::pow(s.beta1, s.t)), b = 1 / (1 - std::pow(s.beta2, s.t));
  const double wd = decays ? s.weight_decay : 0.0;
  const double lipschitz = (a * (1 - s.beta1) + U * std::sqrt(b * (1 - s.beta2))) /
                           (std::sqrt(b * (1 - s.beta2)) * std::max(std::fabs(grad) - noise, 0.0) + s.eps);
  const double direction = std::min(2 * U, lipschitz * noise);
  // |θ| before the step, from |θ| after it: θ_after = θ (1 − lr·wd) − lr·d.
  const double before = (std::fabs(value) + s.lr * U) / (1 - s.lr * wd);
  const double rounding = 2 * gamma_n(16, kFp32Unit) * (before + s.lr * (U + wd * before));
  return s.lr * direction + rounding;
}

}  // namespace pptrain::testing
