// The sm_80 warp-level instructions the tensor-core kernels are written with, one thin
// wrapper each: mma.sync.m16n8k16 (bf16 × bf16 → fp32), ldmatrix (8×8 bf16 matrices from
// shared memory straight into mma fragments, optionally transposed) and cp.async (global to
// shared copies that bypass the registers, completed by commit/wait groups). Under nvcc they
// are inline PTX; under the SIMT emulator (emu/ptx_emu.h) the same semantics on the CPU.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"),
// with g = lane / 4 and t = lane % 4, two bf16 per 32-bit register, the lower column (or
// row, for B) in the low half:
//   A [16×16]: a[0] = A[g][2t..2t+1]   a[1] = A[g+8][2t..]   a[2] = A[g][2t+8..]   a[3] = A[g+8][2t+8..]
//   B [16×8]:  b[0] = B[2t..2t+1][g]   b[1] = B[2t+8..2t+9][g]
//   C [16×8]:  c[0], c[1] = C[g][2t], C[g][2t+1]       c[2], c[3] = C[g+8][2t], C[g+8][2t+1]
// Two side-by-side C tiles (columns n..n+15) hold exactly what an A fragment of columns
// n..n+15 needs, so a product's result feeds the next product without leaving registers
// (pack_a_from_c below): the reason flash attention is written with these rather than WMMA,
// whose fragment layout is unspecified.
#pragma once
#include <cstdint>

#include "device.cuh"

namespace pptrain::kernels::ptx {

using u32 = uint32_t;

// d += A·B on the warp's tile (all 32 lanes, converged).
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const u32 (&a)[4], const u32* b) {
#ifdef PPTRAIN_EMULATED
  emu::ptx::mma_m16n8k16_bf16(d, a, b);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// r[m] = the lane's fragment of 8×8 matrix m (m < 4); lane 8m + i gives the address of row i
// of matrix m (16 bytes, 16-byte aligned, shared memory).
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], const bf16* row) {
#ifdef PPTRAIN_EMULATED
  emu::ptx::ldmatrix(r, 4, false, row);
#else
  unsigned s = unsigned(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s)
               : "memory");
#endif
}

// The same, each matrix transposed: lane l gets (rows 2(l%4), 2(l%4)+1; column l/4).
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], const bf16* row) {
#ifdef PPTRAIN_EMULATED
  emu::ptx::ldmatrix(r, 4, true, row);
#else
  unsigned s = unsigned(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s)
               : "memory");
#endif
}

// 16 bytes from global `src` to shared `dst` without passing through registers; with
// src_bytes = 0 nothing is read and dst is zero-filled (src must still be a valid address).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int src_bytes) {
#ifdef PPTRAIN_EMULATED
  emu::ptx::cp_async_16(dst, src, src_bytes);
#else
  unsigned s = unsigned(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(src_bytes) : "memory");
#endif
}

// Closes the thread's current group of cp.async (an empty group is legal).
__device__ __forceinline__ void cp_async_commit() {
#ifdef PPTRAIN_EMULATED
  emu::ptx::cp_async_commit();
#else
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most `kPending` of the thread's most recent groups are still in flight. The
// data is visible to this thread only: other threads read it after a following barrier.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
#ifdef PPTRAIN_EMULATED
  emu::ptx::cp_async_wait(kPending);
#else
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

// Two floats as a bf16 pair, `lo` in the low half (round to nearest even).
__device__ __forceinline__ u32 pack_bf16(float lo, float hi) {
#ifdef PPTRAIN_EMULATED
  return u32(__float2bfloat16_rn(lo).bits) | u32(__float2bfloat16_rn(hi).bits) << 16;
#else
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<u32*>(&v);
#endif
}

// The A fragment of columns 16k..16k+15 of a [16 × 8n] result held as C tiles c[0..n-1]:
// tiles 2k and 2k+1, rounded to bf16.
__device__ __forceinline__ void pack_a_from_c(u32 (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack_bf16(lo[0], lo[1]);
  a[1] = pack_bf16(lo[2], lo[3]);
  a[2] = pack_bf16(hi[0], hi[1]);
  a[3] = pack_bf16(hi[2], hi[3]);
}

// ---- fragments of row-major [rows][ld] bf16 tiles in shared memory --------------------------

// A fragment of the 16×16 block at `tile` (its top-left element): matrix m covers rows
// (m & 1)·8 .. +7 and columns (m >> 1)·8 .. +7, in the order of a[0..3] above.
__device__ __forceinline__ void load_a(u32 (&a)[4], const bf16* tile, int ld, int lane) {
  int m = lane / 8, i = lane % 8;
  ldmatrix_x4(a, tile + ((m & 1) * 8 + i) * ld + (m >> 1) * 8);
}

// B fragments of B = tileᵀ, where `tile` is 16 rows (n) × 16 columns (k) at its top-left
// element: b[0..1] for the n8 tile of rows 0..7, b[2..3] for rows 8..15. Row n of the tile is
// column n of B, so the non-transposed matrix gives lane l the pair B[2t..2t+1][g].
__device__ __forceinline__ void load_b_of_rows(u32 (&b)[4], const bf16* tile, int ld, int lane) {
  int m = lane / 8, i = lane % 8;
  ldmatrix_x4(b, tile + ((m >> 1) * 8 + i) * ld + (m & 1) * 8);
}

// B fragments of B = tile, where `tile` is 16 rows (k) × 16 columns (n) at its top-left
// element: b[0..1] for the n8 tile of columns 0..7, b[2..3] for columns 8..15 (transposed
// loads: lane l gets the pair tile[2t..2t+1][g]).
__device__ __forceinline__ void load_b_of_cols(u32 (&b)[4], const bf16* tile, int ld, int lane) {
  int m = lane / 8, i = lane % 8;
  ldmatrix_x4_trans(b, tile + ((m & 1) * 8 + i) * ld + (m >> 1) * 8);
}

}  // namespace pptrain::kernels::ptx
