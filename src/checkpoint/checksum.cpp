#include "checkpoint/checksum.h"

#include <cstring>

#include "core/error.h"

namespace pptrain {
namespace {

uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

void add(SlabDigest& d, int64_t index, float x) {
  const uint32_t b = bits_of(x);
  d.sum += checksum_term(uint64_t(index), b);
  if (!is_finite_bits(b) && (d.first_nonfinite < 0 || index < d.first_nonfinite)) {
    d.first_nonfinite = index;
    d.nonfinite_value = x;
  }
  if ((b & 0x80000000u) && b != 0x80000000u && is_finite_bits(b) &&
      (d.first_negative < 0 || index < d.first_negative)) {
    d.first_negative = index;
    d.negative_value = x;
  }
}

}  // namespace

SlabDigest digest_slabs(const float* local, int64_t local_cols, const std::vector<Slab>& slabs,
                        int64_t global_cols) {
  SlabDigest d;
  for (const Slab& s : slabs)
    for (int64_t r = 0; r < s.rows; ++r) {
      const float* row = local + (s.local_row + r) * local_cols + s.local_col;  // [s.cols]
      const int64_t first = (s.global_row + r) * global_cols + s.global_col;
      for (int64_t c = 0; c < s.cols; ++c) add(d, first + c, row[c]);
    }
  return d;
}

SlabDigest digest_range(const float* values, int64_t n, int64_t first) {
  SlabDigest d;
  for (int64_t k = 0; k < n; ++k) add(d, first + k, values[k]);
  return d;
}

uint64_t checksum_text(const std::string& text) {
  uint64_t sum = mix64(text.size());
  for (size_t i = 0; i < text.size(); ++i) sum += checksum_term(i, uint8_t(text[i]));
  return sum;
}

uint64_t dataset_binding(const std::string& path, const std::vector<int64_t>& shape) {
  std::string text = cat("float32 ", path, " [");
  for (size_t i = 0; i < shape.size(); ++i) text += cat(i ? "," : "", shape[i]);
  return checksum_text(text + "]");
}

}  // namespace pptrain
