// SIMT emulator: lets g++ compile the unchanged kernels/*.cu sources and run their launches
// on the CPU, so kernels are tested without a GPU (the emulated build does
// `g++ -x c++ -include emu/emu.h`): the kernel tests and, with the shims beside it,
// the emulated cuda backend (its tests and pptrain-emu).
//
// Execution model (see block_runner.h): the blocks of a grid run one after another; the threads
// of a block run as cooperative fibers (a hand-written context switch on x86-64, ucontext
// elsewhere) that switch only at synchronisation points. `__syncthreads` waits for every
// thread of the block; warp collectives (`__shfl_*_sync`, `__ballot_sync`, `__syncwarp`)
// wait for every lane of their mask, and each lane then reads the values all lanes
// deposited, as on hardware; the warp matrix instructions (mma.sync, ldmatrix: ptx_emu.h)
// wait for all 32 lanes and then run once for the whole warp, wgmma for all 128 threads of
// its warpgroup; a thread waiting on an mbarrier sleeps until the phase completes. The
// asynchronous operations (cp.async, wgmma, bulk tensor copies) complete at issue in forward
// order and as late as their waits allow in reverse order (a wgmma.wait_group that has to
// complete a product lets every other thread of the block run first). A copy issued over
// shared memory that a wgmma not yet complete reads, or a plain store that changes it before
// the product completes, is reported: a race on a GPU, whichever order. Between two block
// barriers the warps run one after another, each as far as it can get, and within a warp
// the lanes run in ascending index; Order::reverse makes warps, lanes and blocks run in
// descending order. So a kernel that forgets a barrier computes a different answer in one
// of the two orders. Shared memory (static and dynamic) is filled with 0xFF bytes (NaN as
// float) before every block, as it holds garbage on a GPU. Deadlocks (a barrier some
// threads never reach, including threads that exited: a divergent __syncthreads is
// undefined on a GPU and reported here), misuse of the collectives, misaligned vector
// accesses and invalid launch configurations are reported as KernelFault exceptions from
// the launch.
//
// Shared memory: kernels declare it with PPTRAIN_STATIC_SHARED(T, name, count) and
// PPTRAIN_DYNAMIC_SHARED(T, name) from kernels/device.cuh, `__shared__` arrays under nvcc
// and here storage owned by the launch: one region per static declaration (found by the
// address of a function-local tag, so every fiber of the block gets the same one) and the
// dynamic buffer. Both are poisoned before every block.
#pragma once
#define PPTRAIN_EMULATED 1

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

