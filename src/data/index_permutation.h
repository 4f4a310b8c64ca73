// IndexPermutation: a pseudo-random bijection of [0, n), computed per index in O(1)
// time and memory, keyed by (seed, epoch). The shuffled data order is thus a pure
// function of the sequence index: no permutation table is stored, and resuming at step k
// needs nothing but k.
//
// Construction: a balanced Feistel network on 2h-bit values (2^(2h) >= n), whose round
// function is Philox keyed by (seed, epoch). A Feistel network is a bijection of
// [0, 2^(2h)) whatever its round function; "cycle walking" (apply it again until the value
// falls below n) restricts it to a bijection of [0, n). Since 2^(2h) < 4n, the expected
// number of walks is below 4.
#pragma once
#include <cstdint>
#include <string>

#include "core/error.h"
#include "core/rng.h"

namespace pptrain::data {

class IndexPermutation {
 public:
  IndexPermutation(uint64_t n, uint64_t seed, uint64_t epoch)
      : n_(n), rng_(seed, "data.shuffle.epoch." + std::to_string(epoch)) {
    PPTRAIN_CHECK(n > 0);
    while (half_bits_ < 32 && (uint64_t(1) << (2 * half_bits_)) < n) ++half_bits_;
    half_mask_ = (uint64_t(1) << half_bits_) - 1;
  }

  uint64_t operator()(uint64_t index) const {
    PPTRAIN_CHECK(index < n_, "index ", index, " n ", n_);
    uint64_t x = index;
    do x = feistel(x);
    while (x >= n_);
    return x;
  }

 private:
  // Six rounds: (L, R) -> (R, L xor F_round(R)) on h-bit halves.
  uint64_t feistel(uint64_t x) const {
    uint64_t left = x >> half_bits_, right = x & half_mask_;
    for (uint64_t round = 0; round < 6; ++round) {
      uint64_t mixed = left ^ (rng_.bits(right, round) & half_mask_);
      left = right;
      right = mixed;
    }
    return (left << half_bits_) | right;
  }

  uint64_t n_;
  CounterRng rng_;
  int half_bits_ = 0;    // h: each half holds h bits; h = 0 only when n = 1
  uint64_t half_mask_ = 0;
};

}  // namespace pptrain::data
