#include "data/token_shard.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace pptrain::data {

// The format is little-endian and the tokens are used in place from the mapping.
static_assert(std::endian::native == std::endian::little, "token shards assume a little-endian host");

namespace {
struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
}  // namespace

void write_token_shard(const std::string& path, std::span<const uint16_t> tokens) {
  if (tokens.size() > size_t(INT32_MAX))
    fail(path, ": ", tokens.size(), " tokens do not fit a shard header (at most ", INT32_MAX, ")");
  int32_t header[kShardHeaderInts] = {};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = int32_t(tokens.size());

  const std::string tmp = path + ".tmp";
  {
    std::unique_ptr<std::FILE, FileCloser> out(std::fopen(tmp.c_str(), "wb"));
    if (!out) fail(path, ": cannot create (", std::strerror(errno), ")");
    bool ok = std::fwrite(header, sizeof(header), 1, out.get()) == 1 &&
              (tokens.empty() ||
               std::fwrite(tokens.data(), sizeof(uint16_t), tokens.size(), out.get()) == tokens.size());
    ok = (std::fflush(out.get()) == 0) && ok;
    if (!ok) {
      std::remove(tmp.c_str());
      fail(path, ": write failed (", std::strerror(errno), ")");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    fail(path, ": cannot rename from ", tmp, " (", std::strerror(err), ")");
  }
}

TokenShard::TokenShard(const std::string& path, int vocab_size) : path_(path), file_(path) {
  const size_t size = file_.size();
  if (size < kShardHeaderBytes)
    fail(path, ": truncated token shard (", size, " bytes, smaller than the ", kShardHeaderBytes,
         "-byte header)");
  int32_t header[kShardHeaderInts];
  std::memcpy(header, file_.data(), kShardHeaderBytes);
  if (header[0] != kShardMagic)
    fail(path, ": not a token shard (magic ", header[0], ", expected ", kShardMagic, ")");
  if (header[1] != kShardVersion)
    fail(path, ": unsupported token shard version ", header[1], " (expected ", kShardVersion, ")");
  if (header[2] < 0) fail(path, ": corrupt token shard (header says ", header[2], " tokens)");

  const size_t expected = size_t(header[2]);
  const size_t payload = size - kShardHeaderBytes;
  if (payload != expected * sizeof(uint16_t)) {
    fail(path, ": ", payload < expected * sizeof(uint16_t) ? "truncated" : "oversized",
         " token shard (header says ", expected, " tokens but the file holds ", payload / 2,
         payload % 2 ? " and a stray byte" : "", ")");
  }
  num_tokens_ = expected;
  tokens_ = reinterpret_cast<const uint16_t*>(file_.data() + kShardHeaderBytes);

  // Every token is checked once here, so the training loop never indexes the embedding
  // out of range. A max-reduction vectorises; only a failing shard is scanned again.
  if (vocab_size >= 65536 || num_tokens_ == 0) return;
  uint16_t largest = 0;
  for (size_t i = 0; i < num_tokens_; ++i) largest = std::max(largest, tokens_[i]);
  if (largest < vocab_size) return;
  const uint16_t* bad =
      std::find_if(tokens_, tokens_ + num_tokens_, [&](uint16_t t) { return t >= vocab_size; });
  fail(path, ": token ", *bad, " at position ", bad - tokens_, " is >= model.vocab_size ", vocab_size);
}

std::vector<uint16_t> read_token_shard(const std::string& path, int vocab_size) {
  TokenShard shard(path, vocab_size);
  return {shard.tokens().begin(), shard.tokens().end()};
}

}  // namespace pptrain::data
