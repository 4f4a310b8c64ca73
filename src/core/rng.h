// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
// A value depends only on (key, counter), so a rank can generate exactly the elements
// of a parameter it owns, by global element index, and get the same numbers that a
// single process generating the whole tensor would: initialisation is independent
// of the (pp, tp, dp) layout.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <string_view>

namespace pptrain {

inline std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(M0) * ctr[0], p1 = uint64_t(M1) * ctr[2];
    ctr = {uint32_t(p1 >> 32) ^ ctr[1] ^ key[0], uint32_t(p1), uint32_t(p0 >> 32) ^ ctr[3] ^ key[1],
           uint32_t(p0)};
    key[0] += W0;
    key[1] += W1;
  }
  return ctr;
}

// FNV-1a: stable across platforms and runs (std::hash is not).
inline uint64_t stable_hash(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// A stream of numbers keyed by (seed, name); element i is a pure function of i.
class CounterRng {
 public:
  CounterRng(uint64_t seed, std::string_view name) {
    uint64_t k = seed ^ (stable_hash(name) * 0x9E3779B97F4A7C15ull);
    key_ = {uint32_t(k), uint32_t(k >> 32)};
  }
  // Standard normal for element `index` (Box-Muller on two 32-bit uniforms).
  float normal(uint64_t index, uint64_t stream = 0) const {
    auto r = philox4x32({uint32_t(index), uint32_t(index >> 32), uint32_t(stream), 0u}, key_);
    double u1 = (double(r[0]) + 1.0) / 4294967296.0;  // (0, 1]
    double u2 = double(r[1]) / 4294967296.0;          // [0, 1)
    return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  // Uniform 64-bit value for element `index`.
  uint64_t bits(uint64_t index, uint64_t stream = 0) const {
    auto r = philox4x32({uint32_t(index), uint32_t(index >> 32), uint32_t(stream), 1u}, key_);
    return (uint64_t(r[0]) << 32) | r[1];
  }
  // Uniform double in [0, 1).
  double uniform(uint64_t index, uint64_t stream = 0) const { return double(bits(index, stream) >> 11) / 9007199254740992.0; }

 private:
  std::array<uint32_t, 2> key_;
};

}  // namespace pptrain
