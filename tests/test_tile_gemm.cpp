// The register-tiled GEMM of cpu attention (backend/cpu/tile_gemm.h), compiled here for the
// build's baseline ISA (its vectors are AVX2's in the default build):
//  - against a double-precision product over m, n, k that cover every row-tile height (1..6)
//    and every column remainder (full two-vector panels, one vector, masked tails, none),
//    A read in place, transposed (packed or not), α and β;
//  - bit for bit against itself when the same matrix is cut into column and row slices at
//    every offset: each element's FMAs in k order are the same whether its lane is full or
//    masked, so how attention cuts its causal strips cannot change a result;
//  - a masked tail reads and writes only its own columns: C's neighbours stay as they were,
//    and B ends exactly at its last column (a read past it would be past the allocation).
//  - the transposing copy of K and V, against its definition.
// The same cases run on the plain 8-lane arrays of builds for other CPUs and, on AVX-512
// CPUs, in the AVX-512 copy: the last two tests compile this file for the x86-64 baseline
// without AVX2 (PPTRAIN_TILE_GEMM_PLAIN) and with PPTRAIN_CPU_AVX512 and run it (and
// attention's op tests run in both copies of the backend: test_cpu_isa).
#include <gtest/gtest.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "support/cpu_ops_util.h"
#if defined(PPTRAIN_TILE_GEMM_PLAIN)
#if defined(__AVX2__) || defined(PPTRAIN_CPU_AVX512)
#error "PPTRAIN_TILE_GEMM_PLAIN: build without AVX2, so tile_gemm.h takes its plain path"
#endif
#elif defined(PPTRAIN_TILE_GEMM_AVX512)
#if !defined(PPTRAIN_CPU_AVX512)
#error "PPTRAIN_TILE_GEMM_AVX512: build with PPTRAIN_CPU_AVX512, so tile_gemm.h takes its AVX-512 path"
#endif
#else
#include "support/test_util.h"
#define PPTRAIN_TILE_GEMM_MAIN
#endif
#include "backend/cpu/vector_math.h"
#include "backend/cpu/isa_begin.h"  // last: see there
#include "backend/cpu/simd.h"
#include "backend/cpu/tile_gemm.h"

