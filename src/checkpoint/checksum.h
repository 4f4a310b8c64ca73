// Checksums and finiteness of checkpoint datasets, independent of the layout that writes
// or reads them.
//
// The checksum of a float32 tensor x with N elements in its global row-major order is
//
//   h(x) = Σ_{i<N} term(i, bits(x_i))  mod 2^64,   term(i, b) = mix64(mix64(i ^ S) + b)
//
// with mix64 splitmix64's finaliser (a bijection of 64-bit words whose every output bit
// depends on every input bit) and S a fixed salt. Because the sum is over elements keyed
// by their global index, any partition of the tensor into rectangles gives the same h:
// each rank sums the terms of the elements it holds and the ranks add their partials
// (an MPI_SUM over MPI_UINT64_T: MPI defines it as the C sum of unsigned integers, which
// wraps modulo 2^64 exactly, so the order of the additions does not matter).
//
// Writers: every element is written by exactly one rank (build_global_table), which adds
// its term; the io group's sum is stored as the dataset's `checksum` attribute.
// Readers: the reading job's distinct shards cover every dataset exactly once as well
// (build_global_table checks the cover), so the first holder of each shard hashes what it
// read, the group sums, and the sum must equal the attribute: every element of the file
// is verified, by one rank, without reading anything twice and without a whole-dataset
// buffer. Replicas (tp-replicated tensors, DP replicas) read the same bytes of the same
// file, so damage on disk shows in the first holder's read.
//
// A changed element changes its term to an unrelated 64-bit value, so a corruption goes
// unnoticed with probability about 2^-64; swapped elements differ in i, and are caught too.
//
// Binding (format version 3): the stored attribute is h(x) + binding(path, shape), the
// text checksum of the dataset's path, dtype and shape. The element terms alone say
// nothing of which tensor they belong to: two same-shape datasets swapped together with
// their attributes, or one dataset hard-linked under another's name, would verify. With
// the binding, a dataset read under any other name or shape than it was written with
// fails its checksum. The set of links in the file is bound to the root in turn
// (checkpoint_format.h, contents_checksum), so nothing can be added, removed or renamed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/param.h"

namespace pptrain {

// splitmix64's finaliser.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

inline uint64_t checksum_term(uint64_t index, uint32_t bits) {
  return mix64(mix64(index ^ 0x7070747261696e31ULL) + bits);  // salt: "pptrain1"
}

inline bool is_finite_bits(uint32_t bits) { return (bits & 0x7f800000u) != 0x7f800000u; }

// What one rank's elements of a tensor contribute.
struct SlabDigest {
  uint64_t sum = 0;              // Σ term over the elements, mod 2^64
  int64_t first_nonfinite = -1;  // the smallest global index holding NaN or ±inf, -1 if none
  float nonfinite_value = 0;
  int64_t first_negative = -1;   // the smallest global index holding a value < 0 (not -0), -1 if none
  float negative_value = 0;      // (an Adam second moment must not have one)
};

// The digest of the elements of `slabs` in a local buffer [local_rows, local_cols] of a
// tensor whose global rows have `global_cols` elements (1 for a 1-D tensor).
SlabDigest digest_slabs(const float* local, int64_t local_cols, const std::vector<Slab>& slabs,
                        int64_t global_cols);

// The digest of `n` consecutive elements starting at global index `first` (inspect).
SlabDigest digest_range(const float* values, int64_t n, int64_t first);

// A digest of text (attributes): the same terms over the bytes, index-keyed.
uint64_t checksum_text(const std::string& text);

// What format version 3 adds to a dataset's element sum: its path ("/model/wte.weight"),
// dtype and global shape, as text.
uint64_t dataset_binding(const std::string& path, const std::vector<int64_t>& shape);

}  // namespace pptrain
