// The sm_90a warpgroup instructions the Hopper flash attention kernel is written with
// (kernels/flash_attention_sm90.cuh), one thin wrapper each: wgmma.mma_async (bf16 × bf16 →
// fp32, m64nNk16) with shared-memory matrix descriptors, its fence/commit/wait, and the proxy
// fence that makes generic-proxy writes (cp.async, st.shared) visible to it. Under nvcc they
// are inline PTX, compiled for sm_90a only (elsewhere they trap: the launcher never calls them
// on another GPU); under the SIMT emulator (emu/ptx_emu.h) the same semantics on the CPU.
//
// Register layouts (PTX ISA 9.7.15.5.1.1; warp w = thread / 32 of the warpgroup, g = lane / 4,
// t = lane % 4): A in registers holds rows 16w..16w+15 in the mma.sync A layout (ptx.cuh); D
// holds d[4j + i] = D[16w + g + 8(i / 2)][8j + 2t + i % 2], i.e. per warp the mma.sync C
// layout of n8 tiles j = 0 .. N/8 − 1.
//
// Shared-memory operands here are 128-byte swizzled tiles of bf16 rows of 64 elements (one
// "atom" = 8 rows × 128 bytes, 1024-byte aligned): element (row, c) of an atom sits at byte
// row·128 + ((c / 8) ^ (row % 8))·16 + (c % 8)·2 (swizzled_offset), which is where the
// hardware's Swizzle<3,4,3> on the address puts it.
#pragma once
#include <cstdint>

#include "device.cuh"
#include "ptx.cuh"

namespace pptrain::kernels::wgmma {

using ptx::u32;

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PPTRAIN_WGMMA_DEVICE 1
#endif

// Byte offset of element (row, c) in a 128B-swizzled tile of 64-element bf16 rows.
__device__ __forceinline__ uint32_t swizzled_offset(int row, int c) {
  return uint32_t(row) * 128 + uint32_t(((c >> 3) ^ (row & 7)) << 4) + uint32_t(c & 7) * 2;
}

// The shared-window address of a pointer into shared memory.
__device__ __forceinline__ uint32_t smem_address(const void* p) {
#ifdef PPTRAIN_EMULATED
  return emu::ptx::shared_address(p);
#else
  return unsigned(__cvta_generic_to_shared(p));
#endif
}

// Matrix descriptor (PTX ISA 9.7.15.5.1.2.2): start address, leading and stride byte offsets,
// base offset 0 (every pattern starts 1024-byte aligned), swizzle mode 1 = 128 bytes.
__device__ __forceinline__ uint64_t descriptor_sw128(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((addr & 0x3ffff) >> 4) | uint64_t((lbo & 0x3ffff) >> 4) << 16 |
         uint64_t((sbo & 0x3ffff) >> 4) << 32 | uint64_t(1) << 62;
}

// Orders this thread's earlier register writes before the next wgmma reads them.
__device__ __forceinline__ void fence() {
#if defined(PPTRAIN_WGMMA_DEVICE)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void commit() {
#ifdef PPTRAIN_EMULATED
  emu::ptx::wgmma_commit();
#elif defined(PPTRAIN_WGMMA_DEVICE)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int kPending>
__device__ __forceinline__ void wait() {
#ifdef PPTRAIN_EMULATED
  emu::ptx::wgmma_wait(kPending);
#elif defined(PPTRAIN_WGMMA_DEVICE)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}
// Pins the registers of `x` where this call stands: the compiler may not move instructions
// that define or read them across it. Around a wgmma's issue and wait, it keeps plain writes
// of the product's operands (a P fragment copied into place, accumulators rescaled) out of
// the span between the two, where ptxas would otherwise serialise the products (C7513/C7515).
// Emits no instruction.
template <typename T, int N>
__device__ __forceinline__ void fence_operand(T (&x)[N]) {
#if defined(PPTRAIN_WGMMA_DEVICE)
  for (int i = 0; i < N; ++i) {
    if constexpr (__is_same(T, float)) asm volatile("" : "+f"(x[i])::"memory");
    else asm volatile("" : "+r"(x[i])::"memory");
  }
#else
  (void)x;
#endif
}
template <typename T, int M, int N>
__device__ __forceinline__ void fence_operand(T (&x)[M][N]) {
  for (int i = 0; i < M; ++i) fence_operand(x[i]);
}

// Makes this thread's completed generic-proxy writes to shared memory (cp.async after its
// wait, plain stores) visible to the async proxy that wgmma reads through; a barrier after
// it publishes them to the warpgroup. (Not modelled by the emulator: a missing fence passes
// there and fails on the GPU. The flash kernels need none: their tiles arrive through the
// copy engine, which writes in the async proxy.)
__device__ __forceinline__ void fence_proxy_async() {
#if defined(PPTRAIN_WGMMA_DEVICE)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// d[64×N] (+)= A[64×16] · B[16×N], A and B K-major in shared memory (descriptors); N 32, 64.
template <int N>
__device__ __forceinline__ void mma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, bool scale_d);

template <>
__device__ __forceinline__ void mma_ss<32>(float (&d)[16], uint64_t desc_a, uint64_t desc_b, bool scale_d) {
#ifdef PPTRAIN_EMULATED
  emu::ptx::wgmma_bf16(d, 32, nullptr, desc_a, desc_b, scale_d, false, false);
#elif defined(PPTRAIN_WGMMA_DEVICE)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(desc_a), "l"(desc_b), "r"(int(scale_d)));
#else
  __trap();
#endif
}

template <>
__device__ __forceinline__ void mma_ss<64>(float (&d)[32], uint64_t desc_a, uint64_t desc_b, bool scale_d) {
#ifdef PPTRAIN_EMULATED
  emu::ptx::wgmma_bf16(d, 64, nullptr, desc_a, desc_b, scale_d, false, false);
#elif defined(PPTRAIN_WGMMA_DEVICE)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(desc_a), "l"(desc_b), "r"(int(scale_d)));
#else
  __trap();
#endif
}

// d[64×N] (+)= A[64×16] · B[16×N], A in registers, B MN-major (N contiguous) in shared memory.
template <int N>
__device__ __forceinline__ void mma_rs_mn(float (&d)[N / 2], const u32 (&a)[4], uint64_t desc_b, bool scale_d);

template <>
__device__ __forceinline__ void mma_rs_mn<64>(float (&d)[32], const u32 (&a)[4], uint64_t desc_b, bool scale_d) {
#ifdef PPTRAIN_EMULATED
  emu::ptx::wgmma_bf16(d, 64, a, 0, desc_b, scale_d, false, true);
#elif defined(PPTRAIN_WGMMA_DEVICE)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int(scale_d)));
#else
  __trap();
#endif
}

template <>
__device__ __forceinline__ void mma_rs_mn<128>(float (&d)[64], const u32 (&a)[4], uint64_t desc_b, bool scale_d) {
#ifdef PPTRAIN_EMULATED
  emu::ptx::wgmma_bf16(d, 128, a, 0, desc_b, scale_d, false, true);
#elif defined(PPTRAIN_WGMMA_DEVICE)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int(scale_d)));
#else
  __trap();
#endif
}

}  // namespace pptrain::kernels::wgmma
