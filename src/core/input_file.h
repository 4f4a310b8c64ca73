// Files from outside (configs, CSV programs, token shards, llm.c and HDF5 files) are
// untrusted. These helpers are the one place that says what "a usable input file" is and
// how sizes read from a file header are combined without overflowing.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

namespace pptrain {

// Throws pptrain::Error "WHAT PATH: <reason>" unless `path` names an existing regular file
// (not a directory, FIFO, socket or device: opening a FIFO would block forever). Returns
// the file's size in bytes. `what` says what the file is for ("config", "token shard").
uint64_t require_regular_file(const std::string& path, const std::string& what);

// Reads the whole of a regular file (checked as above) into a string, refusing files
// larger than `max_bytes` with one line naming the limit.
std::string read_small_file(const std::string& path, const std::string& what, uint64_t max_bytes);

// Overflow-safe arithmetic on sizes from untrusted headers: nullopt when the exact result
// does not fit in 64 bits (signed: also when an operand is negative).
std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b);
std::optional<uint64_t> checked_add(uint64_t a, uint64_t b);
std::optional<int64_t> checked_mul(int64_t a, int64_t b);
std::optional<int64_t> checked_add(int64_t a, int64_t b);

// a * b * ... for non-negative values, nullopt on overflow or a negative factor.
std::optional<uint64_t> checked_product(std::initializer_list<int64_t> factors);

}  // namespace pptrain
