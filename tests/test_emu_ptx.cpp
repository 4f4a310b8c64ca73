// The emulated sm_80 PTX of kernels/ptx.cuh (emu/ptx_emu.h): mma.sync.m16n8k16 and ldmatrix
// against the element-to-lane formulas of the PTX ISA, written out again here from the
// manual's text (not from the emulator's code); the fragment loaders of ptx.cuh composed into
// whole products; cp.async's zero-fill, its groups, and the two completion times the
// emulator chooses between; and the faults for addresses outside shared memory.
#include "emu/emu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "device.cuh"
#include "ptx.cuh"
#include "wgmma.cuh"

using namespace pptrain::kernels;
using pptrain::emu::KernelFault;
using pptrain::emu::Order;
using pptrain::emu::Stream;
using ptx::u32;

namespace {

// ---- the manual's formulas (PTX ISA 9.7.x "Matrix Fragments for mma.m16n8k16 with floating
// point type"), element i of a lane's fragment, groupID = lane >> 2, tig = lane % 4 ----------
int a_row(int lane, int i) { return (i < 2 || (i >= 4 && i < 6)) ? lane / 4 : lane / 4 + 8; }
int a_col(int lane, int i) { return (lane % 4) * 2 + (i & 1) + (i >= 4 ? 8 : 0); }
int b_row(int lane, int i) { return (lane % 4) * 2 + (i & 1) + (i >= 2 ? 8 : 0); }
int b_col(int lane, int /*i*/) { return lane / 4; }
int c_row(int lane, int i) { return i < 2 ? lane / 4 : lane / 4 + 8; }
int c_col(int lane, int i) { return (lane % 4) * 2 + (i & 1); }

u32 pair(float lo, float hi) { return ptx::pack_bf16(lo, hi); }

// d[16][8] = a[16][16] · b[16][8] + c[16][8], each lane gathering its fragments by the formulas.
__global__ void mma_kernel(float* d, const float* a, const float* b, const float* c) {
  int l = threadIdx.x;
  u32 fa[4], fb[2];
  for (int r = 0; r < 4; ++r)
    fa[r] = pair(a[a_row(l, 2 * r) * 16 + a_col(l, 2 * r)], a[a_row(l, 2 * r + 1) * 16 + a_col(l, 2 * r + 1)]);
  for (int r = 0; r < 2; ++r)
    fb[r] = pair(b[b_row(l, 2 * r) * 8 + b_col(l, 2 * r)], b[b_row(l, 2 * r + 1) * 8 + b_col(l, 2 * r + 1)]);
  float acc[4];
  for (int i = 0; i < 4; ++i) acc[i] = c[c_row(l, i) * 8 + c_col(l, i)];
  ptx::mma_bf16_16816(acc, fa, fb);
  for (int i = 0; i < 4; ++i) d[c_row(l, i) * 8 + c_col(l, i)] = acc[i];
}

// Small integers: every product and partial sum is exact in fp32, so the product is exact
// whatever the summation order and the check is equality.
std::vector<float> small_ints(int n, int seed) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = float((i * 7 + seed * 13) % 9 - 4);
  return v;
}

TEST(EmulatedPtx, MmaComputesTheProductInTheManualsFragmentLayout) {
  std::vector<float> a = small_ints(256, 1), b = small_ints(128, 2), c = small_ints(128, 3), d(128);
  for (Order order : {Order::forward, Order::reverse}) {
    Stream stream{order};
    launch({&stream}, "mma", mma_kernel, dim3(1), dim3(32), 0, d.data(), (const float*)a.data(),
           (const float*)b.data(), (const float*)c.data());
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 8; ++n) {
        float ref = c[r * 8 + n];
        for (int k = 0; k < 16; ++k) ref += a[r * 16 + k] * b[k * 8 + n];
        ASSERT_EQ(d[r * 8 + n], ref) << "row " << r << " column " << n;
      }
  }
}

// ---- ldmatrix -----------------------------------------------------------------------------
// Four 8×8 matrices in shared memory whose rows are stored in a scrambled order (row i of
// matrix m at slot (5i + 3m) % 8 of its 8-row block, rows 24 elements apart), so only the
// per-lane row addresses can put them together; element (m, i, j) holds m·64 + i·8 + j.
constexpr int kLd = 24;
int slot(int m, int i) { return m * 8 + (5 * i + 3 * m) % 8; }

