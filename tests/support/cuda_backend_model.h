// The whole GPT-2 model as one Stage on one backend, for comparing backends and precisions
// in the cuda backend tests; the bounds are derived in support/tolerances.h.
#pragma once
#include <cmath>
#include <memory>
#include <vector>

#include "backend/buffer.h"
#include "backend/ops.h"
#include "core/communicator.h"
#include "model/stage.h"
#include "support/cpu_ops_util.h"
#include "support/single_rank_model.h"
#include "support/tolerances.h"

namespace pptrain::testing {

// The config of one step of `batch` sequences of model `m` in one microbatch, for the
// bounds of support/tolerances.h (they count the step's tokens and the model's chain).
inline Config one_microbatch(const ModelConfig& m, int batch) {
  Config c;
  c.model = m;
  c.training.micro_batch_size = batch;
  c.parallel.microbatches = 1;
  return c;
}

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
      p->set_masters(v.data());
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