namespace pptrain {
namespace {

using namespace cpu::PPTRAIN_CPU_ISA;
using testing::random_floats;

struct Product {
  int m, n, k;
  bool transposed;  // A given as Aᵀ (k rows of m), read across its rows
};

// C = α·A·B + β·C0 in double, A(r, kk) from `a` as the tile reads it.
std::vector<double> reference(const Product& p, const std::vector<float>& a, const std::vector<float>& b,
                              const std::vector<float>& c0, float alpha, float beta) {
  std::vector<double> c(size_t(p.m) * p.n);
  for (int r = 0; r < p.m; ++r)
    for (int j = 0; j < p.n; ++j) {
      double s = 0;
      for (int kk = 0; kk < p.k; ++kk) {
        const float av = p.transposed ? a[size_t(kk) * p.m + r] : a[size_t(r) * p.k + kk];
        s += double(av) * b[size_t(kk) * p.n + j];
      }
      c[size_t(r) * p.n + j] = alpha * s + double(beta) * c0[size_t(r) * p.n + j];
    }
  return c;
}

tile::Strided operand(const Product& p, const std::vector<float>& a) {
  return p.transposed ? tile::Strided{a.data(), 1, p.m} : tile::Strided{a.data(), p.k, 1};
}

TEST(TileGemm, MatchesADoubleProductOnEveryTileShape) {
  // Each element sums k products of values in [-1, 1]: fp32 accumulation in k order errs by
  // at most about k·2⁻²⁴ of Σ|a·b| ≤ k (Higham's γ_k), plus the α and β roundings.
  const int w = tile::kWidth;
  int checked = 0;
  for (bool transposed : {false, true})
    for (int m : {1, 2, 3, 4, 5, 6, 7, 13})
      for (int n : {1, w - 1, w, w + 1, 2 * w - 1, 2 * w, 2 * w + 3, 3 * w + 5, 5 * w})
        for (int k : {1, 7, 64}) {
          const Product p{m, n, k, transposed};
          const auto a = random_floats(size_t(m) * k, 1 + m + 31 * n), b = random_floats(size_t(k) * n, 2 + k),
                     c0 = random_floats(size_t(m) * n, 3);
          for (float beta : {0.0f, 0.5f}) {
            std::vector<float> c = c0, pack(size_t(tile::kRows) * k);
            tile::gemm(m, n, k, 0.75f, operand(p, a), b.data(), n, beta, c.data(), n, pack.data());
            const auto want = reference(p, a, b, c0, 0.75f, beta);
            const double bound = (k + 2) * std::ldexp(1.0, -24) * (k + 1);
            for (size_t i = 0; i < c.size(); ++i)
              ASSERT_LE(std::fabs(c[i] - want[i]), bound)
                  << "m " << m << " n " << n << " k " << k << " transposed " << transposed << " beta " << beta
                  << " element " << i;
            ++checked;
          }
        }
  EXPECT_EQ(checked, 2 * 8 * 9 * 3 * 2);
}

TEST(TileGemm, ResultsDoNotDependOnHowTheMatrixIsCut) {
  const int m = 11, n = 3 * tile::kWidth + 5, k = 37;
  const Product p{m, n, k, false};
  const auto a = random_floats(size_t(m) * k, 7), b = random_floats(size_t(k) * n, 8);
  std::vector<float> whole(size_t(m) * n);
  tile::gemm(m, n, k, 1.25f, operand(p, a), b.data(), n, 0.0f, whole.data(), n);
  for (int j = 1; j < n; ++j) {  // columns [0, j) then [j, n): the masked tail moves with j
    std::vector<float> cut(whole.size(), std::numeric_limits<float>::quiet_NaN());
    tile::gemm(m, j, k, 1.25f, operand(p, a), b.data(), n, 0.0f, cut.data(), n);
    tile::gemm(m, n - j, k, 1.25f, operand(p, a), b.data() + j, n, 0.0f, cut.data() + j, n);
    ASSERT_EQ(std::memcmp(cut.data(), whole.data(), whole.size() * sizeof(float)), 0) << "cut at column " << j;
  }
  for (int r = 1; r < m; ++r) {  // rows [0, r) then [r, m): other row-tile heights
    std::vector<float> cut(whole.size(), std::numeric_limits<float>::quiet_NaN());
    tile::gemm(r, n, k, 1.25f, operand(p, a), b.data(), n, 0.0f, cut.data(), n);
    tile::gemm(m - r, n, k, 1.25f, tile::Strided{a.data() + size_t(r) * k, k, 1}, b.data(), n, 0.0f,
               cut.data() + size_t(r) * n, n);
    ASSERT_EQ(std::memcmp(cut.data(), whole.data(), whole.size() * sizeof(float)), 0) << "cut at row " << r;
  }
}

TEST(TileGemm, AMaskedTailTouchesOnlyItsOwnColumns) {
  const int m = 7, k = 5, ldc = 64;
  for (int n = 1; n < 2 * tile::kWidth; ++n) {
    const Product p{m, n, k, false};
    const auto a = random_floats(size_t(m) * k, 11);
    // B exactly k·n floats on the heap, so a read past its last column would leave the
    // allocation (AddressSanitizer builds report it; elsewhere the masked load must not fault).
    const auto b = random_floats(size_t(k) * n, 12);
    std::vector<float> c(size_t(m) * ldc, 42.0f);
    tile::gemm(m, n, k, 1.0f, operand(p, a), b.data(), n, 0.0f, c.data(), ldc);
    for (int r = 0; r < m; ++r)
      for (int j = n; j < ldc; ++j) ASSERT_EQ(c[size_t(r) * ldc + j], 42.0f) << "n " << n << " row " << r;
  }
}

// The transposing copy attention makes of a head's K and V (tile::transpose: whole blocks
// of one vector's width in registers, the edges one float at a time), and its plain copy of
// rows (tile::copy_rows, the last vector of a row masked), against the definitions, on shapes with and without edges in either dimension and a source row stride
// wider than its rows; the destination's every element is written.
TEST(TileGemm, TransposeAndCopyRowsPutEveryElementInItsPlace) {
  const int w = tile::kWidth;
  int checked = 0;
  for (int rows : {1, w - 1, w, w + 3, 2 * w, 8 * w + 5})
    for (int cols : {1, w - 1, w, 2 * w, 2 * w + 7, 4 * w}) {
      const ptrdiff_t ld = 3 * cols + 5;
      const auto src = random_floats(size_t(rows) * ld, uint32_t(rows * 131 + cols));
      std::vector<float> dst(size_t(rows) * cols, std::numeric_limits<float>::quiet_NaN());
      tile::transpose(dst.data(), src.data(), rows, cols, ld);
      for (int d = 0; d < cols; ++d)
        for (int j = 0; j < rows; ++j)
          ASSERT_EQ(dst[size_t(d) * rows + j], src[size_t(j) * ld + d])
              << "rows " << rows << " cols " << cols << " at (" << d << ", " << j << ")";
      // And the plain copy of the same rows (tile::copy_rows), which ends exactly at `cols`.
      std::vector<float> rows_copy(size_t(rows) * cols + 1, std::numeric_limits<float>::quiet_NaN());
      tile::copy_rows(rows_copy.data(), src.data(), rows, cols, ld);
      for (int j = 0; j < rows; ++j)
        for (int d = 0; d < cols; ++d)
          ASSERT_EQ(rows_copy[size_t(j) * cols + d], src[size_t(j) * ld + d])
              << "copy_rows: rows " << rows << " cols " << cols << " at (" << j << ", " << d << ")";
      EXPECT_TRUE(std::isnan(rows_copy.back())) << "copy_rows wrote past its last row";
      ++checked;
    }
  EXPECT_EQ(checked, 36);
}

#if defined(PPTRAIN_TILE_GEMM_MAIN)
// The plain path (struct Vec of 8 floats, lanes masked by count) is what non-x86 builds
// run; nothing else in `make` compiles it.
TEST(TileGemm, ThePlainPathPassesTheseTestsToo) {
  testing::TempDir dir;
  const std::string bin = dir.file("test_tile_gemm_plain");
  // 300 s: the compile and run take about 5 s on a 2-core VM; the limit only turns a hang
  // into a failure, with room for a machine many times slower or busy with other tests.
  const auto r = testing::run_command(
      "g++ -std=c++20 -O1 -march=x86-64 -DPPTRAIN_TILE_GEMM_PLAIN -Isrc -Itests tests/test_tile_gemm.cpp -o " + bin +
          " -lgtest_main -lgtest -lpthread && " + bin + " --gtest_brief=1",
      300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[  PASSED  ] 4 tests."), std::string::npos) << r.output;
}

// The AVX-512 copy (16-lane vectors, mask registers, the 16 x 16 register transpose), as
// cpu/attention*.cpp compile it, where the CPU can run it.
TEST(TileGemm, TheAvx512PathPassesTheseTestsToo) {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512dq") || !__builtin_cpu_supports("avx512vl"))
    GTEST_SKIP() << "this CPU has no AVX-512";
  testing::TempDir dir;
  const std::string bin = dir.file("test_tile_gemm_avx512");
  // 300 s: as above.
  const auto r = testing::run_command(
      "g++ -std=c++20 -O1 -march=x86-64-v3 -DPPTRAIN_TILE_GEMM_AVX512 -DPPTRAIN_CPU_AVX512 -Isrc -Itests "
      "tests/test_tile_gemm.cpp -o " + bin + " -lgtest_main -lgtest -lpthread && " + bin + " --gtest_brief=1",
      300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[  PASSED  ] 4 tests."), std::string::npos) << r.output;
}
#endif

}  // namespace
}  // namespace pptrain