// ---- CUDA keywords ---------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __grid_constant__
#define __align__(n) __attribute__((aligned(n)))
// Shared memory is declared with PPTRAIN_STATIC_SHARED / PPTRAIN_DYNAMIC_SHARED
// (kernels/device.cuh), never `__shared__` directly: a function-static array would outlive
// the launch and escape the poisoning (GCC puts the statics of function templates in COMDAT
// sections of their own, whatever section attribute they carry). A stray __shared__ fails
// to compile with this name in the message.
#define __shared__ use_PPTRAIN_STATIC_SHARED_for_shared_memory

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct __align__(16) float4 {
  float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

// Built-in index variables. The OS thread runs one fiber at a time and the scheduler stores
// the running fiber's indices here before every switch, so each fiber sees its own.
inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;
constexpr int warpSize = 32;

namespace pptrain::emu {

// A kernel did something that fails or is undefined on a GPU: deadlock, a collective with a
// bad mask, a misaligned vector access, an invalid launch configuration.
class KernelFault : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Order { forward, reverse };

// Plays the role of a CUDA stream: carries the run options and counts what ran on it.
struct Stream {
  Order order = Order::forward;
  int launches = 0;        // kernels launched
  long long blocks = 0;    // blocks executed
  long long switches = 0;  // fiber context switches
};

// Type-erased reference to the callable that runs one thread of the kernel.
struct KernelBody {
  void (*call)(const void* closure);
  const void* closure;
};

// Runs one launch to completion; throws KernelFault on faults and deadlocks.
void launch(Stream* stream, const char* name, dim3 grid, dim3 block, size_t dynamic_shared_bytes,
            KernelBody body);

// A launch as a stream takes it (kernels/launch.cuh): `thread_body` (holding its arguments
// by value) runs one thread. Runs at once, unless a stream queue is installed (the emulated
// CUDA runtime, cuda_runtime_emu.h: its lazy streams, its CUPTI records), which then
// decides when the launch runs.
using StreamQueue = void (*)(Stream* stream, const char* name, std::function<void()> op);
void set_stream_queue(StreamQueue queue);
void launch_on_stream(Stream* stream, const char* name, dim3 grid, dim3 block, size_t dynamic_shared_bytes,
                      std::function<void()> thread_body);

// Largest dynamic shared memory a launch may request: an sm_90 block's 227 KiB (launch()
// opts in above 48 KiB on a GPU; static shared memory stays within 48 KiB, see block_runner.h).
constexpr size_t kMaxDynamicSharedBytes = 227 * 1024;

namespace detail {
enum class WarpOp { shfl, shfl_up, shfl_down, shfl_xor, ballot, sync, matrix };
// Every lane of `mask` calls this with the same op and mask; returns the lane's result once
// all of them arrived: the value of the source lane (shuffles) or the vote mask (ballot).
uint64_t warp_collective(WarpOp op, const char* name, unsigned mask, uint64_t value, int arg,
                         int width);
// A warp-wide matrix operation (ptx_emu.h): all 32 lanes of the warp call this with a pointer
// to their own operands; when the last one arrives, run(lanes) runs once with every lane's
// pointer (lanes[l] from lane l), then all lanes continue. A lane that never arrives is a
// deadlock, one at another collective a disagreement: both are KernelFaults.
using MatrixRun = void (*)(void* const* lanes);
void warp_matrix_collective(const char* name, void* operands, MatrixRun run);
void sync_block();
void* dynamic_shared_memory();
// A warpgroup matrix operation (wgmma, ptx_emu.h) that may complete later: run(lanes) with
// the 128 lanes' operands, once. `reads` are the 2-byte shared-memory elements it reads and
// `at_issue` their bytes when it was issued: on a GPU the operation reads them at some point
// before it completes, so a write to them in between races it (block_async.cpp checks both ends).
struct AsyncMatrixOp {
  MatrixRun run = nullptr;
  std::vector<unsigned char> operands;  // a copy of each lane's operand struct
  void* lanes[128];
  bool done = false;
  int warpgroup = 0;
  std::vector<const unsigned char*> reads;
  std::vector<unsigned char> at_issue;
};
// The shared-memory elements (2 bytes each) an operation with these operands (lane 0's) reads.
using MatrixReads = void (*)(const void* operands, std::vector<const unsigned char*>& elements);
// All 128 threads of the caller's warpgroup arrive with their operands (`bytes` each, copied:
// the caller's struct may go out of scope); then run(lanes) runs once (async: at the latest
// when the thread's wgmma.wait_group covers it; `reads`, if given, lists what it reads).
void warpgroup_collective(const char* name, const void* operands, size_t bytes, MatrixRun run, bool async,
                          MatrixReads reads = nullptr);
void async_matrix_commit();
void async_matrix_wait(int pending);
// mbarrier (ptx_emu.h): an arrival counter with a transaction count, completing a phase when
// both reach zero, then re-armed with its count. A thread waiting for a phase that has not
// completed blocks until it does (a wait nothing can satisfy is a deadlock).
void mbarrier_init(void* bar, int count);
void mbarrier_arrive(void* bar, long long expect_tx);  // expect_tx > 0: arrive.expect_tx
void mbarrier_wait(void* bar, int parity);
// A bulk copy of `bytes` into shared memory at `dst` that completes them as transactions on
// `bar`: at once in forward order; in reverse order only when no thread of the block can run,
// and then only if a thread waits on its barrier (or none waits on any barrier with copies in
// flight). Issuing it over elements that a wgmma not yet complete reads is a fault (a race).
void bulk_copy(void* bar, void* dst, long long bytes, std::function<void()> copy);
// The emulated shared window: dynamic shared memory starts at shared address `window_start`
// (16-byte aligned, deliberately not 1024-byte aligned) and spans `bytes`.
constexpr uint32_t kDynamicWindowStart = 0x410;
void* shared_base(uint32_t& window_start, size_t& bytes);
// The launch's region for the static shared declaration `tag` (bytes, 16-byte aligned).
void* static_shared(const void* tag, size_t bytes, const char* name);
[[noreturn]] void fault(const std::string& what);
void check_aligned(const void* p, size_t alignment, const char* what);
// True when [p, p + bytes) lies in the block's shared memory (static or dynamic).
bool in_shared(const void* p, size_t bytes);
// cp.async of the calling thread (ptx_emu.h): a copy of `bytes` to shared memory, the first
// `src_bytes` from src and the rest zero; closing the open group; completing all but the
// `pending` most recent groups.
void async_copy(void* dst, const void* src, size_t bytes, size_t src_bytes);
void async_commit();
void async_wait(int pending);
}  // namespace detail

}  // namespace pptrain::emu

using cudaStream_t = pptrain::emu::Stream*;

// ---- synchronisation and warp collectives ---------------------------------------------------
inline void __syncthreads() { pptrain::emu::detail::sync_block(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  using namespace pptrain::emu::detail;
  warp_collective(WarpOp::sync, "__syncwarp", mask, 0, 0, 32);
}
inline void __threadfence() {}
inline void __threadfence_block() {}

namespace pptrain::emu::detail {
template <typename T>
T shuffle(WarpOp op, const char* name, unsigned mask, T var, int arg, int width) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffle of a 1-8 byte value");
  uint64_t bits = 0;
  std::memcpy(&bits, &var, sizeof(T));
  bits = warp_collective(op, name, mask, bits, arg, width);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}
}  // namespace pptrain::emu::detail

template <typename T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32) {
  using namespace pptrain::emu::detail;
  return shuffle(WarpOp::shfl, "__shfl_sync", mask, var, src_lane, width);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  using namespace pptrain::emu::detail;
  return shuffle(WarpOp::shfl_up, "__shfl_up_sync", mask, var, int(delta), width);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  using namespace pptrain::emu::detail;
  return shuffle(WarpOp::shfl_down, "__shfl_down_sync", mask, var, int(delta), width);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32) {
  using namespace pptrain::emu::detail;
  return shuffle(WarpOp::shfl_xor, "__shfl_xor_sync", mask, var, lane_mask, width);
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  using namespace pptrain::emu::detail;
  return unsigned(warp_collective(WarpOp::ballot, "__ballot_sync", mask, predicate != 0, 0, 32));
}
inline int __any_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) != 0; }
inline int __all_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) == mask; }

