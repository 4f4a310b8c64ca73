// The context every kernel launcher takes, and the one place kernels are launched.
//
// Every op family exposes host-callable launchers (launch_layernorm_forward, ...) that
// compute the grid and call launch(). In the CUDA build launch() is the only
// `<<<grid, block, shared, stream>>>` in pptrain; in the emulated build (emu/: the tests
// and pptrain-emu) it runs the same kernel on the CPU SIMT emulator, so both builds share
// every launcher and call site.
#pragma once
#include <cstddef>
#include <cstdint>

#ifdef PPTRAIN_EMULATED
#include "emu/emu.h"
#else
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#endif

#include "core/error.h"

namespace pptrain::kernels {

using bf16 = __nv_bfloat16;

struct LaunchContext {
  cudaStream_t stream = nullptr;  // emulated build: an emu::Stream carrying the run options
};

// Blocks needed to cover `n` items with `per_block` items each.
inline unsigned ceil_div(size_t n, size_t per_block) { return unsigned((n + per_block - 1) / per_block); }

// True when every pointer is 16-byte aligned, so 128-bit vector accesses are legal.
template <typename... P>
bool aligned16(const P*... p) {
  return ((reinterpret_cast<uintptr_t>(p) % 16 == 0) && ...);
}

#if defined(__CUDACC__) || defined(PPTRAIN_EMULATED)
// Launches kernel(args...) on grid x block threads with `shared_bytes` of dynamic shared
// memory on ctx.stream. `name` identifies the kernel in error messages.
template <typename... Params, typename... Args>
void launch(const LaunchContext& ctx, const char* name, void (*kernel)(Params...), dim3 grid,
            dim3 block, size_t shared_bytes, Args... args) {
#ifdef PPTRAIN_EMULATED
  // The arguments by value, as a GPU takes them: the launch may run after this returns (the
  // emulated runtime's lazy streams).
  emu::launch_on_stream(ctx.stream, name, grid, block, shared_bytes, [=] { kernel(args...); });
#else
  // cudaGetLastError returns the last error of any runtime call on this thread, also one a
  // library met and handled itself while returning success (seen on an H200: "out of memory"
  // at the first launch of a fresh process, after cuBLASLt calls that had succeeded). Every
  // runtime call of ours is checked where it is made, so an error pending here is stale:
  // cleared, so the check below reports this launch alone. A sticky error (a device fault)
  // is returned again by the launch itself.
  (void)cudaGetLastError();
  // Above 48 KiB a kernel must opt in to dynamic shared memory (a host-side attribute, no
  // device work: set at every such launch rather than tracked per kernel).
  if (shared_bytes > 48 * 1024) {
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared_bytes));
    if (e != cudaSuccess)
      fail("kernel ", name, ": ", shared_bytes, " bytes of shared memory refused: ", cudaGetErrorString(e));
  }
  kernel<<<grid, block, shared_bytes, ctx.stream>>>(args...);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) fail("kernel ", name, ": launch failed: ", cudaGetErrorString(err));
#endif
}
#endif

}  // namespace pptrain::kernels