__global__ void ldmatrix_kernel(u32* out, bool trans) {
  PPTRAIN_STATIC_SHARED(bf16, tiles, 32 * kLd);
  int l = threadIdx.x;
  for (int m = 0; m < 4; ++m)
    if (l < 8)
      for (int j = 0; j < 8; ++j) tiles[slot(m, l) * kLd + j] = __float2bfloat16_rn(float(m * 64 + l * 8 + j));
  __syncthreads();
  u32 r[4];
  const bf16* row = tiles + slot(l / 8, l % 8) * kLd;
  if (trans) ptx::ldmatrix_x4_trans(r, row);
  else ptx::ldmatrix_x4(r, row);
  for (int m = 0; m < 4; ++m) out[l * 4 + m] = r[m];
}

TEST(EmulatedPtx, LdmatrixGivesEachLaneTheManualsElements) {
  for (bool trans : {false, true}) {
    std::vector<u32> out(128);
    launch({}, "ldmatrix", ldmatrix_kernel, dim3(1), dim3(32), 0, out.data(), trans);
    for (int l = 0; l < 32; ++l)
      for (int m = 0; m < 4; ++m) {
        // "each thread loads fragments of a row": lane l, row l/4, columns 2(l%4), +1;
        // .trans loads the matrix column-major: rows 2(l%4), +1 of column l/4.
        int i0 = trans ? 2 * (l % 4) : l / 4, j0 = trans ? l / 4 : 2 * (l % 4);
        int i1 = trans ? i0 + 1 : i0, j1 = trans ? j0 : j0 + 1;
        u32 expect = pair(float(m * 64 + i0 * 8 + j0), float(m * 64 + i1 * 8 + j1));
        ASSERT_EQ(out[l * 4 + m], expect) << (trans ? "trans " : "") << "lane " << l << " matrix " << m;
      }
  }
}

// ---- the loaders of ptx.cuh composed into products ----------------------------------------
// From a [16][16] bf16 tile X and a [16][16] tile Y in shared memory:
//   rows[16][16] = X · Yᵀ (load_a, load_b_of_rows), cols[16][16] = X · Y (load_b_of_cols).
__global__ void loaders_kernel(float* rows, float* cols, const float* x, const float* y) {
  PPTRAIN_STATIC_SHARED(bf16, xs, 16 * kLd);
  PPTRAIN_STATIC_SHARED(bf16, ys, 16 * kLd);
  int l = threadIdx.x;
  for (int e = l; e < 256; e += 32) {
    xs[e / 16 * kLd + e % 16] = __float2bfloat16_rn(x[e]);
    ys[e / 16 * kLd + e % 16] = __float2bfloat16_rn(y[e]);
  }
  __syncthreads();
  u32 a[4], b[4];
  ptx::load_a(a, xs, kLd, l);
  float r[2][4] = {}, c[2][4] = {};
  ptx::load_b_of_rows(b, ys, kLd, l);
  ptx::mma_bf16_16816(r[0], a, b);
  ptx::mma_bf16_16816(r[1], a, b + 2);
  ptx::load_b_of_cols(b, ys, kLd, l);
  ptx::mma_bf16_16816(c[0], a, b);
  ptx::mma_bf16_16816(c[1], a, b + 2);
  for (int n = 0; n < 2; ++n)
    for (int i = 0; i < 4; ++i) {
      rows[c_row(l, i) * 16 + n * 8 + c_col(l, i)] = r[n][i];
      cols[c_row(l, i) * 16 + n * 8 + c_col(l, i)] = c[n][i];
    }
}

TEST(EmulatedPtx, FragmentLoadersComposeIntoProducts) {
  std::vector<float> x = small_ints(256, 4), y = small_ints(256, 5), rows(256), cols(256);
  launch({}, "loaders", loaders_kernel, dim3(1), dim3(32), 0, rows.data(), cols.data(), (const float*)x.data(),
         (const float*)y.data());
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      float xyt = 0, xy = 0;
      for (int k = 0; k < 16; ++k) xyt += x[i * 16 + k] * y[j * 16 + k], xy += x[i * 16 + k] * y[k * 16 + j];
      ASSERT_EQ(rows[i * 16 + j], xyt) << i << "," << j;
      ASSERT_EQ(cols[i * 16 + j], xy) << i << "," << j;
    }
}

