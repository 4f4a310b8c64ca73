// Support for the kernel tests (tests/test_kernels_*.cpp): every kernel runs under the SIMT
// emulator in both fiber orders, on guarded buffers, and is compared with the cpu backend.
//
// Tolerances.
//  - fp32: element-wise relative error 1e-5. Elements smaller than 10% of the tensor's
//    largest magnitude are measured against that 10% instead of their own size: they come
//    from cancellation (y = x̂ g + b, layernorm dx, sums of signed gradients), where both
//    backends carry an absolute error of a few ulps of the terms that cancelled, whatever
//    the summation order, so their own relative error says nothing about the kernel.
//  - bf16 outputs: the kernels read bf16 inputs, compute in fp32 and round each stored value
//    once to nearest-even. The tests feed the cpu backend the same (exactly representable)
//    inputs, so |out - ref| ≤ 2⁻⁸ |ref| (half a bf16 ulp: 8 significant bits) plus the fp32
//    tolerance above. Outputs a kernel writes in fp32 (statistics, weight gradients) keep the
//    fp32 tolerance even when the inputs are bf16.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/rng.h"
#include "emu/emu.h"
#include "launch.cuh"

namespace pptrain::kernels::testing {

constexpr emu::Order kOrders[] = {emu::Order::forward, emu::Order::reverse};
constexpr double kFp32Tolerance = 1e-5;
constexpr double kTinyFraction = 0.1;  // "small element" threshold, relative to the max
constexpr double kBf16Rounding = 1.0 / 256;  // 2⁻⁸

inline const char* order_name(emu::Order o) { return o == emu::Order::forward ? "forward" : "reverse"; }

// ---- inputs -----------------------------------------------------------------------------
inline std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  CounterRng rng(seed, "kernel-test");
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * float(rng.uniform(i));
  return v;
}

inline std::vector<int32_t> random_ints(size_t n, uint64_t seed, int lo, int hi) {  // [lo, hi]
  CounterRng rng(seed, "kernel-test-ints");
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = lo + int32_t(rng.bits(i) % uint64_t(hi - lo + 1));
  return v;
}

// ---- storage types ----------------------------------------------------------------------
inline std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __float2bfloat16_rn(v[i]);
  return out;
}
inline std::vector<float> to_floats(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __bfloat162float(v[i]);
  return out;
}
inline std::vector<float> to_floats(const std::vector<float>& v) { return v; }

// Values of T stored from floats (bf16: rounded), and those values back as floats.
template <typename T>
std::vector<T> store_as(const std::vector<float>& v) {
  if constexpr (std::is_same_v<T, float>) return v;
  else return to_bf16(v);
}
// The float values a T buffer holds after storing v: the exact inputs both backends see.
template <typename T>
std::vector<float> representable(const std::vector<float>& v) {
  return to_floats(store_as<T>(v));
}

// ---- device memory stand-in -------------------------------------------------------------
// A host array with kGuard elements of poison (all bits set: NaN for floats) before and
// after the data, so that a kernel writing out of bounds is caught and one reading out of
// bounds produces NaN. `offset` shifts the data by that many elements off its 16-byte
// alignment, to exercise the scalar paths of the vectorised kernels.
template <typename T>
class Guarded {
 public:
  static constexpr size_t kGuard = 64;
  explicit Guarded(const std::vector<T>& init, size_t offset = 0)
      : n_(init.size()), offset_(offset), storage_(n_ + 2 * kGuard + offset) {
    std::memset(static_cast<void*>(storage_.data()), 0xFF, storage_.size() * sizeof(T));
    std::copy(init.begin(), init.end(), storage_.begin() + long(kGuard + offset_));
  }
  T* data() { return storage_.data() + kGuard + offset_; }
  size_t size() const { return n_; }
  std::vector<T> values() const {
    auto begin = storage_.begin() + long(kGuard + offset_);
    return std::vector<T>(begin, begin + long(n_));
  }
  std::vector<float> floats() const { return to_floats(values()); }
  bool guards_intact() const {
    auto poisoned = [](const T& x) {
      const unsigned char* b = reinterpret_cast<const unsigned char*>(&x);
      return std::all_of(b, b + sizeof(T), [](unsigned char c) { return c == 0xFF; });
    };
    return std::all_of(storage_.begin(), storage_.begin() + long(kGuard + offset_), poisoned) &&
           std::all_of(storage_.end() - long(kGuard), storage_.end(), poisoned);
  }

 private:
  size_t n_, offset_;
  std::vector<T> storage_;
};

// ---- comparisons --------------------------------------------------------------------------
// Element-wise check with the tolerances described at the top. `bf16_output` adds the
// rounding bound. Reports the worst element.
inline ::testing::AssertionResult close(const std::vector<float>& actual,
                                        const std::vector<float>& expected, bool bf16_output,
                                        double rel = kFp32Tolerance) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "size " << actual.size() << " != " << expected.size();
  double scale = 0;
  for (float e : expected) scale = std::max(scale, std::fabs(double(e)));
  double floor = std::max(kTinyFraction * scale, 1e-30);
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    double a = actual[i], e = expected[i];
    double bound = rel * std::max(std::fabs(e), floor) * (bf16_output ? 1 + kBf16Rounding : 1) +
                   (bf16_output ? kBf16Rounding * std::fabs(e) : 0.0);
    double ratio = std::fabs(a - e) / bound;
    if (!(ratio <= worst)) {  // also catches NaN
      worst = std::isnan(ratio) ? INFINITY : ratio;
      worst_i = i;
      if (std::isinf(worst)) break;
    }
  }
  if (worst <= 1.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "element " << worst_i << ": got " << actual[worst_i] << ", expected "
         << expected[worst_i] << " (" << worst << " times the bound" << (bf16_output ? ", bf16" : "")
         << ")";
}

template <typename T>
::testing::AssertionResult close_as(const std::vector<float>& actual, const std::vector<float>& expected) {
  return close(actual, expected, std::is_same_v<T, bf16>);
}

inline bool bitwise_equal(const std::vector<std::vector<float>>& a,
                          const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k)
    if (a[k].size() != b[k].size() ||
        std::memcmp(a[k].data(), b[k].data(), a[k].size() * sizeof(float)) != 0)
      return false;
  return true;
}

// Runs `body(ctx)` once per fiber order (a fresh emulated stream each); body returns the
// outputs it produced (as floats). Both orders must produce the same bits: the kernels have
// no timing-dependent sums, so any difference is a race such as a missing barrier.
// Returns the forward-order outputs.
template <typename Body>
std::vector<std::vector<float>> run_both_orders(Body body) {
  std::vector<std::vector<float>> first;
  for (emu::Order order : kOrders) {
    emu::Stream stream{order};
    std::vector<std::vector<float>> out = body(LaunchContext{&stream});
    EXPECT_GT(stream.launches, 0) << order_name(order);
    if (order == emu::Order::forward) first = std::move(out);
    else EXPECT_TRUE(bitwise_equal(first, out)) << "forward and reverse fiber orders disagree";
  }
  return first;
}

// Values of a buffer after a launch, checking that nothing was written around it.
template <typename T>
std::vector<float> checked(const Guarded<T>& buffer, const char* what) {
  EXPECT_TRUE(buffer.guards_intact()) << what << ": written out of bounds";
  return buffer.floats();
}

}  // namespace pptrain::kernels::testing
