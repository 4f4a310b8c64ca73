// The SIMT emulator itself: barriers, shared memory, warp collectives, atomics, index
// variables, fiber orders, and the faults it must report instead of hanging or passing.
#include "emu/emu.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "device.cuh"

using namespace pptrain::kernels;
using pptrain::emu::KernelFault;
using pptrain::emu::Order;
using pptrain::emu::Stream;

namespace {

constexpr Order kOrders[] = {Order::forward, Order::reverse};

// ---- test kernels ---------------------------------------------------------------------------

// Classic shared-memory tree reduction: sums[blockIdx.x] = Σ of the block's slice of x[n].
__global__ void tree_sum_kernel(float* sums, const float* x, int n, bool with_barriers) {
  PPTRAIN_STATIC_SHARED(float, partial, 256);
  int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  partial[t] = i < n ? x[i] : 0.0f;
  if (with_barriers) __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (t < stride) partial[t] += partial[t + stride];
    if (with_barriers) __syncthreads();
  }
  if (t == 0) sums[blockIdx.x] = partial[0];
}

// out[i] = x[i-1] through shared memory (0 for the first thread): a thread reads what its
// left neighbour wrote, so without the barrier only the reverse order exposes the race.
__global__ void shift_right_kernel(float* out, const float* x, bool with_barrier) {
  PPTRAIN_STATIC_SHARED(float, staged, 128);
  int t = threadIdx.x;
  staged[t] = x[t];
  if (with_barrier) __syncthreads();
  out[t] = t > 0 ? staged[t - 1] : 0.0f;
}

// Per warp: the xor-butterfly sum, a shfl_down tree sum (valid in lane 0), an inclusive
// shfl_up scan and a broadcast of lane 5 within segments of 8 lanes.
__global__ void shuffle_kernel(float* xor_sum, float* down_sum, float* scan, float* bcast,
                               const float* x) {
  int i = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x % 32;
  float v = x[i];
  xor_sum[i] = warp_reduce(v, Sum{});
  float d = v;
  for (int offset = 16; offset > 0; offset /= 2) d += __shfl_down_sync(kFullMask, d, offset);
  down_sum[i] = d;
  float s = v;
  for (int offset = 1; offset < 32; offset *= 2) {
    float up = __shfl_up_sync(kFullMask, s, offset);
    if (lane >= offset) s += up;
  }
  scan[i] = s;
  bcast[i] = __shfl_sync(kFullMask, v, 5, 8);
}

__global__ void vote_kernel(unsigned* ballots, int* any, int* all, const int* predicate) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  ballots[i] = __ballot_sync(kFullMask, predicate[i]);
  any[i] = __any_sync(kFullMask, predicate[i]);
  all[i] = __all_sync(kFullMask, predicate[i]);
}

// Sum over a block with the shared block_reduce helper, then a max on the same scratch.
__global__ void block_reduce_kernel(float* sums, float* maxes, const float* x, int n) {
  PPTRAIN_STATIC_SHARED(float, scratch, 32);
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = i < n ? x[i] : 0.0f;
  float s = block_reduce(v, 0.0f, scratch, Sum{});
  float m = block_reduce(i < n ? v : -INFINITY, -INFINITY, scratch, Max{});
  if (threadIdx.x == 0) {
    sums[blockIdx.x] = s;
    maxes[blockIdx.x] = m;
  }
}

// block_reduce without its leading barrier, called twice: a fast warp publishes its second
// partial into scratch while a slower warp still reads the first ones.
__device__ float racy_block_sum(float v, float* scratch) {
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_reduce(v, Sum{});
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_reduce(lane < int(blockDim.x / 32) ? scratch[lane] : 0.0f, Sum{});
}
__global__ void racy_two_sums_kernel(float* out, const float* x) {
  PPTRAIN_STATIC_SHARED(float, scratch, 32);
  float a = racy_block_sum(x[threadIdx.x], scratch);
  float b = racy_block_sum(2.0f * x[threadIdx.x], scratch);
  out[threadIdx.x] = a + b;
}

// Divergent halves of each warp shuffle within their own half-warp masks.
__global__ void half_warp_kernel(float* out, const float* x) {
  int lane = threadIdx.x % 32;
  float v = x[threadIdx.x];
  if (lane < 16) {
    for (int offset = 8; offset > 0; offset /= 2) v += __shfl_xor_sync(0x0000ffffu, v, offset);
  } else {
    v = __shfl_sync(0xffff0000u, v, 16 + (lane + 1) % 16);  // rotate within the upper half
  }
  __syncwarp();
  out[threadIdx.x] = v;
}