// ---- cp.async -----------------------------------------------------------------------------
// Thread t copies 16 bytes (4 floats) of src into two shared buffers, one group each (the
// second zero-filled where `fill` says); reads buffer 0 before any wait, after wait<1> (the
// first group complete) and both after wait<0>.
__global__ void async_kernel(float* before, float* after1, float* after0, const float* src, bool zero_second) {
  PPTRAIN_STATIC_SHARED(float, buf, 2 * 4 * 32);
  int t = threadIdx.x;
  ptx::cp_async_16(buf + 4 * t, src + 4 * t, 16);
  ptx::cp_async_commit();
  ptx::cp_async_16(buf + 128 + 4 * t, src + 4 * t, zero_second ? 0 : 16);
  ptx::cp_async_commit();
  for (int e = 0; e < 4; ++e) before[4 * t + e] = buf[4 * t + e];
  ptx::cp_async_wait<1>();
  for (int e = 0; e < 4; ++e) after1[4 * t + e] = buf[128 + 4 * t + e];
  ptx::cp_async_wait<0>();
  for (int e = 0; e < 4; ++e) after0[4 * t + e] = buf[128 + 4 * t + e] + buf[4 * t + e];
}

TEST(EmulatedPtx, CpAsyncLandsAtIssueInForwardOrderAndAtItsWaitInReverse) {
  std::vector<float> src(128), before(128), after1(128), after0(128);
  for (int i = 0; i < 128; ++i) src[i] = float(i + 1);
  for (Order order : {Order::forward, Order::reverse}) {
    for (bool zero : {false, true}) {
      Stream stream{order};
      launch({&stream}, "async", async_kernel, dim3(1), dim3(32), 0, before.data(), after1.data(), after0.data(),
             (const float*)src.data(), zero);
      for (int i = 0; i < 128; ++i) {
        float second = zero ? 0.0f : src[i];
        if (order == Order::forward) {
          EXPECT_EQ(before[i], src[i]) << "forward order: the copy lands at issue";
          EXPECT_EQ(after1[i], second) << "forward order: the second group has landed too";
        } else {
          EXPECT_TRUE(std::isnan(before[i])) << "reverse order: nothing lands before the wait";
          EXPECT_TRUE(std::isnan(after1[i])) << "reverse order: wait<1> leaves the newest group in flight";
        }
        EXPECT_EQ(after0[i], src[i] + second) << "after wait<0> everything has landed";
      }
    }
  }
}

__global__ void async_to_global_kernel(float* dst, const float* src) { ptx::cp_async_16(dst, src, 16); }

__global__ void ldmatrix_global_kernel(const bf16* rows) {
  u32 r[4];
  ptx::ldmatrix_x4(r, rows + (threadIdx.x % 8) * 8);
}

TEST(EmulatedPtx, AddressesOutsideSharedMemoryAreFaults) {
  alignas(16) float dst[4], src[4] = {1, 2, 3, 4};
  try {
    launch({}, "async_global", async_to_global_kernel, dim3(1), dim3(1), 0, dst, (const float*)src);
    FAIL() << "no fault";
  } catch (const KernelFault& e) {
    EXPECT_NE(std::string(e.what()).find("cp.async: the destination is not in shared memory"), std::string::npos)
        << e.what();
  }
  alignas(16) bf16 rows[64] = {};
  try {
    launch({}, "ldmatrix_global", ldmatrix_global_kernel, dim3(1), dim3(32), 0, (const bf16*)rows);
    FAIL() << "no fault";
  } catch (const KernelFault& e) {
    EXPECT_NE(std::string(e.what()).find("row address is not in shared memory"), std::string::npos) << e.what();
  }
}

// ---- wgmma (sm_90a) -------------------------------------------------------------------------
// D[64×N] = A[64×16]·B[16×N] for three operand placements, each tile written into shared
// memory by the manual's own layout formulas (PTX ISA "Shared Memory Matrix Layout", CuTe
// notation, in bf16 elements; swizzles applied to byte addresses of a 1024-byte aligned tile):
//  kInterleaved: A and B K-major, no swizzle: ((8,m),(8,2k)):((8,SBO),(1,LBO)), LBO 128 B, SBO 256 B
//  kSwizzled:    A and B K-major, 128B swizzle: Swizzle<3,4,3> o ((8,m),(8,2k)):((64,SBO),(1,8)), SBO 1024 B
//  kRegisters:   A in registers (mma.sync A layout per warp), B MN-major 128B swizzled, N = 128:
//                Swizzle<3,4,3> o ((8,8,2),(8,2)):((1,8,LBO),(64,SBO)), LBO 8192 B, SBO 1024 B
enum Placement { kInterleaved, kSwizzled, kRegisters };

uint32_t swizzle128(uint32_t byte) { return byte ^ (((byte >> 7) & 7) << 4); }

