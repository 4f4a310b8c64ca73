// The model the backend and transport equivalence tests step once (test_cuda_backend_train,
// test_staged_comm): 4 blocks (one per stage of a pp 2 V), a Markov corpus of 19 symbols,
// grad_clip 0 so that raw gradients are compared. Writes DIR/data and DIR/model.yaml.
#pragma once
#include <string>

#include "support/markov_model.h"

namespace pptrain::testing {

inline CommandResult write_step_model(const TempDir& dir, int corpus_tokens) {
  MarkovModel m;
  m.n_head = 2;
  m.training = "steps: 1, warmup_steps: 0, grad_clip: 0.0";
  m.corpus_tokens = corpus_tokens;
  return write_markov_model(dir, m);
}

}  // namespace pptrain::testing
