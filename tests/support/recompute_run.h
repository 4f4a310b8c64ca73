// One model stage run through F, I and W of several microbatches in a zero-bubble order
// (I and W split, several microbatches between F and I and between I and W, the blocks'
// shared recompute scratch written by other microbatches and other blocks in between), on
// a backend that counts its allocations: what tests/test_recompute.cpp and
// tests/test_cuda_backend_recompute.cpp compare across training.recompute modes.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/buffer.h"
#include "core/communicator.h"
#include "core/config.h"
#include "core/faults.h"
#include "model/stage.h"
#include "support/counting_ops.h"
#include "support/cpu_ops_util.h"

namespace pptrain::testing {

struct RecomputeRun {
  std::vector<double> losses;                          // [microbatches] loss sums
  std::map<std::string, std::vector<float>> grads;     // every parameter's gradient
  size_t baseline_bytes = 0;  // allocated before the first F: parameters, gradients, tokens
  size_t peak_bytes = 0;      // the most allocated at once over the run
  size_t layer_slot_bytes = 0, layer_slot_bytes_from_input = 0, scratch_bytes = 0;
};

// The order of the run over m microbatches: F of all, then I of microbatch k followed by
// W of k−1 (two microbatches between I and W at once), then the last W; the F of an extra
// microbatch discarded without backward (evaluation) in the middle. Returns, per action,
// (op, microbatch) with op 'F', 'I', 'W' or 'D' (forward and discard).
inline std::vector<std::pair<char, int>> recompute_order(int m) {
  std::vector<std::pair<char, int>> order;
  for (int mb = 0; mb < m; ++mb) order.push_back({'F', mb});
  for (int mb = 0; mb < m; ++mb) {
    order.push_back({'I', mb});
    if (mb == 1) order.push_back({'D', m});
    if (mb > 0) order.push_back({'W', mb - 1});
  }
  order.push_back({'W', m - 1});
  return order;
}

// The whole model `m` (batch sequences per microbatch) under `recompute`, on `backend`, in
// `precision`, with `faults` (the planted skip_recompute): every parameter perturbed by a
// fixed noise (the default init has zero biases and unit gains, which hide bugs), fixed
// random tokens per microbatch.
inline RecomputeRun run_recompute(std::unique_ptr<Ops> backend, const ModelConfig& m, int batch,
                                  const std::string& recompute, Precision precision, int microbatches = 4,
                                  const Faults& faults = {}) {
  auto counting = std::make_unique<CountingOps>(std::move(backend));
  CountingOps& ops = *counting;
  LocalComm tp;
  ModelDims dims = ModelDims::from(m, batch, 1, 0);
  dims.recompute = ModelDims::recompute_of(recompute, dims.fused_attention);
  ParamStore params(ops, 1, 0, 7);
  std::unique_ptr<Stage> stage =
      make_stage(params, dims, StageSpec{0, 0, m.n_layer, true, true}, tp, precision, faults);
  uint32_t seed = 3;
  for (auto& [name, p] : params.all()) {
    auto v = p->value.to_host();
    auto noise = random_floats(v.size(), seed++, -0.5f, 0.5f);
    for (size_t k = 0; k < v.size(); ++k) v[k] += noise[k];
    p->set_masters(v.data());
  }
  if (precision == Precision::bf16) params.refresh_bf16();
  params.zero_grads();
  stage->set_loss_scale(1.0f / float(dims.rows() * microbatches));

  const size_t n = size_t(dims.rows());
  std::vector<Buffer<int32_t>> tokens, targets;  // [microbatches + 1][N]
  for (int mb = 0; mb <= microbatches; ++mb) {
    const std::vector<int32_t> t = random_ints(n, 100 + mb, 0, m.vocab_size - 1);
    const std::vector<int32_t> g = random_ints(n, 200 + mb, 0, m.vocab_size - 1);
    tokens.emplace_back(ops, n);
    targets.emplace_back(ops, n);
    tokens.back().upload(t.data());
    targets.back().upload(g.data());
  }

  RecomputeRun run;
  ops.synchronize();
  run.baseline_bytes = ops.live_bytes();
  run.losses.resize(microbatches);
  for (auto [op, mb] : recompute_order(microbatches)) {
    switch (op) {
      case 'F': stage->forward(mb, {tokens[mb].data(), targets[mb].data()}); break;
      case 'I':
        run.losses[mb] = stage->loss_sum(mb);
        stage->backward_input(mb);
        break;
      case 'W': stage->backward_weight(mb); break;
      case 'D':
        stage->forward(mb, {tokens[mb].data(), targets[mb].data()});
        stage->discard(mb);
        break;
    }
  }
  ops.synchronize();
  run.peak_bytes = ops.peak_bytes();
  for (auto& [name, p] : params.all()) run.grads[name] = p->grad.to_host();
  run.layer_slot_bytes = stage->layer_slot_bytes();
  run.layer_slot_bytes_from_input = stage->layer_slot_bytes_from_input();
  run.scratch_bytes = stage->scratch_bytes();
  return run;
}

}  // namespace pptrain::testing