// Each thread writes its global linear index and its built-in variables.
__global__ void index_kernel(int* ids, unsigned* dims) {
  unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  ids[block * threads + thread] = int(block * threads + thread);
  if (block == 0 && thread == 0) {
    unsigned d[6] = {blockDim.x, blockDim.y, blockDim.z, gridDim.x, gridDim.y, gridDim.z};
    for (int k = 0; k < 6; ++k) dims[k] = d[k];
  }
}

__global__ void atomic_kernel(int* counter, int* max_id, int* order) {
  atomicAdd(counter, 1);
  atomicMax(max_id, int(blockIdx.x * blockDim.x + threadIdx.x));
  if (threadIdx.x == 0) order[blockIdx.x] = atomicAdd(counter + 1, 1);  // block start order
}

// Dynamic shared memory: each thread writes its slot, and after the barrier reads the slot
// of its mirror thread. `before` records what the slot held before the write.
__global__ void dynamic_shared_kernel(float* out, float* before) {
  PPTRAIN_DYNAMIC_SHARED(float, slots);
  int t = threadIdx.x;
  before[blockIdx.x * blockDim.x + t] = slots[t];
  slots[t] = float(blockIdx.x * 1000 + t);
  __syncthreads();
  out[blockIdx.x * blockDim.x + t] = slots[blockDim.x - 1 - t];
}

__global__ void divergent_barrier_kernel(float* out) {
  if (threadIdx.x < 16) __syncthreads();
  out[threadIdx.x] = 1.0f;
}

__global__ void partial_shuffle_kernel(float* out) {
  float v = float(threadIdx.x);
  if (threadIdx.x % 32 < 20) v = warp_reduce(v, Sum{});  // full mask, 12 lanes never arrive
  out[threadIdx.x] = v;
}

__global__ void mismatched_collectives_kernel(float* out) {
  float v = float(threadIdx.x);
  if (threadIdx.x % 2) v = __shfl_xor_sync(kFullMask, v, 1);
  else v = float(__ballot_sync(kFullMask, 1));
  out[threadIdx.x] = v;
}

__global__ void misaligned_kernel(float* out, const float* x) {
  Pack128<float> p = load_pack(x + 1);
  out[threadIdx.x] = p.v[0];
}

std::vector<float> iota_floats(size_t n, float start = 0.0f) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

}  // namespace

TEST(Emulator, BlockReductionMatchesSerialSum) {
  const int n = 1000, block = 256, blocks = ceil_div(n, block);
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = float((i * 37) % 101) - 50.0f;  // exact in fp32
  for (Order order : kOrders) {
    Stream stream{order};
    std::vector<float> sums(blocks, -1.0f);
    launch({&stream}, "tree_sum", tree_sum_kernel, dim3(blocks), dim3(block), 0, sums.data(),
           x.data(), n, true);
    for (int b = 0; b < blocks; ++b) {
      float expect = 0;
      for (int i = b * block; i < std::min(n, (b + 1) * block); ++i) expect += x[i];
      EXPECT_EQ(sums[b], expect) << "block " << b;
    }
    EXPECT_EQ(stream.launches, 1);
    EXPECT_EQ(stream.blocks, blocks);
  }
}

TEST(Emulator, MissingBarrierInTreeReductionIsCaughtByForwardOrder) {
  const int n = 256;
  std::vector<float> x = iota_floats(n), sum(1);
  Stream forward{Order::forward};
  launch({&forward}, "tree_sum", tree_sum_kernel, dim3(1), dim3(n), 0, sum.data(), x.data(), n,
         false);
  EXPECT_NE(sum[0], float(n * (n - 1) / 2));  // thread 0 summed before the others wrote
}