// Byte offset (from the 1024-aligned tile) of element (mn, k) of a K-major operand.
uint32_t k_major_byte(Placement p, int mn, int k) {
  if (p == kInterleaved) return uint32_t((mn % 8) * 8 + (mn / 8) * 128 + (k % 8) + (k / 8) * 64) * 2;
  return swizzle128(uint32_t((mn % 8) * 64 + (mn / 8) * 512 + k) * 2);
}
// Byte offset of element (k, n) of the MN-major B of kRegisters.
uint32_t mn_major_byte(int k, int n) {
  return swizzle128(uint32_t(n % 8 + (n / 8) % 8 * 8 + (n / 64) * 4096 + (k % 8) * 64 + (k / 8) * 512) * 2);
}

template <int N>
__global__ void wgmma_kernel(float* d, const float* a, const float* b, Placement p) {
  PPTRAIN_DYNAMIC_SHARED(unsigned char, raw);
  unsigned char* tile = raw + (1024 - wgmma::smem_address(raw) % 1024) % 1024;
  unsigned char* a_tile = tile;                  // 8 KiB
  unsigned char* b_tile = tile + 8192;           // 16 KiB
  int l = threadIdx.x;
  for (int e = l; e < 64 * 16; e += 128) {
    int m = e / 16, k = e % 16;
    bf16 v = __float2bfloat16_rn(a[e]);
    std::memcpy(a_tile + k_major_byte(p == kRegisters ? kSwizzled : p, m, k), &v, 2);
  }
  for (int e = l; e < 16 * N; e += 128) {
    int k = e / N, n = e % N;
    bf16 v = __float2bfloat16_rn(b[e]);
    std::memcpy(b_tile + (p == kRegisters ? mn_major_byte(k, n) : k_major_byte(p, n, k)), &v, 2);
  }
  wgmma::fence_proxy_async();
  __syncthreads();
  uint32_t a_addr = wgmma::smem_address(a_tile), b_addr = wgmma::smem_address(b_tile);
  float acc[N / 2];
  int w = l / 32, g = l % 32 / 4, t = l % 4;
  for (int e = 0; e < N / 2; ++e) acc[e] = 0.5f;  // C = 0.5 everywhere, accumulated onto
  wgmma::fence();
  if (p == kRegisters) {
    u32 ar[4];
    for (int r = 0; r < 4; ++r) {
      int row = 16 * w + g + (r & 1) * 8, col = 2 * t + (r >> 1) * 8;
      ar[r] = pair(a[row * 16 + col], a[row * 16 + col + 1]);
    }
    if constexpr (N == 128) wgmma::mma_rs_mn<128>(acc, ar, wgmma::descriptor_sw128(b_addr, 8192, 1024), true);
  } else if constexpr (N == 64) {
    uint64_t da = p == kInterleaved ? (uint64_t(a_addr >> 4) | uint64_t(128 >> 4) << 16 | uint64_t(256 >> 4) << 32)
                                    : wgmma::descriptor_sw128(a_addr, 16, 1024);
    uint64_t db = p == kInterleaved ? (uint64_t(b_addr >> 4) | uint64_t(128 >> 4) << 16 | uint64_t(256 >> 4) << 32)
                                    : wgmma::descriptor_sw128(b_addr, 16, 1024);
    wgmma::mma_ss<64>(acc, da, db, true);
  }
  wgmma::commit();
  wgmma::wait<0>();
  // "d[4j + i] = D[16w + g + 8(i / 2)][8j + 2t + i % 2]"
  for (int e = 0; e < N / 2; ++e) d[(16 * w + g + 8 * (e % 4 / 2)) * N + 8 * (e / 4) + 2 * t + e % 2] = acc[e];
}

template <int N>
void check_wgmma(Placement p) {
  std::vector<float> a = small_ints(64 * 16, 6), b = small_ints(16 * N, 7), d(64 * N);
  for (Order order : {Order::forward, Order::reverse}) {
    Stream stream{order};
    launch({&stream}, "wgmma", wgmma_kernel<N>, dim3(1), dim3(128), 8192 + 16384 + 1024, d.data(),
           (const float*)a.data(), (const float*)b.data(), p);
    for (int m = 0; m < 64; ++m)
      for (int n = 0; n < N; ++n) {
        float ref = 0.5f;
        for (int k = 0; k < 16; ++k) ref += a[m * 16 + k] * b[k * N + n];
        ASSERT_EQ(d[m * N + n], ref) << "placement " << p << " row " << m << " column " << n;
      }
  }
}

TEST(EmulatedPtx, WgmmaReadsTheManualsSharedMemoryLayouts) {
  check_wgmma<64>(kInterleaved);
  check_wgmma<64>(kSwizzled);
  check_wgmma<128>(kRegisters);
}

}  // namespace
