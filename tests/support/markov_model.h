// The small model the training tests run: a Markov corpus of 19 symbols (seed 5) in
// DIR/data and a config of a GPT with d_model 16, seq_len 8 and vocab 19 (padded to 20
// under tp 2 and tp 4, so the padding is exercised), micro-batch size 2, lr 1e-2, no
// evaluation and no sample. The tests choose its depth (a block per stage of their widest
// pipeline), parallel section and the training keys they depend on (steps, warm-up,
// clipping, weight decay), each saying why beside its use.
#pragma once
#include <string>

#include "support/test_util.h"

namespace pptrain::testing {

struct MarkovModel {
  int n_layer = 4;
  int n_head = 4;
  std::string parallel;  // the parallel section's body ("" leaves it out)
  std::string training;  // training keys besides micro_batch_size, lr and eval_every
  std::string data;      // data keys besides train (e.g. "shuffle: true")
  int corpus_tokens = 20000;
  uint64_t corpus_seed = 5;
};

// Writes DIR/data (the corpus) and DIR/`config` (the config, data.train an absolute glob).
inline CommandResult write_markov_model(const TempDir& dir, const MarkovModel& m,
                                        const std::string& config = "model.yaml") {
  CommandResult r = prepare_markov_corpus(dir.file("data"), 19, m.corpus_tokens, m.corpus_seed);
  const auto keys = [](const std::string& rest) { return rest.empty() ? std::string() : ", " + rest; };
  write_file(dir.file(config),
             "model: {n_layer: " + std::to_string(m.n_layer) + ", n_head: " + std::to_string(m.n_head) +
                 ", d_model: 16, seq_len: 8, vocab_size: 19}\n" +
                 (m.parallel.empty() ? "" : "parallel: {" + m.parallel + "}\n") +
                 "training: {micro_batch_size: 2, lr: 1.0e-2, eval_every: 0" + keys(m.training) + "}\n" +
                 "data: {train: '" + dir.file("data") + "/train_*.bin'" + keys(m.data) + "}\n" +
                 "logging: {every: 1, sample_tokens: 0}\n");
  return r;
}

// The smallest run that prints the start-up lines and trains: one block of 2 heads, one
// step, a small corpus (the cpu start-up tests read its lines, not its losses).
inline MarkovModel one_step_model() {
  MarkovModel m;
  m.n_layer = 1;
  m.n_head = 2;
  m.training = "steps: 1, warmup_steps: 0";
  m.corpus_tokens = 4000;
  return m;
}

}  // namespace pptrain::testing
