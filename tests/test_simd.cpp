// The explicit vectors of the cpu backend's short-row loops (backend/cpu/simd.h) and the
// causal row functions built on them (backend/cpu/attention_common.h), compiled here for the
// build's baseline ISA (AVX2 in the default build):
//  - simd::exp_nonpositive gives exp_approx's bits in every lane where that is a normal float,
//    0 or the true value where it flushes to 0, exactly 0 below −88, −inf included; NaN stays NaN;
//  - the horizontal max and sum, the lane masks and selects, the sign lanes, magnitude and
//    division;
//  - causal_softmax_row against a double-precision softmax at every row of capacities that are
//    and are not whole vectors: masked scores come out exactly 0, nothing past the capacity is
//    written, a NaN score makes the row NaN;
// and the same file compiled for AVX-512 (where the CPU runs it) and for the plain 8-lane
// arrays of builds for other CPUs (PPTRAIN_SIMD_PLAIN), run by the last test.
#include <gtest/gtest.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/vector_math.h"
#include "support/cpu_ops_util.h"
#if !defined(PPTRAIN_SIMD_PLAIN) && !defined(PPTRAIN_CPU_AVX512)
#include "support/test_util.h"
#elif defined(PPTRAIN_SIMD_PLAIN) && (defined(__AVX2__) || defined(PPTRAIN_CPU_AVX512))
#error "PPTRAIN_SIMD_PLAIN: build without AVX2, so simd.h takes its plain path"
#endif
#include "backend/cpu/isa_begin.h"  // last: see there
#include "backend/cpu/simd.h"
#include "backend/cpu/tile_gemm.h"
#include "backend/cpu/attention_common.h"

namespace pptrain {
namespace {

using namespace cpu::PPTRAIN_CPU_ISA;
using testing::random_floats;

// What a softmax hands exp_nonpositive: x <= 0, −inf and NaN.
std::vector<float> exp_inputs() {
  std::vector<float> x = {0.0f, -0.0f, -1.0f, -INFINITY, std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::quiet_NaN(), exp_constants::kLo,
                          std::nextafter(exp_constants::kLo, -100.0f), -87.5f, -87.99f, -88.0f, -88.01f, -100.0f,
                          -1e30f, -1e-30f, -std::numeric_limits<float>::denorm_min(), -0.34657359f};
  for (float v = -90.0f; v <= 0.0f; v += 0.0137f) x.push_back(v);  // every n of the range, many r each
  for (float v : random_floats(4000, 5, -20.0f, 0.0f)) x.push_back(v);
  while (x.size() % simd::kWidth) x.push_back(-0.5f);
  return x;
}

// exp_approx's steps for x in [−87.34, 0] (no clamp or select applies there), its a·b + c
// fused as GCC contracts them at -O2 and above (the tests are compiled at -O1, which
// contracts nothing, so exp_approx itself cannot serve); 2^n is exact for n in [−126, 0].
float exp_fused(float x) {
  using namespace exp_constants;
  const float n = std::fma(x, kLog2e, kRound) - kRound;
  float r = std::fma(-n, kLn2Hi, x);
  r = std::fma(-n, kLn2Lo, r);
  float p = kPoly[0];
  for (int i = 1; i < 6; ++i) p = std::fma(p, r, kPoly[i]);
  p = std::fma(p, r * r, r) + 1.0f;
  return p * std::ldexp(1.0f, int(n));
}

TEST(Simd, ExpOfNonPositiveTakesExpApproxsSteps) {
  const std::vector<float> x = exp_inputs();
  std::vector<float> got(x.size());
  for (size_t i = 0; i < x.size(); i += simd::kWidth)
    simd::store(got.data() + i, simd::exp_nonpositive(simd::load(x.data() + i)));
  size_t differing = 0, checked = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << "exp(NaN): " << got[i];
    } else if (x[i] >= exp_constants::kLo) {  // exp_approx's bits
      const float want = exp_fused(x[i]);
      if (std::memcmp(&want, &got[i], sizeof want) != 0 && ++differing <= 5)
        ADD_FAILURE() << "exp(" << x[i] << "): " << got[i] << ", exp_approx's steps " << want;
      // and within 2 ulp of exp (Cephes' expf: about 1 ulp)
      const double e = std::exp(double(x[i]));
      ASSERT_LE(std::fabs(got[i] - e), 2.0 * std::ldexp(1.0, std::ilogb(e) - 23)) << "exp(" << x[i] << ")";
      ++checked;
    } else if (x[i] > -88.0f) {  // below 2^-126: 0, or exp's value to the subnormals' spacing (2^-149)
      if (got[i] != 0.0f) {
        ASSERT_LE(std::fabs(got[i] - std::exp(double(x[i]))), std::ldexp(1.0, -148)) << "exp(" << x[i] << ")";
      }
    } else {
      ASSERT_EQ(got[i], 0.0f) << "exp(" << x[i] << ")";  // −inf: masked scores drop out of a sum
    }
  }
  EXPECT_EQ(differing, 0u);
  EXPECT_GT(checked, 4000u);  // the 4000 random inputs in [−20, 0] alone are in that range
  float out[simd::kWidth];
  simd::store(out, simd::exp_nonpositive(simd::zero()));
  EXPECT_EQ(out[0], 1.0f);
}