TEST(Emulator, MissingBarrierIsCaughtByReverseOrder) {
  const int n = 128;
  std::vector<float> x = iota_floats(n, 1.0f), expect(n);
  for (int i = 1; i < n; ++i) expect[i] = x[i - 1];
  for (bool barrier : {true, false}) {
    for (Order order : kOrders) {
      std::vector<float> out(n, -1.0f);
      Stream stream{order};
      launch({&stream}, "shift_right", shift_right_kernel, dim3(1), dim3(n), 0, out.data(),
             x.data(), barrier);
      bool correct = out == expect;
      // Forward order runs thread t-1 before thread t, hiding the race; reverse does not.
      EXPECT_EQ(correct, barrier || order == Order::forward)
          << (barrier ? "with" : "without") << " barrier, "
          << (order == Order::forward ? "forward" : "reverse");
    }
  }
}

TEST(Emulator, ShuffleReductionsAndScans) {
  const int block = 64, blocks = 3, n = block * blocks;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = float((i * 7) % 13);
  for (Order order : kOrders) {
    Stream stream{order};
    std::vector<float> xs(n), down(n), scan(n), bcast(n);
    launch({&stream}, "shuffle", shuffle_kernel, dim3(blocks), dim3(block), 0, xs.data(),
           down.data(), scan.data(), bcast.data(), x.data());
    for (int w = 0; w < n / 32; ++w) {
      float total = 0, prefix = 0;
      for (int l = 0; l < 32; ++l) total += x[w * 32 + l];
      for (int l = 0; l < 32; ++l) {
        int i = w * 32 + l;
        prefix += x[i];
        EXPECT_EQ(xs[i], total) << i;
        EXPECT_EQ(scan[i], prefix) << i;
        EXPECT_EQ(bcast[i], x[w * 32 + (l / 8) * 8 + 5]) << i;
      }
      EXPECT_EQ(down[w * 32], total) << "lane 0 of warp " << w;
    }
  }
}

TEST(Emulator, MissingBarrierBetweenReductionsIsCaughtByWarpSkew) {
  // Warps run as far as they can one after another, so the race shows in some order.
  const int n = 128;
  std::vector<float> x = iota_floats(n);
  float expect = 3.0f * float(n * (n - 1) / 2);
  bool all_correct = true;
  for (Order order : kOrders) {
    std::vector<float> out(n);
    Stream stream{order};
    launch({&stream}, "racy_two_sums", racy_two_sums_kernel, dim3(1), dim3(n), 0, out.data(), x.data());
    for (float v : out) all_correct = all_correct && v == expect;
  }
  EXPECT_FALSE(all_correct);
}

TEST(Emulator, PartialMaskShufflesInDivergentBranches) {
  const int n = 64;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = float(i * i % 17);
  for (Order order : kOrders) {
    std::vector<float> out(n);
    Stream stream{order};
    launch({&stream}, "half_warp", half_warp_kernel, dim3(1), dim3(n), 0, out.data(), x.data());
    for (int w = 0; w < n / 32; ++w) {
      float low = 0;
      for (int l = 0; l < 16; ++l) low += x[w * 32 + l];
      for (int l = 0; l < 32; ++l) {
        float expect = l < 16 ? low : x[w * 32 + 16 + (l + 1) % 16];
        EXPECT_EQ(out[w * 32 + l], expect) << "lane " << l << " of warp " << w;
      }
    }
  }
}

TEST(Emulator, BallotAnyAll) {
  const int n = 96;
  std::vector<int> predicate(n);
  for (int i = 0; i < n; ++i) predicate[i] = i < 32 ? (i % 3 == 0) : i < 64 ? 1 : 0;
  std::vector<unsigned> ballots(n);
  std::vector<int> any(n), all(n);
  Stream stream{Order::reverse};
  launch({&stream}, "vote", vote_kernel, dim3(1), dim3(n), 0, ballots.data(), any.data(),
         all.data(), predicate.data());
  unsigned first = 0;
  for (int l = 0; l < 32; l += 3) first |= 1u << l;
  EXPECT_EQ(ballots[0], first);
  EXPECT_EQ(ballots[31], first);
  EXPECT_EQ(ballots[40], 0xffffffffu);
  EXPECT_EQ(ballots[70], 0u);
  EXPECT_EQ(any[5], 1);
  EXPECT_EQ(all[5], 0);
  EXPECT_EQ(all[33], 1);
  EXPECT_EQ(any[90], 0);
}

