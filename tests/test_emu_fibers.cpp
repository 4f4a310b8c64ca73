// The emulator's fibers: guarded stacks deep enough for large frames, a context switch that
// keeps every thread's state across hundreds of barriers, and an exception thrown deep in a
// fiber that comes out of the launch with its own message.
#include "emu/emu.h"

#include <gtest/gtest.h>

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

// Uses 12 KiB of fiber stack and recursion through a device function.
__device__ float deep_sum(const float* x, int depth) {
  float local[1024];
  for (int k = 0; k < 1024; ++k) local[k] = x[k % 4] + float(depth);
  float s = 0;
  for (int k = 0; k < 1024; ++k) s += local[k];
  return depth == 0 ? s : s + deep_sum(x, depth - 1);
}
__global__ void deep_stack_kernel(float* out, const float* x) { out[threadIdx.x] = deep_sum(x, 2); }

// Keeps many values live across `rounds` pairs of barriers: integers (callee-saved registers
// when the compiler can), a double and a float computed before each barrier and used after it
// (spilled to the fiber's stack: no vector register survives a call), and a local array. Each
// round also reads the left neighbour's value through shared memory.
constexpr int kCarryThreads = 96;
__global__ void carried_state_kernel(long long* out_int, double* out_double, float* out_float,
                                     int* out_local, int rounds) {
  PPTRAIN_STATIC_SHARED(int, ring, kCarryThreads);
  int t = threadIdx.x, n = blockDim.x, salt = int(blockIdx.x) * 1000;
  long long a = t + 1 + salt, b = 3 * t + 7, c = 11, e = t * t;
  int local[8];
  for (int j = 0; j < 8; ++j) local[j] = t * 8 + j;
  double d = 0.5 * t;
  float f = 0.25f * float(t);
  for (int r = 0; r < rounds; ++r) {
    double d_before = d + 0.125 * r;
    float f_before = f + 0.5f * float(r);
    ring[t] = int(a % 997);
    __syncthreads();
    int left = ring[(t + n - 1) % n];
    __syncthreads();
    a = (a * 31 + local[r % 8] + left) % 1000003;
    b ^= a << 1;
    c += b & 0xff;
    e += r * t;
    local[r % 8] += int(a & 0xf);
    d = d_before + double(a % 4) * 0.25;
    f = f_before - float(b % 8);
  }
  int i = blockIdx.x * n + t;
  out_int[i] = a + b + c + e;
  out_double[i] = d;
  out_float[i] = f;
  for (int j = 0; j < 8; ++j) out_local[i * 8 + j] = local[j];
}

// A chain of device calls; each level passes a barrier and a shuffle, and at the deepest
// level one thread throws once the others have switched there a few times.
__attribute__((noinline)) __device__ float throwing_chain(const float* x, int depth,
                                                          int thrower) {
  float frame[64];
  for (int k = 0; k < 64; ++k) frame[k] = x[k % 4] * float(depth + 1);
  __syncthreads();
  float v = __shfl_xor_sync(kFullMask, frame[threadIdx.x % 64], 1);
  if (depth > 0) return v + throwing_chain(x, depth - 1, thrower);
  for (int round = 0; round < 4; ++round) {
    __syncthreads();
    if (int(threadIdx.x) == thrower && round == 3)
      throw std::runtime_error("thread " + std::to_string(thrower) + " gave up at depth " +
                               std::to_string(depth) + " after round " + std::to_string(round));
  }
  return v;
}
__global__ void throwing_kernel(float* out, const float* x, int thrower) {
  out[threadIdx.x] = throwing_chain(x, 5, thrower);
}

}  // namespace

TEST(Emulator, FiberStacksHoldLargeFrames) {
  std::vector<float> out(64), x = {1, 2, 3, 4};
  launch({}, "deep_stack", deep_stack_kernel, dim3(1), dim3(64), 0, out.data(), x.data());
  // depth d contributes 1024·2.5 + 1024·d for d = 2, 1, 0.
  EXPECT_EQ(out[63], 3 * 1024 * 2.5f + 1024 * 3.0f);
}