TEST(Simd, ReductionsMasksAndSelects) {
  const int w = simd::kWidth;
  std::vector<float> a = random_floats(w, 9, -3.0f, 3.0f);
  a[w / 2 + 1] = 7.5f;
  double sum = 0.0;
  for (float v : a) sum += v;
  EXPECT_EQ(simd::reduce_max(simd::load(a.data())), 7.5f);
  // w − 1 additions of values below 7.5 in magnitude: each rounding at most 2⁻²⁴ of a partial
  // sum below w·7.5.
  EXPECT_NEAR(simd::reduce_add(simd::load(a.data())), sum, w * (w * 7.5) * std::ldexp(1.0, -24));
  for (int cols = 0; cols <= w; ++cols) {
    std::vector<float> buffer(w, 42.0f), out(w);
    const simd::Mask m = simd::first_lanes(cols);
    simd::store(out.data(), simd::load(a.data(), m));
    simd::store(buffer.data(), simd::splat(-1.0f), m);
    std::vector<float> picked(w);
    simd::store(picked.data(), simd::select(m, simd::splat(1.0f), simd::splat(2.0f)));
    for (int i = 0; i < w; ++i) {
      ASSERT_EQ(out[i], i < cols ? a[i] : 0.0f) << "cols " << cols << " lane " << i;
      ASSERT_EQ(buffer[i], i < cols ? -1.0f : 42.0f) << "cols " << cols << " lane " << i;
      ASSERT_EQ(picked[i], i < cols ? 1.0f : 2.0f) << "cols " << cols << " lane " << i;
    }
  }
}

// GELU's pieces (elementwise.cpp): the sign bit's lanes (−0 and a negative NaN among them),
// the magnitude, and a division rounded as the scalar one.
TEST(Simd, SignLanesAbsoluteAndDivide) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {-2.5f, 0.0f, -0.0f, 3.0f, -INFINITY, INFINITY, nan, -nan, 1e-40f, -1e-40f, 7.0f, -7.0f};
  std::vector<float> y = random_floats(x.size(), 11, 0.5f, 3.0f);
  x.resize(simd::kWidth * ((x.size() + simd::kWidth - 1) / simd::kWidth), 1.0f);
  y.resize(x.size(), 3.0f);
  for (size_t at = 0; at < x.size(); at += simd::kWidth) {
    const simd::Vec v = simd::load(x.data() + at);
    std::vector<float> sign(simd::kWidth), magnitude(simd::kWidth), quotient(simd::kWidth);
    simd::store(sign.data(), simd::select(simd::sign_lanes(v), simd::splat(1.0f), simd::splat(0.0f)));
    simd::store(magnitude.data(), simd::absolute(v));
    simd::store(quotient.data(), simd::divide(v, simd::load(y.data() + at)));
    for (int i = 0; i < simd::kWidth; ++i) {
      const float xi = x[at + i];
      ASSERT_EQ(sign[i], std::signbit(xi) ? 1.0f : 0.0f) << xi;
      const float expected_magnitude = std::fabs(xi), expected_quotient = xi / y[at + i];
      ASSERT_EQ(std::memcmp(&magnitude[i], &expected_magnitude, sizeof(float)), 0) << xi;
      if (std::isnan(xi))
        ASSERT_TRUE(std::isnan(quotient[i]));
      else
        ASSERT_EQ(quotient[i], expected_quotient) << xi;
    }
  }
}

