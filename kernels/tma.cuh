// The sm_90 asynchronous copy machinery the Hopper flash attention forward is written with
// (kernels/flash_attention_sm90.cuh), one thin wrapper each: tensor maps (cuTensorMapEncodeTiled,
// through the runtime's driver entry point: no libcuda link), the bulk tensor copy engine
// (cp.async.bulk.tensor, "TMA") and the shared-memory barriers its copies complete on
// (mbarrier: arrive, arrive.expect_tx, try_wait.parity). Under nvcc inline PTX (sm_90 and
// up; elsewhere the device functions trap, and the launcher never calls them); under the
// SIMT emulator (emu/ptx_emu.h) the same semantics on the CPU.
//
// A copy moves a box of a bf16 tensor of rank 3 (dims[0] contiguous) into shared memory in box
// order, zero-filling what lies outside the tensor, with the 128-byte swizzle of wgmma.cuh's
// tiles; the destination is 1024-byte aligned. The barrier's phase completes when its
// arrivals and the bytes announced by arrive.expect_tx have all come in.
#pragma once
#include <cstdint>

#include "device.cuh"
#include "wgmma.cuh"

#ifndef PPTRAIN_EMULATED
#include <cuda.h>
#endif

namespace pptrain::kernels::tma {

#ifdef PPTRAIN_EMULATED
using Map = emu::ptx::TensorMap;
#else
using Map = CUtensorMap;
#endif

// A map of the bf16 tensor at `base` with dims {d0, d1, d2} (d0 contiguous), byte strides s1,
// s2 of dimensions 1 and 2, moving boxes of {b0, b1, 1} elements, 128-byte swizzled (b0·2 =
// 128 bytes: one swizzle row). Host code; fails with one line if the driver refuses it.
Map make_map_3d(const void* base, uint64_t d0, uint64_t d1, uint64_t d2, uint64_t s1, uint64_t s2, uint32_t b0,
                uint32_t b1);

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PPTRAIN_TMA_DEVICE 1
#endif

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, int count) {
#ifdef PPTRAIN_EMULATED
  emu::ptx::mbarrier_init(bar, count);
#elif defined(PPTRAIN_TMA_DEVICE)
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(wgmma::smem_address(bar)), "r"(count) : "memory");
#else
  __trap();
#endif
}

// Makes initialised barriers visible to the async proxy (the copy engine) before first use.
__device__ __forceinline__ void fence_barrier_init() {
#if defined(PPTRAIN_TMA_DEVICE)
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
#ifdef PPTRAIN_EMULATED
  emu::ptx::mbarrier_arrive(bar);
#elif defined(PPTRAIN_TMA_DEVICE)
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(wgmma::smem_address(bar)) : "memory");
#else
  __trap();
#endif
}

// One arrival that also announces `bytes` of copies to come on this phase.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#ifdef PPTRAIN_EMULATED
  emu::ptx::mbarrier_arrive_expect_tx(bar, bytes);
#elif defined(PPTRAIN_TMA_DEVICE)
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(wgmma::smem_address(bar)),
               "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}

// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, int parity) {
#ifdef PPTRAIN_EMULATED
  emu::ptx::mbarrier_wait(bar, parity);
#elif defined(PPTRAIN_TMA_DEVICE)
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(wgmma::smem_address(bar)),
      "r"(parity)
      : "memory");
#else
  __trap();
#endif
}

// The box of `map` at coordinates {c0, c1, c2} into shared `dst`, completing on `bar`.
__device__ __forceinline__ void load_3d(void* dst, const Map& map, int c0, int c1, int c2, uint64_t* bar) {
#ifdef PPTRAIN_EMULATED
  emu::ptx::tma_load_3d(dst, map, c0, c1, c2, bar);
#elif defined(PPTRAIN_TMA_DEVICE)
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
          wgmma::smem_address(dst)),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(wgmma::smem_address(bar))
      : "memory");
#else
  __trap();
#endif
}

}  // namespace pptrain::kernels::tma
