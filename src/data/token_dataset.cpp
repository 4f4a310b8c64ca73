#include "data/token_dataset.h"

#include <glob.h>

#include <algorithm>

#include "core/error.h"
#include "data/index_permutation.h"

namespace pptrain::data {

namespace {
// RAII for glob_t.
struct GlobResult {
  glob_t result{};
  ~GlobResult() { globfree(&result); }
};
}  // namespace

namespace {

// The files matching `pattern`, in byte order (not the locale's collation: every rank and
// machine sees the same order); none when nothing matches.
std::vector<std::string> glob_files(const std::string& pattern, const std::string& key) {
  GlobResult found;
  // No GLOB_ERR: a directory that does not exist is simply no match.
  int rc = glob(pattern.c_str(), 0, nullptr, &found.result);
  if (rc == GLOB_NOMATCH) return {};
  if (rc != 0) fail(key, ": cannot expand '", pattern, "' (read error or out of memory)");
  std::vector<std::string> files(found.result.gl_pathv, found.result.gl_pathv + found.result.gl_pathc);
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

std::vector<std::string> match_shard_files(const std::string& pattern, const std::string& key) {
  if (pattern.empty()) fail(key, ": empty (expected a glob of token shards, e.g. 'data/x/train_*.bin')");
  std::vector<std::string> files = glob_files(pattern, key);
  if (files.empty()) fail(key, ": no file matches '", pattern, "'");
  return files;
}

TokenDataset::TokenDataset(const std::string& glob, int seq_len, int vocab_size,
                           const std::string& key, bool shuffle, uint64_t seed)
    : key_(key), seq_len_(seq_len), shuffle_(shuffle), seed_(seed) {
  if (seq_len < 1) fail(key, ": model.seq_len must be >= 1 (got ", seq_len, ")");
  if (vocab_size < 1) fail(key, ": model.vocab_size must be >= 1 (got ", vocab_size, ")");
  std::vector<std::string> files = match_shard_files(glob, key);
  shards_.reserve(files.size());
  first_sequence_.reserve(files.size() + 1);
  for (const std::string& file : files) {
    shards_.emplace_back(file, vocab_size);
    const uint64_t n = shards_.back().num_tokens();
    first_sequence_.push_back(num_sequences_);
    num_sequences_ += n > 0 ? (n - 1) / uint64_t(seq_len) : 0;
    num_tokens_ += n;
  }
  first_sequence_.push_back(num_sequences_);
  if (num_sequences_ == 0)
    fail(key, ": no shard matching '", glob, "' holds one sequence of model.seq_len + 1 = ",
         seq_len + 1, " tokens (", files.size(), " shard(s), ", num_tokens_, " tokens in all)");
}

void TokenDataset::check_all_tokens() const {
  for (const TokenShard& shard : shards_) shard.check_all_tokens();
}

uint64_t TokenDataset::resolve(uint64_t index) const {
  const uint64_t position = index % num_sequences_;
  if (!shuffle_) return position;
  return IndexPermutation(num_sequences_, seed_, index / num_sequences_)(position);
}

void TokenDataset::read_sequence(uint64_t index, int32_t* tokens, int32_t* targets) const {
  const uint64_t sequence = resolve(index);
  // The shard s with first_sequence_[s] <= sequence < first_sequence_[s+1]; upper_bound
  // skips shards that hold no sequence (equal consecutive entries).
  auto next = std::upper_bound(first_sequence_.begin(), first_sequence_.end(), sequence);
  const size_t s = size_t(next - first_sequence_.begin()) - 1;
  const uint64_t start = (sequence - first_sequence_[s]) * uint64_t(seq_len_);
  // Read per sequence into a buffer (a few KB), not mapped: see data/read_only_file.h.
  std::vector<uint16_t> src(size_t(seq_len_) + 1);  // src[T+1]
  shards_[s].read(start, src.size(), src.data());
  for (int t = 0; t < seq_len_; ++t) {
    tokens[t] = src[t];
    targets[t] = src[t + 1];
  }
}

void read_microbatch(const TokenDataset& dataset, uint64_t step, int dp_rank, int dp,
                     int microbatch, int microbatches, int batch, int32_t* tokens,
                     int32_t* targets) {
  PPTRAIN_CHECK(dp >= 1 && dp_rank >= 0 && dp_rank < dp, "dp_rank ", dp_rank, " dp ", dp);
  PPTRAIN_CHECK(microbatches >= 1 && microbatch >= 0 && microbatch < microbatches);
  PPTRAIN_CHECK(batch >= 1);
  const uint64_t global_batch = uint64_t(batch) * uint64_t(microbatches) * uint64_t(dp);
  const uint64_t first = step * global_batch + (uint64_t(dp_rank) * microbatches + microbatch) * batch;
  const size_t T = size_t(dataset.seq_len());
  for (int row = 0; row < batch; ++row)
    dataset.read_sequence(first + uint64_t(row), tokens + row * T, targets + row * T);
}

TokenSample profile_sample(const std::string& glob, int seq_len, int vocab_size, int batch, bool shuffle,
                           uint64_t seed) {
  TokenSample out;
  if (glob.empty() || glob_files(glob, "data.train").empty()) return out;
  const TokenDataset dataset(glob, seq_len, vocab_size, "data.train", shuffle, seed);
  out.tokens.resize(size_t(batch) * size_t(seq_len));
  out.targets.resize(out.tokens.size());
  read_microbatch(dataset, 0, 0, 1, 0, 1, batch, out.tokens.data(), out.targets.data());
  return out;
}

}  // namespace pptrain::data