TEST(Simd, CausalSoftmaxRowsAgainstDouble) {
  // Row i: softmax of i + 1 scores in [−8, 8]; each output is an exp_approx (about 2 ulp) over a
  // sum of at most T terms rounded in fp32: well within (T + 8)·2⁻²⁴ relative, taken as the
  // bound on every probability (all at most 1).
  for (int capacity : {1, 5, simd::kWidth, 37, 128, 131}) {
    const int guard = 2 * simd::kWidth;
    for (int i = 0; i < capacity; ++i) {
      std::vector<float> row = random_floats(size_t(capacity) + guard, 100 + i, -8.0f, 8.0f);
      const std::vector<float> scores = row;
      const attention::RowSums sums = attention::causal_softmax_row(row.data(), i, capacity);
      double mx = -INFINITY, total = 0.0;
      for (int j = 0; j <= i; ++j) mx = std::max(mx, double(scores[j]));
      for (int j = 0; j <= i; ++j) total += std::exp(double(scores[j]) - mx);
      ASSERT_EQ(sums.max, float(mx)) << "capacity " << capacity << " row " << i;
      ASSERT_NEAR(sums.sum, total, total * (capacity + 8) * std::ldexp(1.0, -24));
      for (int j = 0; j <= i; ++j)
        ASSERT_NEAR(row[j], std::exp(double(scores[j]) - mx) / total, (capacity + 8) * std::ldexp(1.0, -24))
            << "capacity " << capacity << " row " << i << " column " << j;
      for (int j = i + 1; j < capacity; ++j)
        ASSERT_EQ(row[j], 0.0f) << "masked score, capacity " << capacity << " row " << i << " column " << j;
      for (int j = capacity; j < capacity + guard; ++j)
        ASSERT_EQ(row[j], scores[j]) << "written past the capacity " << capacity << ", row " << i;
    }
  }
}

TEST(Simd, ANanScoreMakesTheRowNan) {
  for (int at : {0, 3, simd::kWidth + 2}) {
    std::vector<float> row = random_floats(64, 3);
    row[at] = std::numeric_limits<float>::quiet_NaN();
    attention::causal_softmax_row(row.data(), 40, 64);
    for (int j = 0; j <= 40; ++j) ASSERT_TRUE(std::isnan(row[j])) << "NaN at " << at << ", column " << j;
  }
}

#if !defined(PPTRAIN_SIMD_PLAIN) && !defined(PPTRAIN_CPU_AVX512)
// The plain path (struct Vec of 8 floats) is what non-x86 builds run, and the AVX-512 one what
// AVX-512 CPUs run; nothing else in `make` compiles this file for either.
TEST(Simd, ThePlainAndAvx512PathsPassTheseTestsToo) {
  testing::TempDir dir;
  std::vector<std::pair<std::string, std::string>> builds = {{"plain", "-march=x86-64 -DPPTRAIN_SIMD_PLAIN"}};
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    builds.push_back({"avx512", "-march=x86-64-v3 -DPPTRAIN_CPU_AVX512"});
  for (const auto& [name, flags] : builds) {
    const std::string bin = dir.file("test_simd_" + name);
    // 300 s: the compile and run take about 5 s on a 2-core VM; the limit only turns a hang
    // into a failure, with room for a machine many times slower or busy with other tests.
    const auto r = testing::run_command("g++ -std=c++20 -O1 -fno-trapping-math -fno-math-errno -fopenmp " + flags +
                                            " -Isrc -Itests tests/test_simd.cpp -o " + bin +
                                            " -lgtest_main -lgtest -lpthread && " + bin + " --gtest_brief=1",
                                        300);
    EXPECT_EQ(r.exit_code, 0) << name << ":\n" << r.output;
    // Every test of this file but this one.
    EXPECT_NE(r.output.find("[  PASSED  ] 5 tests."), std::string::npos) << name << ":\n" << r.output;
  }
}
#endif

}  // namespace
}  // namespace pptrain