TEST(Emulator, BlockReduceHelperSumAndMax) {
  const int n = 1000, block = 224, blocks = ceil_div(n, block);  // 7 warps, ragged last block
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = float((i * 29) % 97) - 40.0f;
  for (Order order : kOrders) {
    Stream stream{order};
    std::vector<float> sums(blocks), maxes(blocks);
    launch({&stream}, "block_reduce", block_reduce_kernel, dim3(blocks), dim3(block), 0,
           sums.data(), maxes.data(), x.data(), n);
    for (int b = 0; b < blocks; ++b) {
      float s = 0, m = -INFINITY;
      for (int i = b * block; i < std::min(n, (b + 1) * block); ++i) s += x[i], m = std::max(m, x[i]);
      EXPECT_EQ(sums[b], s);
      EXPECT_EQ(maxes[b], m);
    }
  }
}

TEST(Emulator, IndexVariablesIn3D) {
  dim3 grid(3, 2, 2), block(4, 3, 5);  // 60 threads: two warps, the second partial
  size_t total = 12 * 60;
  std::vector<int> ids(total, -1);
  std::vector<unsigned> dims(6);
  launch({}, "index", index_kernel, grid, block, 0, ids.data(), dims.data());
  for (size_t i = 0; i < total; ++i) ASSERT_EQ(ids[i], int(i));
  EXPECT_EQ(dims, (std::vector<unsigned>{4, 3, 5, 3, 2, 2}));
}

TEST(Emulator, AtomicsAndBlockOrder) {
  for (Order order : kOrders) {
    Stream stream{order};
    std::vector<int> counter(2, 0), max_id(1, -1), started(5, -1);
    launch({&stream}, "atomic", atomic_kernel, dim3(5), dim3(100), 0, counter.data(),
           max_id.data(), started.data());
    EXPECT_EQ(counter[0], 500);
    EXPECT_EQ(max_id[0], 499);
    for (int b = 0; b < 5; ++b) EXPECT_EQ(started[b], order == Order::forward ? b : 4 - b);
  }
}

TEST(Emulator, DynamicSharedMemoryIsPerBlockAndPoisoned) {
  const int block = 64, blocks = 3;
  std::vector<float> out(block * blocks), before(block * blocks);
  launch({}, "dynamic_shared", dynamic_shared_kernel, dim3(blocks), dim3(block),
         block * sizeof(float), out.data(), before.data());
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < block; ++t) {
      EXPECT_EQ(out[b * block + t], float(b * 1000 + block - 1 - t));
      EXPECT_TRUE(std::isnan(before[b * block + t])) << "shared memory must start as garbage";
    }
}

TEST(Emulator, StaticSharedMemoryIsPoisonedBetweenBlocks) {
  // Without its first barrier the tree reduction reads partial[] slots nobody wrote in this
  // block: they hold the poison (NaN), never the previous block's values.
  std::vector<float> x = iota_floats(512), sums(2);
  Stream stream{Order::forward};
  launch({&stream}, "tree_sum", tree_sum_kernel, dim3(2), dim3(256), 0, sums.data(), x.data(),
         512, false);
  EXPECT_TRUE(std::isnan(sums[0]) && std::isnan(sums[1]));
}

// A function template's static shared memory (the case a linker section could not cover):
// every block of every launch starts with the poison, never the values of an earlier block.
template <int kN>
__global__ void read_then_write_shared_kernel(float* out) {
  PPTRAIN_STATIC_SHARED(float, s, kN);
  out[blockIdx.x * kN + threadIdx.x] = s[threadIdx.x];
  __syncthreads();
  s[threadIdx.x] = 1.0f;
}

TEST(Emulator, StaticSharedMemoryOfTemplatesIsPoisonedInEveryBlockAndLaunch) {
  std::vector<float> out(2 * 32);
  for (int launch_index = 0; launch_index < 2; ++launch_index) {
    launch({}, "read_then_write", read_then_write_shared_kernel<32>, dim3(2), dim3(32), 0, out.data());
    for (float v : out) EXPECT_TRUE(std::isnan(v)) << "launch " << launch_index;
  }
}

__global__ void too_much_shared_kernel(float* out) {
  PPTRAIN_STATIC_SHARED(float, s, 13 * 1024);  // 52 KiB
  out[0] = s[0];
}

TEST(Emulator, StaticSharedMemoryOver48KiBIsAFault) {
  float out[1];
  try {
    launch({}, "too_much_shared", too_much_shared_kernel, dim3(1), dim3(32), 0, out);
    FAIL() << "no fault";
  } catch (const KernelFault& e) {
    EXPECT_NE(std::string(e.what()).find("static shared 's' of 53248 bytes"), std::string::npos) << e.what();
  }
}

