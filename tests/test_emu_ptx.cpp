// The sm_80/sm_90a PTX of kernels/ptx.cuh and kernels/wgmma.cuh: mma.sync.m16n8k16, ldmatrix
// and wgmma against the element-to-lane and shared-memory layout formulas of the PTX ISA,
// written out again here from the manual's text (not from the emulator's code); the fragment
// loaders of ptx.cuh composed into whole products. Two binaries from this file:
//  - build/tests/test_emu_ptx, under the SIMT emulator (emu/ptx_emu.h), also checks cp.async's
//    zero-fill, its groups and the two completion times the emulator chooses between, and the
//    faults for addresses outside shared memory;
//  - build/gpu-tests/test_ptx (mk/gpu_tests.mk, nvcc, the real CUDA build) runs the layout
//    checks on the GPU (wgmma on Hopper only), so a flash kernel failing there can be told
//    from a wrong reading of a layout, and the emulator's model of it is checked against the
//    hardware's.
#ifndef PPTRAIN_REAL_DEVICE
#include "emu/emu.h"  // defines PPTRAIN_EMULATED
#endif

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "device.cuh"
#include "ptx.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

using namespace pptrain::kernels;
using ptx::u32;
#ifdef PPTRAIN_EMULATED
using pptrain::emu::KernelFault;
using pptrain::emu::Order;
using pptrain::emu::Stream;
#endif

