// Token shards in llm.c's format: a header of 256 int32 (little-endian)
//   header[0] = 20240520 (magic), header[1] = 1 (version), header[2] = number of tokens N,
// followed by N tokens as uint16. The file is exactly 1024 + 2·N bytes.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/mapped_file.h"

namespace pptrain::data {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr int kShardHeaderInts = 256;
inline constexpr size_t kShardHeaderBytes = kShardHeaderInts * sizeof(int32_t);  // 1024

// Writes tokens[N] to `path` (via a temporary name and a rename, so a reader never sees a
// half-written shard). Throws pptrain::Error naming the file when it cannot be written.
void write_token_shard(const std::string& path, std::span<const uint16_t> tokens);

// One validated shard, memory-mapped. Opening checks magic, version, the size against
// the header's count and every token against vocab_size, each failure one line naming
// the file ("FILE: token 300 at position 17 is >= model.vocab_size 256").
class TokenShard {
 public:
  TokenShard(const std::string& path, int vocab_size);
  const std::string& path() const { return path_; }
  // tokens[N], valid while the shard lives.
  std::span<const uint16_t> tokens() const { return {tokens_, num_tokens_}; }
  size_t num_tokens() const { return num_tokens_; }

 private:
  std::string path_;
  MappedFile file_;
  const uint16_t* tokens_ = nullptr;
  size_t num_tokens_ = 0;
};

// Reads a whole shard into memory (tools and tests); same checks as TokenShard.
std::vector<uint16_t> read_token_shard(const std::string& path, int vocab_size = 65536);

}  // namespace pptrain::data