TEST(Emulator, DivergentBarrierIsReportedAsDeadlock) {
  std::vector<float> out(64);
  try {
    launch({}, "divergent_barrier", divergent_barrier_kernel, dim3(1), dim3(64), 0, out.data());
    FAIL() << "no fault";
  } catch (const KernelFault& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("divergent_barrier"), std::string::npos) << m;
    EXPECT_NE(m.find("deadlock"), std::string::npos) << m;
    EXPECT_NE(m.find("threads 0-15 at __syncthreads"), std::string::npos) << m;
    EXPECT_NE(m.find("threads 16-63 exited"), std::string::npos) << m;
  }
}

TEST(Emulator, ShuffleWithMissingLanesIsReported) {
  std::vector<float> out(64);
  try {
    launch({}, "partial_shuffle", partial_shuffle_kernel, dim3(1), dim3(64), 0, out.data());
    FAIL() << "no fault";
  } catch (const KernelFault& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("deadlock"), std::string::npos) << m;
    EXPECT_NE(m.find("threads 0-19 at __shfl_xor_sync (mask 0xffffffff)"), std::string::npos) << m;
  }
}

TEST(Emulator, MismatchedCollectivesAreReported) {
  std::vector<float> out(32);
  EXPECT_THROW(launch({}, "mismatched", mismatched_collectives_kernel, dim3(1), dim3(32), 0,
                      out.data()),
               KernelFault);
}

TEST(Emulator, InvalidLaunchesAndMisalignedAccessAreReported) {
  std::vector<float> out(2048), x(64);
  EXPECT_THROW(launch({}, "too_big", index_kernel, dim3(1), dim3(1025), 0, (int*)nullptr,
                      (unsigned*)nullptr),
               KernelFault);
  EXPECT_THROW(launch({}, "empty", index_kernel, dim3(0), dim3(32), 0, (int*)nullptr,
                      (unsigned*)nullptr),
               KernelFault);
  // An sm_90 block takes at most 227 KiB of shared memory (launch() opts in above 48 KiB).
  EXPECT_THROW(launch({}, "shared", dynamic_shared_kernel, dim3(1), dim3(32), 228 * 1024,
                      out.data(), out.data()),
               KernelFault);
  alignas(16) float aligned[8] = {};
  EXPECT_THROW(launch({}, "misaligned", misaligned_kernel, dim3(1), dim3(32), 0, out.data(),
                      static_cast<const float*>(aligned)),
               KernelFault);
  // A launch after faults runs normally (fibers and stacks are reset).
  std::vector<float> sums(1);
  std::vector<float> y = iota_floats(256);
  launch({}, "tree_sum", tree_sum_kernel, dim3(1), dim3(256), 0, sums.data(), y.data(), 256, true);
  EXPECT_EQ(sums[0], 256.0f * 255.0f / 2.0f);
}

TEST(Emulator, Bf16RoundsToNearestEven) {
  auto bits = [](float f) { return __float2bfloat16_rn(f).bits; };
  auto from_bits = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  EXPECT_EQ(bits(1.0f), 0x3f80);
  EXPECT_EQ(bits(from_bits(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(bits(from_bits(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(bits(from_bits(0x3f808001u)), 0x3f81);  // above the tie
  EXPECT_EQ(bits(from_bits(0x7f7fffffu)), 0x7f80);  // max float overflows to inf
  EXPECT_EQ(bits(-INFINITY), 0xff80);
  EXPECT_TRUE(std::isnan(__bfloat162float(__float2bfloat16_rn(NAN))));
  // For many values, the result is the nearer of the two bf16 neighbours (ties to even).
  for (uint32_t u = 0x00010000u; u < 0x7f000000u; u += 0x00012345u) {
    float f = from_bits(u);
    float lo = from_bits(u & 0xffff0000u), hi = from_bits((u & 0xffff0000u) + 0x10000u);
    float r = __bfloat162float(__float2bfloat16_rn(f));
    double dlo = double(f) - lo, dhi = double(hi) - f;
    float expect = dlo < dhi ? lo : dhi < dlo ? hi : (((u >> 16) & 1) ? hi : lo);
    ASSERT_EQ(r, expect) << std::hex << u;
  }
}
