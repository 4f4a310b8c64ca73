// The model the backend and transport equivalence tests step once (test_cuda_backend_train,
// test_staged_comm): 4 blocks (one per stage of a pp 2 V), a Markov corpus of 19 symbols,
// grad_clip 0 so that raw gradients are compared. Writes DIR/data and DIR/model.yaml.
#pragma once
#include <string>

#include "support/test_util.h"

namespace pptrain::testing {

inline CommandResult write_step_model(const TempDir& dir, int corpus_tokens) {
  CommandResult r = prepare_markov_corpus(dir.file("data"), 19, corpus_tokens, 5);
  write_file(dir.file("model.yaml"),
             "model: {n_layer: 4, n_head: 2, d_model: 16, seq_len: 8, vocab_size: 19}\n"
             "training: {steps: 1, micro_batch_size: 2, lr: 1.0e-2, warmup_steps: 0, grad_clip: 0.0, eval_every: 0}\n"
             "data: {train: '" + dir.file("data") + "/train_*.bin'}\n"
             "logging: {every: 1, sample_tokens: 0}\n");
  return r;
}

}  // namespace pptrain::testing
