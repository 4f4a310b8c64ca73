// The emulated warp matrix operations (nvcuda::wmma, emu/wmma_emu.h): a 16×16×16
// product in every layout against a naive one, element-wise fragment code, and the faults
// (a missing lane, a misaligned tile, a kernel that relies on the fragment layout).
#include "emu/emu.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "device.cuh"

using namespace pptrain::kernels;
using namespace nvcuda;
using pptrain::emu::KernelFault;
using pptrain::emu::Order;
using pptrain::emu::Stream;

namespace {

constexpr int kN = 16;

// d[16×16] = a·b + c · c_scale, with a, b read in layouts LA, LB (leading dimension ld) and c,
// d in `acc_layout`; one warp.
template <typename LA, typename LB>
__global__ void mma_kernel(float* d, const bf16* a, const bf16* b, const float* c, unsigned ld,
                           wmma::layout_t acc_layout, float c_scale) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, LA> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, LB> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::load_matrix_sync(fa, a, ld);
  wmma::load_matrix_sync(fb, b, ld);
  wmma::load_matrix_sync(acc, c, ld, acc_layout);
  for (int i = 0; i < acc.num_elements; ++i) acc.x[i] *= c_scale;  // element-wise: layout-free
  wmma::mma_sync(acc, fa, fb, acc);                                  // d aliases c
  wmma::store_matrix_sync(d, acc, ld, acc_layout);
}

// Writes the accumulator as if lane l held row-major elements l·8 .. l·8+7: a layout the
// API does not promise.
__global__ void assumes_layout_kernel(float* out, const float* c) {
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::load_matrix_sync(acc, c, kN, wmma::mem_row_major);
  for (int i = 0; i < acc.num_elements; ++i) out[threadIdx.x * acc.num_elements + i] = acc.x[i];
}

// Lane 31 leaves before the product.
__global__ void missing_lane_kernel(float* d, const bf16* a) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  if (threadIdx.x == 31) return;
  wmma::load_matrix_sync(fa, a, kN);
  wmma::load_matrix_sync(fb, a, kN);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(d, acc, kN, wmma::mem_row_major);
}

std::vector<float> bf16_exact(size_t n, unsigned seed) {  // values k/64, k in [-128, 128)
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(int((unsigned(i) * 2654435761u + seed * 40503u) >> 7 & 255u) - 128) / 64.0f;
  return v;
}

std::vector<bf16> as_bf16(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __float2bfloat16_rn(v[i]);
  return out;
}

template <typename LA, typename LB>
void check_product(wmma::layout_t acc_layout) {
  constexpr unsigned ld = 24;  // a padded leading dimension (48 bytes of bf16: a multiple of 16)
  std::vector<float> a = bf16_exact(kN * ld, 1), b = bf16_exact(kN * ld, 2), c = bf16_exact(kN * ld, 3);
  // Tiles must be 256-bit aligned (a vector's storage is only 16-byte aligned).
  alignas(32) static bf16 a16[kN * ld], b16[kN * ld];
  alignas(32) static float c32[kN * ld];
  std::copy_n(as_bf16(a).begin(), kN * ld, a16);
  std::copy_n(as_bf16(b).begin(), kN * ld, b16);
  std::copy_n(c.begin(), kN * ld, c32);
  bool a_col = std::is_same_v<LA, wmma::col_major>, b_col = std::is_same_v<LB, wmma::col_major>;
  bool acc_col = acc_layout == wmma::mem_col_major;
  auto at = [&](const std::vector<float>& m, int r, int k, bool col) { return double(m[col ? k * ld + r : r * ld + k]); };
  for (Order order : {Order::forward, Order::reverse}) {
    alignas(32) static float d[kN * ld];
    std::fill(d, d + kN * ld, NAN);
    Stream stream{order};
    launch({&stream}, "wmma_product", mma_kernel<LA, LB>, dim3(1), dim3(32), 0, d, (const bf16*)a16,
           (const bf16*)b16, (const float*)c32, ld, acc_layout, 0.5f);
    for (int r = 0; r < kN; ++r)
      for (int n = 0; n < kN; ++n) {
        double ref = 0.5 * at(c, r, n, acc_col), magnitude = std::fabs(ref);
        for (int k = 0; k < kN; ++k) {
          ref += at(a, r, k, a_col) * at(b, k, n, b_col);
          magnitude += std::fabs(at(a, r, k, a_col) * at(b, k, n, b_col));
        }
        // Products are exact in fp32; 16 fp32 additions each err by at most 2⁻²⁴ of a
        // partial sum bounded by Σ|terms| (Higham, Thm 3.1): |err| ≤ 16·2⁻²⁴·Σ|terms|.
        double got = d[acc_col ? n * ld + r : r * ld + n];
        ASSERT_LE(std::fabs(got - ref), 16 * std::ldexp(magnitude, -24)) << "row " << r << " col " << n;
      }
  }
}

}  // namespace

TEST(EmulatedWmma, ProductMatchesNaiveInEveryLayout) {
  check_product<wmma::row_major, wmma::row_major>(wmma::mem_row_major);
  check_product<wmma::row_major, wmma::col_major>(wmma::mem_col_major);
  check_product<wmma::col_major, wmma::row_major>(wmma::mem_row_major);
  check_product<wmma::col_major, wmma::col_major>(wmma::mem_col_major);
}

TEST(EmulatedWmma, FragmentLayoutIsNotRowMajorPerLane) {
  alignas(32) static float c[kN * kN];
  for (int i = 0; i < kN * kN; ++i) c[i] = float(i);
  std::vector<float> out(kN * kN, NAN);
  launch({}, "assumes_layout", assumes_layout_kernel, dim3(1), dim3(32), 0, out.data(), (const float*)c);
  int in_place = 0;
  for (int i = 0; i < kN * kN; ++i) in_place += out[i] == c[i];
  EXPECT_LT(in_place, 16) << "a kernel indexing frag.x[i] as a fixed layout must compute garbage";
  std::vector<float> sorted = out;  // yet the fragments together hold every element once
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < kN * kN; ++i) ASSERT_EQ(sorted[i], float(i));
}

TEST(EmulatedWmma, MissingLaneIsReported) {
  alignas(32) static bf16 a[kN * kN] = {};
  alignas(32) static float d[kN * kN];
  try {
    launch({}, "missing_lane", missing_lane_kernel, dim3(1), dim3(32), 0, d, (const bf16*)a);
    FAIL() << "expected a KernelFault";
  } catch (const KernelFault& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("deadlock"), std::string::npos) << what;
    EXPECT_NE(what.find("wmma::load_matrix_sync"), std::string::npos) << what;
    EXPECT_NE(what.find("thread 31 exited"), std::string::npos) << what;
  }
}

TEST(EmulatedWmma, MisalignedTileIsReported) {
  alignas(32) static bf16 a[kN * kN + 8] = {};
  alignas(32) static float d[kN * kN];
  alignas(32) static float c[kN * kN] = {};
  try {
    launch({}, "misaligned", mma_kernel<wmma::row_major, wmma::row_major>, dim3(1), dim3(32), 0, d,
           (const bf16*)a + 8, (const bf16*)a, (const float*)c, 16u, wmma::mem_row_major, 1.0f);
    FAIL() << "expected a KernelFault";
  } catch (const KernelFault& e) {
    EXPECT_NE(std::string(e.what()).find("misaligned"), std::string::npos) << e.what();
  }
}