// ---- atomics: fibers never interleave inside one, so plain read-modify-write is atomic ----
template <typename T>
T atomicAdd(T* address, T value) {
  T old = *address;
  *address = old + value;
  return old;
}
template <typename T>
T atomicMax(T* address, T value) {
  T old = *address;
  *address = old < value ? value : old;
  return old;
}
template <typename T>
T atomicMin(T* address, T value) {
  T old = *address;
  *address = value < old ? value : old;
  return old;
}
template <typename T>
T atomicExch(T* address, T value) {
  T old = *address;
  *address = value;
  return old;
}
template <typename T>
T atomicCAS(T* address, T compare, T value) {
  T old = *address;
  if (old == compare) *address = value;
  return old;
}

// ---- device maths and bit intrinsics -----------------------------------------------------------
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffs(unsigned x) { return __builtin_ffs(int(x)); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(unsigned(x)); }
template <typename T>
T __ldg(const T* p) { return *p; }

// ---- bf16 storage type: same bits and round-to-nearest-even as cuda_bf16.h --------------------
struct __align__(2) __nv_bfloat16 {
  uint16_t bits;
};
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {uint16_t(0x7fff)};  // NaN: canonical quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round half to even on the 16 dropped bits
  return {uint16_t(u >> 16)};
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline float __bfloat162float(__nv_bfloat16 h) {
  uint32_t u = uint32_t(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- sm_80 PTX: mma.sync, ldmatrix, cp.async (kernels/ptx.cuh) --------------------------------
#include "emu/ptx_emu.h"
