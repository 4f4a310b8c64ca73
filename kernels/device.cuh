// Device-side building blocks shared by the kernels: storage-type conversion, warp and
// block reductions, 128-bit packs, dynamic shared memory. Only kernels/*.cu include it.
#pragma once
#include "launch.cuh"

namespace pptrain::kernels {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarp = 32;

// ---- storage types: activations are float or bf16; arithmetic is always fp32 ----------
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float x) { return __float2bfloat16_rn(x); }

// ---- reductions ---------------------------------------------------------------------------
struct Sum {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct Max {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Butterfly over the 32 lanes: every lane ends with the reduction of all 32 values, and the
// combination order is the same on every lane, so all lanes hold bit-identical results.
template <typename T, typename Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Reduction over a 1-D block (blockDim.x a multiple of 32): every thread returns the result.
// `scratch` is 32 elements of shared memory. Each warp reduces its lanes, lane 0 publishes,
// then every warp reduces the published partials in the same fixed order (deterministic).
// The leading barrier lets a caller reuse `scratch` for consecutive reductions.
template <typename T, typename Op>
__device__ T block_reduce(T v, T identity, T* scratch, Op op) {
  int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  v = warp_reduce(v, op);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_reduce(lane < warps ? scratch[lane] : identity, op);
}

// ---- 128-bit packs: 4 floats or 8 bf16 moved by one vector load/store ----------------------
template <typename T>
struct alignas(16) Pack128 {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

template <typename T>
__device__ __forceinline__ Pack128<T> load_pack(const T* p) {
#ifdef PPTRAIN_EMULATED
  emu::detail::check_aligned(p, 16, "vector load");
#endif
  return *reinterpret_cast<const Pack128<T>*>(p);
}

template <typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack128<T>& x) {
#ifdef PPTRAIN_EMULATED
  emu::detail::check_aligned(p, 16, "vector store");
#endif
  *reinterpret_cast<Pack128<T>*>(p) = x;
}

}  // namespace pptrain::kernels

// Static shared memory: `count` elements of T named `name` (an array under nvcc, a T* to the
// launch's region under the emulator: use it as a pointer), 16-byte aligned.
#ifdef PPTRAIN_EMULATED
#define PPTRAIN_STATIC_SHARED(T, name, count)                                                 \
  static const char name##_shared_tag = 0;                                                    \
  T* const name = static_cast<T*>(                                                            \
      ::pptrain::emu::detail::static_shared(&name##_shared_tag, sizeof(T) * size_t(count), #name))
#else
#define PPTRAIN_STATIC_SHARED(T, name, count) __shared__ __align__(16) T name[count]
#endif

// The launch's dynamic shared memory (`shared_bytes` of launch()) as a T* named `name`.
#ifdef PPTRAIN_EMULATED
#define PPTRAIN_DYNAMIC_SHARED(T, name) \
  T* name = static_cast<T*>(::pptrain::emu::detail::dynamic_shared_memory())
#else
#define PPTRAIN_DYNAMIC_SHARED(T, name)                                  \
  extern __shared__ __align__(16) unsigned char name##_dynamic_shared[]; \
  T* name = reinterpret_cast<T*>(name##_dynamic_shared)
#endif

// Unrolls the loop that follows under nvcc (a fixed-count loop over a small array keeps the
// array in registers only when unrolled); nothing for the host compiler of the emulator.
#ifdef __CUDACC__
#define PPTRAIN_UNROLL _Pragma("unroll")
#else
#define PPTRAIN_UNROLL
#endif
