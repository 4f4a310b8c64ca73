// The emulator's race checks for warpgroup MMA (emu/block_async.cpp): a wgmma reads its shared operands
// at some point between its issue and the wgmma.wait_group that covers it, so a write to
// them in that window -- a stage released before the wait and refilled by the copy engine,
// or a plain store -- can change what the product reads on a GPU. The flash kernels' rings
// of stages (kernels/flash_attention_sm90.cuh) depend on releasing a stage only after the
// wait; nothing in their arithmetic shows the race under the emulator, so these checks do.
//
// The kernel below is that ring cut to its core: one consumer warpgroup multiplies two B
// tiles, which one producer thread brings through a single stage with the bulk tensor copy:
// full / empty barriers as in the flash kernels. Emulator only: on a GPU the race is silent.
#include "emu/emu.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "device.cuh"
#include "launch.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

using namespace pptrain::kernels;
using pptrain::emu::KernelFault;
using pptrain::emu::Order;
using pptrain::emu::Stream;

namespace {

enum Mode {
  kCorrect,       // release the stage after the wait for the product that reads it
  kEarlyRelease,  // release it before: the producer refills it while the product is in flight
  kStoreInFlight  // a thread writes into the product's A tile before the wait
};

constexpr int kN = 64;              // the product's N: D[64×64] = A[64×16]·B[16×64]
constexpr int kTileBytes = 64 * 128;  // 64 rows of 64 bf16 (128 bytes, one swizzle row)

// Byte offset of element (mn, k) in a K-major tile with the 128-byte swizzle (the layout the
// copy engine writes a 64 × 64 box in, and descriptor_sw128(addr, 16, 1024) reads).
uint32_t swizzled(int mn, int k) {
  uint32_t byte = uint32_t(mn * 64 + k) * 2;
  return byte ^ (((byte >> 7) & 7) << 4);
}

// d[tile][64][64] = A · B_tile for tiles 0 and 1 of `b` ([2][64 n][64 k], k < 16 used).
__global__ void stage_ring_kernel(float* d, const float* a, const __grid_constant__ tma::Map map, Mode mode) {
  PPTRAIN_DYNAMIC_SHARED(unsigned char, raw);
  unsigned char* smem = raw + (1024 - wgmma::smem_address(raw) % 1024) % 1024;
  unsigned char* a_tile = smem;               // kTileBytes (k < 16 used)
  unsigned char* stage = smem + kTileBytes;   // kTileBytes
  uint64_t* full = reinterpret_cast<uint64_t*>(stage + kTileBytes);
  uint64_t* empty = full + 1;
  if (threadIdx.x == 0) {
    tma::mbarrier_init(full, 1);
    tma::mbarrier_init(empty, 128);
    tma::fence_barrier_init();
  }
  for (int e = int(threadIdx.x); e < 64 * 16; e += int(blockDim.x)) {
    bf16 v = __float2bfloat16_rn(a[e]);
    std::memcpy(a_tile + swizzled(e / 16, e % 16), &v, 2);
  }
  wgmma::fence_proxy_async();
  __syncthreads();
  if (threadIdx.x >= 128) {  // the producer warp; one thread issues the copies
    if (threadIdx.x != 128) return;
    for (int tile = 0; tile < 2; ++tile) {
      if (tile > 0) tma::mbarrier_wait(empty, 0);  // tile 0 released
      tma::mbarrier_arrive_expect_tx(full, kTileBytes);
      tma::load_3d(stage, map, 0, 0, tile, full);
    }
    return;
  }
  int l = int(threadIdx.x), w = l / 32, g = l % 32 / 4, t = l % 4;
  uint64_t da = wgmma::descriptor_sw128(wgmma::smem_address(a_tile), 16, 1024);
  uint64_t db = wgmma::descriptor_sw128(wgmma::smem_address(stage), 16, 1024);
  for (int tile = 0; tile < 2; ++tile) {
    float acc[kN / 2] = {};
    tma::mbarrier_wait(full, tile);
    wgmma::fence();
    wgmma::mma_ss<kN>(acc, da, db, false);
    wgmma::commit();
    if (tile == 0 && mode == kEarlyRelease) tma::mbarrier_arrive(empty);
    if (tile == 0 && mode == kStoreInFlight && l == 5) a_tile[swizzled(3, 7)] ^= 0x40;
    wgmma::wait<0>();
    if (tile == 0 && mode != kEarlyRelease) tma::mbarrier_arrive(empty);
    for (int e = 0; e < kN / 2; ++e)
      d[(tile * 64 + 16 * w + g + 8 * (e % 4 / 2)) * kN + 8 * (e / 4) + 2 * t + e % 2] = acc[e];
  }
}

struct Ring {
  std::vector<float> a = std::vector<float>(64 * 16);
  std::vector<bf16> b = std::vector<bf16>(2 * 64 * 64);
  std::vector<float> d = std::vector<float>(2 * 64 * kN);
  Ring() {
    // Small integers: the products are exact, so the check is equality.
    for (int e = 0; e < 64 * 16; ++e) a[e] = float((e * 7) % 9 - 4);
    for (int e = 0; e < 2 * 64 * 64; ++e) b[e] = __float2bfloat16_rn(float((e * 5 + e / 4096) % 7 - 3));
  }
  void run(Order order, Mode mode) {
    Stream stream{order};
    tma::Map map = tma::make_map_3d(b.data(), 64, 64, 2, 64 * 2, 64 * 64 * 2, 64, 64);
    launch(LaunchContext{&stream}, "stage_ring", stage_ring_kernel, dim3(1), dim3(160), 2 * kTileBytes + 16 + 1024,
           d.data(), (const float*)a.data(), map, mode);
  }
  float expected(int tile, int m, int n) const {
    float sum = 0.0f;
    for (int k = 0; k < 16; ++k) sum += a[m * 16 + k] * __bfloat162float(b[(tile * 64 + n) * 64 + k]);
    return sum;
  }
};

TEST(EmuRaces, AStageReleasedAfterTheWaitIsRefilledSafelyInBothOrders) {
  for (Order order : {Order::forward, Order::reverse}) {
    Ring ring;
    ring.run(order, kCorrect);
    for (int tile = 0; tile < 2; ++tile)
      for (int m = 0; m < 64; ++m)
        for (int n = 0; n < kN; ++n)
          ASSERT_EQ(ring.d[(tile * 64 + m) * kN + n], ring.expected(tile, m, n))
              << "order " << int(order) << " tile " << tile << " row " << m << " column " << n;
  }
}

TEST(EmuRaces, AStageReleasedBeforeTheWaitForItsProductIsAFault) {
  // Forward order completes each product at its issue, before anything else runs: no race
  // can show there. In reverse order the wait lets the producer run first, and its copy is
  // issued over B while the product is still in flight.
  Ring ring;
  try {
    ring.run(Order::reverse, kEarlyRelease);
    FAIL() << "no fault";
  } catch (const KernelFault& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("cp.async.bulk.tensor into shared memory at dynamic shared byte"), std::string::npos) << what;
    EXPECT_NE(what.find("that a wgmma of warpgroup 0 reads and no wgmma.wait_group has covered yet"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("thread (128,0,0)"), std::string::npos) << what;  // the producer's issue
  }
}

TEST(EmuRaces, AStoreIntoAnOperandBeforeTheWaitIsAFault) {
  Ring ring;
  try {
    ring.run(Order::reverse, kStoreInFlight);
    FAIL() << "no fault";
  } catch (const KernelFault& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("read by a wgmma of warpgroup 0, was written after the wgmma was issued"), std::string::npos)
        << what;
  }
}

}  // namespace
