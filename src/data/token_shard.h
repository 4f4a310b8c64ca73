// Token shards in llm.c's format: a header of 256 int32 (little-endian)
//   header[0] = 20240520 (magic), header[1] = 1 (version), header[2] = number of tokens N,
// followed by N tokens as uint16. The file is exactly 1024 + 2·N bytes.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/read_only_file.h"

namespace pptrain::data {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr int kShardHeaderInts = 256;
inline constexpr size_t kShardHeaderBytes = kShardHeaderInts * sizeof(int32_t);  // 1024

// Writes tokens[N] to `path` (via a temporary name and a rename, so a reader never sees a
// half-written shard). Throws pptrain::Error naming the file when it cannot be written.
void write_token_shard(const std::string& path, std::span<const uint16_t> tokens);

// One validated shard, read with pread (data/read_only_file.h says why not mmap).
// Opening checks magic, version and the size against the header's count (overflow-safe);
// check_all_tokens() checks every token against vocab_size; each failure is one line
// naming the file ("FILE: token 300 at position 17 is >= model.vocab_size 256"). Reads
// check what they return, so a shard truncated or rewritten while training gives one
// line, never a signal.
class TokenShard {
 public:
  TokenShard(const std::string& path, int vocab_size);
  const std::string& path() const { return file_.path(); }
  size_t num_tokens() const { return num_tokens_; }
  // Reads the whole shard once (in chunks of 1 MiB) and throws for the first token >=
  // vocab_size: the up-front check (job/preflight), so that a bad shard fails before
  // training rather than when its bad sequence comes up.
  void check_all_tokens() const;
  // out[count] = tokens [first, first + count) of the shard. Throws pptrain::Error naming
  // the file and offset when they are no longer in the file or out of the vocabulary.
  void read(uint64_t first, size_t count, uint16_t* out) const;

 private:
  // Throws for the first token of tokens[count] (the shard's from `first` on) >= vocab.
  void check_vocab(const uint16_t* tokens, size_t count, uint64_t first) const;
  ReadOnlyFile file_;
  int vocab_size_;
  size_t num_tokens_ = 0;
};

// Reads a whole shard into memory (tools and tests); same checks as TokenShard.
std::vector<uint16_t> read_token_shard(const std::string& path, int vocab_size = 65536);

}  // namespace pptrain::data
