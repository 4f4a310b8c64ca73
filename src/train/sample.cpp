#include "train/sample.h"

#include <algorithm>

#include "core/rng.h"
#include "core/log.h"

namespace pptrain {

std::string generate_sample(Trainer& trainer, int count, Progress* progress) {
  const Config& cfg = trainer.config();
  if (cfg.parallel.pp != 1 || cfg.parallel.tp != 1 || cfg.parallel.stages_per_rank != 1) {
    log::info("sample: skipped (needs the whole model on one rank: pp = tp = stages_per_rank = 1)");
    return "";
  }
  Ops& ops = trainer.params().ops();
  const int t = cfg.model.seq_len, v = cfg.model.vocab_size;
  // A batch-1 model over the same parameters (the store hands out the existing tensors).
  ModelDims dims = ModelDims::from(cfg.model, 1, 1, 0);
  LocalComm alone;
  StageSpec spec{0, 0, cfg.model.n_layer, true, true};
  trainer.refresh_working_weights();
  auto model = make_stage(trainer.params(), dims, spec, alone, cfg.precision());
  model->set_loss_scale(1.0f);
  Buffer<int32_t> tokens(ops, t), targets(ops, t);
  std::vector<int32_t> host_targets(t, -1), context = {'\n'};
  targets.upload(host_targets.data());
  std::vector<float> probs(v);
  const CounterRng rng(cfg.training.seed, "sample");
  std::string out;
  for (int i = 0; i < count; ++i) {
    // the last T tokens, left-aligned; positions after `pos` cannot influence it (causal)
    int start = std::max<int>(0, int(context.size()) - t), pos = int(context.size()) - start - 1;
    std::vector<int32_t> window(t, 0);
    std::copy(context.begin() + start, context.end(), window.begin());
    tokens.upload(window.data());
    model->forward(0, {tokens.data(), targets.data()});
    model->head_dlogits_row(0, pos, probs.data());
    model->discard(0);
    double u = rng.uniform(uint64_t(i)), acc = 0;
    int next = v - 1;
    for (int j = 0; j < v; ++j) {
      acc += probs[j];
      if (u < acc) { next = j; break; }
    }
    context.push_back(next);
    out += char(next);
    if (progress) progress->tick();
  }
  return out;
}

}  // namespace pptrain
