#include "data/token_shard.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "core/input_file.h"

namespace pptrain::data {

// The format is little-endian and the tokens are read into memory as they are.
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

TokenShard::TokenShard(const std::string& path, int vocab_size)
    : file_(path, "token shard"), vocab_size_(vocab_size) {
  const uint64_t size = file_.size();
  if (size < kShardHeaderBytes)
    fail(path, ": truncated token shard (", size, " bytes, smaller than the ", kShardHeaderBytes,
         "-byte header)");
  int32_t header[kShardHeaderInts];
  file_.read_at(0, kShardHeaderBytes, header);
  if (header[0] != kShardMagic)
    fail(path, ": not a token shard (magic ", header[0], ", expected ", kShardMagic, ")");
  if (header[1] != kShardVersion)
    fail(path, ": unsupported token shard version ", header[1], " (expected ", kShardVersion, ")");
  if (header[2] < 0) fail(path, ": corrupt token shard (header says ", header[2], " tokens)");

  // header[2] < 2^31, so 2·N + 1024 cannot overflow; checked anyway, as every header size.
  const uint64_t expected = uint64_t(header[2]);
  const uint64_t payload = size - kShardHeaderBytes;
  auto needed = checked_mul(expected, uint64_t(sizeof(uint16_t)));
  if (!needed || payload != *needed) {
    fail(path, ": ", !needed || payload < *needed ? "truncated" : "oversized",
         " token shard (header says ", expected, " tokens but the file holds ", payload / 2,
         payload % 2 ? " and a stray byte" : "", ")");
  }
  num_tokens_ = size_t(expected);
}

void TokenShard::check_all_tokens() const {
  // A max-reduction vectorises; only a failing chunk is scanned again (check_vocab).
  if (vocab_size_ >= 65536) return;
  std::vector<uint16_t> chunk(std::min<size_t>(num_tokens_, size_t(1) << 19));
  for (uint64_t first = 0; first < num_tokens_; first += chunk.size()) {
    const size_t count = size_t(std::min<uint64_t>(chunk.size(), num_tokens_ - first));
    read(first, count, chunk.data());
  }
}

void TokenShard::check_vocab(const uint16_t* tokens, size_t count, uint64_t first) const {
  if (vocab_size_ >= 65536) return;
  uint16_t largest = 0;
  for (size_t i = 0; i < count; ++i) largest = std::max(largest, tokens[i]);
  if (largest < vocab_size_) return;
  const uint16_t* bad = std::find_if(tokens, tokens + count, [&](uint16_t t) { return t >= vocab_size_; });
  fail(path(), ": token ", *bad, " at position ", first + uint64_t(bad - tokens), " is >= model.vocab_size ",
       vocab_size_);
}

void TokenShard::read(uint64_t first, size_t count, uint16_t* out) const {
  auto end = checked_add(first, uint64_t(count));
  if (!end || *end > num_tokens_)
    fail(path(), ": tokens [", first, ", +", count, ") are past the shard's ", num_tokens_, " tokens");
  if (count == 0) return;
  file_.read_at(kShardHeaderBytes + first * sizeof(uint16_t), count * sizeof(uint16_t), out);
  check_vocab(out, count, first);
}

std::vector<uint16_t> read_token_shard(const std::string& path, int vocab_size) {
  TokenShard shard(path, vocab_size);
  std::vector<uint16_t> tokens(shard.num_tokens());
  shard.read(0, tokens.size(), tokens.data());
  return tokens;
}

}  // namespace pptrain::data
