// The whole GPT-2 model as one Stage on one backend, for comparing backends and precisions
// in the cuda backend tests, and the error bound bf16 rounding allows.
#pragma once
#include <cmath>
#include <memory>
#include <vector>

#include "backend/buffer.h"
#include "backend/ops.h"
#include "core/communicator.h"
#include "model/stage.h"
#include "support/single_rank_model.h"
#include "test_cpu_ops_util.h"

namespace pptrain::testing {

// Rounding to bf16 (8 significant bits, nearest even) has relative error at most
// u = 2^-9 ≈ 2e-3. In one step of the tiny model below an output gradient is the end of a
// chain of about 20 rounded tensors (each layer rounds its GEMM outputs, layernorm, GELU
// and residual outputs in forward and again in dgrad), so first-order error growth gives
// ~20·u ≈ 4e-2 of the tensor's scale. The bound is that, measured normwise
// (max|Δ| / max|reference| per tensor); the loss, a mean over tokens, is far tighter.
constexpr double kBf16GradientBound = 4e-2;
constexpr double kBf16LossBound = 1e-2;

// SingleRankModel with its token buffers and one training step.
struct TinyModel : SingleRankModel {
  Buffer<int32_t> tokens, targets;

  TinyModel(std::unique_ptr<Ops> backend, const ModelConfig& m, int batch, Precision precision)
      : SingleRankModel(m, batch, 7, std::move(backend), precision),
        tokens(*ops, dims.rows()), targets(*ops, dims.rows()) {
    stage->set_loss_scale(1.0f / float(dims.rows()));
  }

  // Perturbs every parameter (the GPT-2 init has zero biases and unit gains, hiding bugs),
  // then runs F, I, W of one microbatch and returns the mean loss.
  double step(const std::vector<int32_t>& tok, const std::vector<int32_t>& tgt) {
    uint32_t seed = 3;
    for (auto& [name, p] : params->all()) {
      auto v = p->value.to_host();
      auto noise = random_floats(v.size(), seed++, -0.5f, 0.5f);
      for (size_t k = 0; k < v.size(); ++k) v[k] += noise[k];
      p->value.upload(v.data());
    }
    if (stage->precision() == Precision::bf16) params->refresh_bf16();
    tokens.upload(tok.data());
    targets.upload(tgt.data());
    params->zero_grads();
    stage->forward(0, {tokens.data(), targets.data()});
    const double loss = stage->loss_sum(0) / dims.rows();
    stage->backward_input(0);
    stage->backward_weight(0);
    ops->synchronize();
    return loss;
  }
};

// 2 blocks, d_model 32: wide enough that bf16 rounding averages like in a real model.
inline ModelConfig bf16_test_model() {
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 2;
  m.d_model = 32;
  m.seq_len = 7;
  m.vocab_size = 23;
  return m;
}

}  // namespace pptrain::testing
