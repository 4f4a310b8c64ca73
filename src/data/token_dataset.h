// TokenDataset: the sequences of a set of token shards, addressed by one global index.
//
// A sequence is T+1 consecutive tokens of one shard: inputs tokens[i, i+T), targets
// tokens[i+1, i+T+1). Sequence j of a shard starts at token j·T (consecutive sequences
// share one token), so a shard of n tokens holds floor((n-1)/T) sequences. The global
// index enumerates the shards in name order. Any index is valid: it is taken modulo
// num_sequences(), and epoch = index / num_sequences(). With shuffle on, each epoch
// visits the sequences in its own pseudo-random order, a pure function of (seed, epoch).
//
// Batches are layout-independent (DESIGN.md, "Config keys"): step k uses the global batch
// of G = B·m·dp sequences [k·G, (k+1)·G); DP replica d, microbatch j reads rows
// [(d·m + j)·B, +B) of it, so the union over replicas and microbatches is the same batch
// for every (pp, tp, dp) with the same G.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/token_shard.h"

namespace pptrain::data {

// The shard files matching `glob`, sorted by name. Throws
// "KEY: no file matches 'GLOB'" when there are none.
std::vector<std::string> match_shard_files(const std::string& glob, const std::string& key);

class TokenDataset {
 public:
  // `key` names the config key in messages ("data.train"). Every shard's header is
  // validated at construction; its tokens by check_all_tokens() and by each read.
  TokenDataset(const std::string& glob, int seq_len, int vocab_size, const std::string& key,
               bool shuffle = false, uint64_t seed = 0);

  // Every token of every shard against vocab_size (TokenShard::check_all_tokens).
  void check_all_tokens() const;

  uint64_t num_sequences() const { return num_sequences_; }
  uint64_t num_tokens() const { return num_tokens_; }
  int seq_len() const { return seq_len_; }
  size_t num_shards() const { return shards_.size(); }
  const TokenShard& shard(size_t i) const { return shards_[i]; }

  // The position of sequence `index` (any index, see above) in the unshuffled order.
  uint64_t resolve(uint64_t index) const;
  // tokens[T], targets[T] of sequence `index`, as int32.
  void read_sequence(uint64_t index, int32_t* tokens, int32_t* targets) const;

 private:
  std::string key_;
  int seq_len_;
  bool shuffle_;
  uint64_t seed_;
  std::vector<TokenShard> shards_;
  // first_sequence_[s] = global index of shard s's first sequence; one extra entry at the
  // end holds num_sequences_. Shards too short for one sequence add none.
  std::vector<uint64_t> first_sequence_;
  uint64_t num_sequences_ = 0;
  uint64_t num_tokens_ = 0;
};

// Rows of DP replica `dp_rank`, microbatch `microbatch` of step `step`'s global batch:
// tokens[B, T], targets[B, T] with B = batch (see the header comment for the layout).
void read_microbatch(const TokenDataset& dataset, uint64_t step, int dp_rank, int dp,
                     int microbatch, int microbatches, int batch, int32_t* tokens,
                     int32_t* targets);

// The first microbatch the training data `glob` gives ([batch · seq_len] tokens and
// targets: step 0, replica 0, microbatch 0): what a profile times the layers on, so that
// ids repeat as in training. Both empty when `glob` is empty or matches no file (data not
// prepared yet: the profile then takes uniform ids); shards that exist are checked as
// for training.
struct TokenSample {
  std::vector<int32_t> tokens, targets;
};
TokenSample profile_sample(const std::string& glob, int seq_len, int vocab_size, int batch, bool shuffle,
                           uint64_t seed);

}  // namespace pptrain::data