namespace {

// An array the kernels read and write: host memory under the emulator, device memory (with
// copies in and out) on a GPU.
template <typename T>
class Array {
 public:
  explicit Array(std::vector<T> init) : host_(std::move(init)) {
#ifdef PPTRAIN_EMULATED
    dev_ = host_.data();
#else
    EXPECT_EQ(cudaMalloc(&dev_, bytes()), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(dev_, host_.data(), bytes(), cudaMemcpyHostToDevice), cudaSuccess);
#endif
  }
  explicit Array(size_t n) : Array(std::vector<T>(n)) {}
  ~Array() {
#ifndef PPTRAIN_EMULATED
    cudaFree(dev_);
#endif
  }
  Array(const Array&) = delete;
  Array& operator=(const Array&) = delete;
  T* dev() { return dev_; }
  const std::vector<T>& fetch() {
#ifndef PPTRAIN_EMULATED
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(host_.data(), dev_, bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
#endif
    return host_;
  }

 private:
  size_t bytes() const { return host_.size() * sizeof(T); }
  std::vector<T> host_;
  T* dev_ = nullptr;
};

// Runs body(ctx) in both fiber orders under the emulator, once on a GPU.
template <typename Body>
void each_order(Body body) {
#ifdef PPTRAIN_EMULATED
  for (Order order : {Order::forward, Order::reverse}) {
    Stream stream{order};
    body(LaunchContext{&stream});
  }
#else
  body(LaunchContext{});
#endif
}

// Whether this GPU runs the wgmma tests: always under the emulator; on a GPU where the cubin
// loaded for the device is sm_90 (mk/kernels.mk builds 90 as sm_90a).
template <typename Kernel>
bool runs_wgmma(Kernel kernel) {
#ifdef PPTRAIN_EMULATED
  (void)kernel;
  return true;
#else
  cudaFuncAttributes attr{};
  return cudaFuncGetAttributes(&attr, kernel) == cudaSuccess && attr.binaryVersion == 90;
#endif
}

// ---- the manual's formulas (PTX ISA 9.7.x "Matrix Fragments for mma.m16n8k16 with floating
// point type"), element i of a lane's fragment, groupID = lane >> 2, tig = lane % 4 ----------
__host__ __device__ int a_row(int lane, int i) { return (i < 2 || (i >= 4 && i < 6)) ? lane / 4 : lane / 4 + 8; }
__host__ __device__ int a_col(int lane, int i) { return (lane % 4) * 2 + (i & 1) + (i >= 4 ? 8 : 0); }
__host__ __device__ int b_row(int lane, int i) { return (lane % 4) * 2 + (i & 1) + (i >= 2 ? 8 : 0); }
__host__ __device__ int b_col(int lane, int /*i*/) { return lane / 4; }
__host__ __device__ int c_row(int lane, int i) { return i < 2 ? lane / 4 : lane / 4 + 8; }
__host__ __device__ int c_col(int lane, int i) { return (lane % 4) * 2 + (i & 1); }

// Two floats as a bf16 pair (low half: lo) by truncation: exact for the small integers these
// tests use, and the same on the host and the device.
__host__ __device__ u32 pair(float lo, float hi) {
  uint32_t a, b;
  std::memcpy(&a, &lo, 4);
  std::memcpy(&b, &hi, 4);
  return a >> 16 | (b & 0xffff0000u);
}

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

TEST(Ptx, MmaComputesTheProductInTheManualsFragmentLayout) {
  std::vector<float> a = small_ints(256, 1), b = small_ints(128, 2), c = small_ints(128, 3);
  each_order([&](const LaunchContext& ctx) {
    Array<float> da(a), db(b), dc(c), dd(128);
    launch(ctx, "mma", mma_kernel, dim3(1), dim3(32), 0, dd.dev(), (const float*)da.dev(), (const float*)db.dev(),
           (const float*)dc.dev());
    const std::vector<float>& d = dd.fetch();
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 8; ++n) {
        float ref = c[r * 8 + n];
        for (int k = 0; k < 16; ++k) ref += a[r * 16 + k] * b[k * 8 + n];
        ASSERT_EQ(d[r * 8 + n], ref) << "row " << r << " column " << n;
      }
  });
}

// ---- ldmatrix -----------------------------------------------------------------------------
// Four 8×8 matrices in shared memory whose rows are stored in a scrambled order (row i of
// matrix m at slot (5i + 3m) % 8 of its 8-row block, rows 24 elements apart), so only the
// per-lane row addresses can put them together; element (m, i, j) holds m·64 + i·8 + j.
constexpr int kLd = 24;
__host__ __device__ int slot(int m, int i) { return m * 8 + (5 * i + 3 * m) % 8; }

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

TEST(Ptx, LdmatrixGivesEachLaneTheManualsElements) {
  for (bool trans : {false, true}) {
    Array<u32> dout(128);
    launch(LaunchContext{}, "ldmatrix", ldmatrix_kernel, dim3(1), dim3(32), 0, dout.dev(), trans);
    const std::vector<u32>& out = dout.fetch();
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

TEST(Ptx, FragmentLoadersComposeIntoProducts) {
  std::vector<float> x = small_ints(256, 4), y = small_ints(256, 5);
  Array<float> dx(x), dy(y), drows(256), dcols(256);
  launch(LaunchContext{}, "loaders", loaders_kernel, dim3(1), dim3(32), 0, drows.dev(), dcols.dev(),
         (const float*)dx.dev(), (const float*)dy.dev());
  const std::vector<float>& rows = drows.fetch();
  const std::vector<float>& cols = dcols.fetch();
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      float xyt = 0, xy = 0;
      for (int k = 0; k < 16; ++k) xyt += x[i * 16 + k] * y[j * 16 + k], xy += x[i * 16 + k] * y[k * 16 + j];
      ASSERT_EQ(rows[i * 16 + j], xyt) << i << "," << j;
      ASSERT_EQ(cols[i * 16 + j], xy) << i << "," << j;
    }
}

#ifdef PPTRAIN_EMULATED
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

TEST(Ptx, CpAsyncLandsAtIssueInForwardOrderAndAtItsWaitInReverse) {
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

TEST(Ptx, AddressesOutsideSharedMemoryAreFaults) {
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

#endif  // PPTRAIN_EMULATED

// ---- wgmma (sm_90a) -------------------------------------------------------------------------
// D[64×N] = A[64×16]·B[16×N] for three operand placements, each tile written into shared
// memory by the manual's own layout formulas (PTX ISA "Shared Memory Matrix Layout", CuTe
// notation, in bf16 elements; swizzles applied to byte addresses of a 1024-byte aligned tile):
//  kInterleaved: A and B K-major, no swizzle: ((8,m),(8,2k)):((8,SBO),(1,LBO)), LBO 128 B, SBO 256 B
//  kSwizzled:    A and B K-major, 128B swizzle: Swizzle<3,4,3> o ((8,m),(8,2k)):((64,SBO),(1,8)), SBO 1024 B
//  kRegisters:   A in registers (mma.sync A layout per warp), B MN-major 128B swizzled, N = 128:
//                Swizzle<3,4,3> o ((8,8,2),(8,2)):((1,8,LBO),(64,SBO)), LBO 8192 B, SBO 1024 B
enum Placement { kInterleaved, kSwizzled, kRegisters };

__host__ __device__ uint32_t swizzle128(uint32_t byte) { return byte ^ (((byte >> 7) & 7) << 4); }

// Byte offset (from the 1024-aligned tile) of element (mn, k) of a K-major operand.
__host__ __device__ uint32_t k_major_byte(Placement p, int mn, int k) {
  if (p == kInterleaved) return uint32_t((mn % 8) * 8 + (mn / 8) * 128 + (k % 8) + (k / 8) * 64) * 2;
  return swizzle128(uint32_t((mn % 8) * 64 + (mn / 8) * 512 + k) * 2);
}
// Byte offset of element (k, n) of the MN-major B of kRegisters.
__host__ __device__ uint32_t mn_major_byte(int k, int n) {
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
  if (!runs_wgmma(wgmma_kernel<N>)) GTEST_SKIP() << "wgmma needs a Hopper GPU and a build for 90 (sm_90a)";
  std::vector<float> a = small_ints(64 * 16, 6), b = small_ints(16 * N, 7);
  each_order([&](const LaunchContext& ctx) {
    Array<float> da(a), db(b), dd(64 * N);
    launch(ctx, "wgmma", wgmma_kernel<N>, dim3(1), dim3(128), 8192 + 16384 + 1024, dd.dev(), (const float*)da.dev(),
           (const float*)db.dev(), p);
    const std::vector<float>& d = dd.fetch();
    for (int m = 0; m < 64; ++m)
      for (int n = 0; n < N; ++n) {
        float ref = 0.5f;
        for (int k = 0; k < 16; ++k) ref += a[m * 16 + k] * b[k * N + n];
        ASSERT_EQ(d[m * N + n], ref) << "placement " << p << " row " << m << " column " << n;
      }
  });
}

TEST(Ptx, WgmmaReadsKMajorInterleavedTiles) { check_wgmma<64>(kInterleaved); }
TEST(Ptx, WgmmaReads128ByteSwizzledKMajorTiles) { check_wgmma<64>(kSwizzled); }
TEST(Ptx, WgmmaTakesARegistersAndA128ByteSwizzledMnMajorB) { check_wgmma<128>(kRegisters); }

// ---- the bulk tensor copy (TMA) and mbarrier (sm_90) -------------------------------------------
// A [2][16][80] bf16 tensor (element (z, y, x) = z·10000 + y·100 + x, exact in bf16 up to 256,
// so values are taken modulo 251), a box of 64 × 24 rows at (8, −4, 1): rows −4..−1 and
// 16..19 lie outside and arrive as zeros. One thread issues the copy with arrive.expect_tx;
// all 128 wait on the barrier's phase 0, then read the tile by the manual's 128-byte
// swizzle (Swizzle<3,4,3> on byte addresses of a 1024-byte aligned tile).
constexpr int kTmaW = 80, kTmaT = 16, kTmaRows = 24;
__host__ __device__ float tma_value(int z, int y, int x) { return float((z * 10000 + y * 100 + x) % 251); }

__global__ void tma_kernel(float* out, const __grid_constant__ tma::Map map) {
  PPTRAIN_DYNAMIC_SHARED(unsigned char, raw);
  unsigned char* tile = raw + (1024 - wgmma::smem_address(raw) % 1024) % 1024;
  uint64_t* bar = reinterpret_cast<uint64_t*>(tile + kTmaRows * 128);
  if (threadIdx.x == 0) {
    tma::mbarrier_init(bar, 1);
    tma::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    tma::mbarrier_arrive_expect_tx(bar, kTmaRows * 128);
    tma::load_3d(tile, map, 8, -4, 1, bar);
  }
  tma::mbarrier_wait(bar, 0);
  for (int e = threadIdx.x; e < kTmaRows * 64; e += blockDim.x) {
    int r = e / 64, x = e % 64;
    bf16 v;
    std::memcpy(&v, tile + swizzle128(uint32_t(r * 128 + x * 2)), 2);
    out[e] = __bfloat162float(v);
  }
}

TEST(Ptx, TheCopyEngineMovesABoxWithZerosOutsideAndTheSwizzleWgmmaReads) {
#ifndef PPTRAIN_EMULATED
  int device = 0, major = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (major < 9) GTEST_SKIP() << "the bulk tensor copy needs compute capability 9.0 or later";
#endif
  std::vector<bf16> host(2 * kTmaT * kTmaW);
  for (int z = 0; z < 2; ++z)
    for (int y = 0; y < kTmaT; ++y)
      for (int x = 0; x < kTmaW; ++x) host[(z * kTmaT + y) * kTmaW + x] = __float2bfloat16_rn(tma_value(z, y, x));
  each_order([&](const LaunchContext& ctx) {
    Array<bf16> tensor(host);
    Array<float> dout(kTmaRows * 64);
    tma::Map map = tma::make_map_3d(tensor.dev(), kTmaW, kTmaT, 2, kTmaW * 2, kTmaT * kTmaW * 2, 64, kTmaRows);
    launch(ctx, "tma", tma_kernel, dim3(1), dim3(128), kTmaRows * 128 + 8 + 1024, dout.dev(), map);
    const std::vector<float>& out = dout.fetch();
    for (int r = 0; r < kTmaRows; ++r)
      for (int x = 0; x < 64; ++x) {
        int y = r - 4;
        float expect = y >= 0 && y < kTmaT ? tma_value(1, y, 8 + x) : 0.0f;
        ASSERT_EQ(out[r * 64 + x], expect) << "box row " << r << " column " << x;
      }
  });
}

#ifdef PPTRAIN_EMULATED
__global__ void too_many_arrivals_kernel() {
  PPTRAIN_STATIC_SHARED(uint64_t, bar, 1);
  if (threadIdx.x == 0) tma::mbarrier_init(bar, 1);
  __syncthreads();
  // Thread 0's arrival announces 16 bytes no copy brings, so the phase stays open and thread
  // 1's arrival is a second one in a phase of 1 (without the bytes it would open the next).
  if (threadIdx.x == 0) tma::mbarrier_arrive_expect_tx(bar, 16);
  __syncthreads();
  if (threadIdx.x == 1) tma::mbarrier_arrive(bar);
}

__global__ void wait_forever_kernel() {
  PPTRAIN_STATIC_SHARED(uint64_t, bar, 1);
  if (threadIdx.x == 0) tma::mbarrier_init(bar, 2);
  __syncthreads();
  if (threadIdx.x == 0) tma::mbarrier_arrive(bar);  // 1 of 2 arrivals
  tma::mbarrier_wait(bar, 0);
}

TEST(Ptx, MbarrierMisuseIsAFaultOrADeadlock) {
  try {
    launch(LaunchContext{}, "too_many", too_many_arrivals_kernel, dim3(1), dim3(2), 0);
    FAIL() << "no fault";
  } catch (const KernelFault& e) {
    EXPECT_NE(std::string(e.what()).find("mbarrier: 2 arrivals in a phase of 1"), std::string::npos) << e.what();
  }
  try {
    launch(LaunchContext{}, "wait_forever", wait_forever_kernel, dim3(1), dim3(32), 0);
    FAIL() << "no fault";
  } catch (const KernelFault& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock: threads 0-31 at mbarrier.try_wait (parity 0)"), std::string::npos)
        << e.what();
  }
}
#endif

}  // namespace