TEST(Emulator, StateCarriedAcrossManyBarriersSurvivesTheSwitches) {
  const int rounds = 200, blocks = 2, n = kCarryThreads * blocks;
  // Host reference: the same rounds for every thread of each block in lockstep.
  std::vector<long long> a(n), b(n), c(n), e(n), expect_int(n);
  std::vector<double> d(n);
  std::vector<float> f(n);
  std::vector<int> local(n * 8);
  for (int i = 0; i < n; ++i) {
    int t = i % kCarryThreads;
    a[i] = t + 1 + (i / kCarryThreads) * 1000, b[i] = 3 * t + 7, c[i] = 11, e[i] = t * t;
    d[i] = 0.5 * t, f[i] = 0.25f * float(t);
    for (int j = 0; j < 8; ++j) local[i * 8 + j] = t * 8 + j;
  }
  for (int r = 0; r < rounds; ++r) {
    std::vector<int> ring(n);
    for (int i = 0; i < n; ++i) ring[i] = int(a[i] % 997);
    for (int i = 0; i < n; ++i) {
      int t = i % kCarryThreads, base = i - t;
      int left = ring[base + (t + kCarryThreads - 1) % kCarryThreads];
      a[i] = (a[i] * 31 + local[i * 8 + r % 8] + left) % 1000003;
      b[i] ^= a[i] << 1;
      c[i] += b[i] & 0xff;
      e[i] += r * t;
      local[i * 8 + r % 8] += int(a[i] & 0xf);
      d[i] = d[i] + 0.125 * r + double(a[i] % 4) * 0.25;
      f[i] = f[i] + 0.5f * float(r) - float(b[i] % 8);
    }
  }
  for (int i = 0; i < n; ++i) expect_int[i] = a[i] + b[i] + c[i] + e[i];
  for (Order order : kOrders) {
    Stream stream{order};
    std::vector<long long> out_int(n);
    std::vector<double> out_double(n);
    std::vector<float> out_float(n);
    std::vector<int> out_local(n * 8);
    launch({&stream}, "carried_state", carried_state_kernel, dim3(blocks), dim3(kCarryThreads),
           0, out_int.data(), out_double.data(), out_float.data(), out_local.data(), rounds);
    const char* name = order == Order::forward ? "forward" : "reverse";
    EXPECT_EQ(out_int, expect_int) << name;
    EXPECT_EQ(out_double, d) << name;
    EXPECT_EQ(out_float, f) << name;
    EXPECT_EQ(out_local, local) << name;
    // Every fiber is resumed once to start and once after each barrier: two switches each.
    EXPECT_EQ(stream.switches, 2LL * n * (2 * rounds + 1)) << name;
  }
}

TEST(Emulator, ExceptionDeepInAFiberPropagatesWithItsMessage) {
  std::vector<float> out(64), x = {1, 2, 3, 4};
  for (Order order : kOrders) {
    Stream stream{order};
    try {
      launch({&stream}, "throwing", throwing_kernel, dim3(1), dim3(64), 0, out.data(), x.data(), 37);
      FAIL() << "no exception";
    } catch (const KernelFault& e) {
      FAIL() << "a kernel's own exception must not become a KernelFault: " << e.what();
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "thread 37 gave up at depth 0 after round 3");
    }
    // 6 barriers down the chain and 4 at the bottom: every fiber switched many times first.
    EXPECT_GT(stream.switches, 2LL * 64 * 9);
  }
  // The fibers abandoned mid-kernel do not disturb the next launch.
  launch({}, "deep_stack", deep_stack_kernel, dim3(1), dim3(64), 0, out.data(), x.data());
  EXPECT_EQ(out[63], 3 * 1024 * 2.5f + 1024 * 3.0f);
}
