// Writing a dataset as a set of token shards (DIR/train_000.bin, ...) and the byte-level
// tokenisation of text files: the library side of `pptrain prepare-data`.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace pptrain::data {

// Splits tokens[N] into shards of at most shard_tokens tokens, written as
// DIR/PREFIX_000.bin, DIR/PREFIX_001.bin, ... (DIR is created if missing). The number
// is zero-padded to the same width for every shard, so name order is stream order.
// Shards PREFIX_<digits>.bin left in DIR by an earlier, larger run are removed, so the
// glob DIR/PREFIX_*.bin matches exactly this set. Returns the paths written.
std::vector<std::string> write_shard_set(const std::string& dir, const std::string& prefix,
                                         std::span<const uint16_t> tokens, uint64_t shard_tokens);

// Number of tokens of an n-token stream that go to validation: the last
// round(n · val_fraction) tokens, at least 1, leaving at least 1 for training.
// Throws when n < 2 or val_fraction is not in (0, 1).
uint64_t validation_tokens(uint64_t n, double val_fraction);

// The bytes of `files`, concatenated in order, as tokens (token = byte value, vocab 256).
// Throws "FILE: cannot read (reason)" for a missing or unreadable file.
std::vector<uint16_t> read_bytes_as_tokens(const std::vector<std::string>& files);

}  // namespace pptrain::data
