// The sm_80 warp-level PTX the kernels use through kernels/ptx.cuh, under the SIMT emulator
// (included by emu.h): mma.sync.m16n8k16 (bf16 in, fp32 accumulate), ldmatrix (.x1/.x2/.x4,
// optionally .trans) and cp.async with its commit/wait groups.
//
// Semantics kept from the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point
// type", "Warp-level matrix load instruction: ldmatrix", "cp.async"):
//  - mma and ldmatrix are warp collectives (.sync.aligned): all 32 lanes arrive, then the
//    operation runs once for the warp. The fragment layouts are the documented ones, with
//    groupID g = lane / 4 and t = lane % 4:
//      A (16×16, 4 regs): reg0 = A[g][2t..2t+1], reg1 = A[g+8][2t..], reg2 = A[g][2t+8..],
//                         reg3 = A[g+8][2t+8..]   (the lower column in the low 16 bits)
//      B (16×8, 2 regs):  reg0 = B[2t..2t+1][g], reg1 = B[2t+8..2t+9][g]
//      C/D (16×8 fp32):   c0, c1 = C[g][2t..2t+1], c2, c3 = C[g+8][2t..2t+1]
//    mma sums the 16 exact bf16 products onto C in ascending k, rounding each sum to fp32
//    (the hardware's order is unspecified; bounds must not depend on it).
//  - ldmatrix: lanes 8m..8m+7 give the row addresses of matrix m (16 bytes each, 16-byte
//    aligned, in shared memory, else a fault); lane l receives in register m the elements
//    (row l/4, columns 2(l%4), 2(l%4)+1) of matrix m, or with .trans (rows 2(l%4), 2(l%4)+1,
//    column l/4).
//  - cp.async: a copy of 16 bytes from global to shared memory (zero-filled past src_bytes)
//    that completes at some point before the issuing thread's cp.async.wait_group covers
//    its group. Which point is the emulator's choice and depends on the run order (emu.h):
//    Order::forward copies at issue (a buffer refilled while another warp still reads it
//    shows), Order::reverse at the wait (a tile read before its wait, or by a thread that
//    did not wait, shows as the 0xFF poison or the previous tile). Completion is per
//    thread, as on hardware: other threads see the data after a barrier that follows the
//    wait.
#pragma once

namespace pptrain::emu::ptx {

namespace detail {

struct MmaArgs {
  float* d;
  const uint32_t* a;
  const uint32_t* b;
};

inline float bf16_bits_to_float(uint32_t bits) {
  uint32_t u = bits << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float low_half(uint32_t r) { return bf16_bits_to_float(r & 0xffffu); }
inline float high_half(uint32_t r) { return bf16_bits_to_float(r >> 16); }

inline void mma_all(void* const* lanes) {
  float a[16][16], b[16][8], c[16][8];
  for (int l = 0; l < 32; ++l) {
    const auto* x = static_cast<const MmaArgs*>(lanes[l]);
    int g = l / 4, t = l % 4;
    for (int reg = 0; reg < 4; ++reg) {
      int row = g + (reg & 1) * 8, col = 2 * t + (reg >> 1) * 8;
      a[row][col] = low_half(x->a[reg]), a[row][col + 1] = high_half(x->a[reg]);
    }
    for (int reg = 0; reg < 2; ++reg) {
      int k = 2 * t + reg * 8;
      b[k][g] = low_half(x->b[reg]), b[k + 1][g] = high_half(x->b[reg]);
    }
    for (int i = 0; i < 4; ++i) c[g + (i >> 1) * 8][2 * t + (i & 1)] = x->d[i];
  }
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      float acc = c[r][n];
      for (int k = 0; k < 16; ++k) acc += a[r][k] * b[k][n];  // exact product, fp32 sum
      c[r][n] = acc;
    }
  for (int l = 0; l < 32; ++l) {
    auto* x = static_cast<const MmaArgs*>(lanes[l]);
    int g = l / 4, t = l % 4;
    for (int i = 0; i < 4; ++i) x->d[i] = c[g + (i >> 1) * 8][2 * t + (i & 1)];
  }
}

struct LdmatrixArgs {
  uint32_t* r;
  const void* row;
  int num;
  bool trans;
};

inline void ldmatrix_all(void* const* lanes) {
  const auto* first = static_cast<const LdmatrixArgs*>(lanes[0]);
  int num = first->num;
  for (int l = 1; l < 32; ++l) {
    const auto* x = static_cast<const LdmatrixArgs*>(lanes[l]);
    if (x->num != num || x->trans != first->trans)
      ::pptrain::emu::detail::fault("ldmatrix: lanes 0 and " + std::to_string(l) + " use different shapes");
  }
  uint16_t m[4][8][8];  // [matrix][row][column]
  for (int l = 0; l < 8 * num; ++l) {
    const void* row = static_cast<const LdmatrixArgs*>(lanes[l])->row;
    ::pptrain::emu::detail::check_aligned(row, 16, "ldmatrix row");
    if (!::pptrain::emu::detail::in_shared(row, 16))
      ::pptrain::emu::detail::fault("ldmatrix: lane " + std::to_string(l) + "'s row address is not in shared memory");
    std::memcpy(m[l / 8][l % 8], row, 16);
  }
  for (int l = 0; l < 32; ++l) {
    const auto* x = static_cast<const LdmatrixArgs*>(lanes[l]);
    int g = l / 4, t = l % 4;
    for (int k = 0; k < num; ++k) {
      uint16_t lo = first->trans ? m[k][2 * t][g] : m[k][g][2 * t];
      uint16_t hi = first->trans ? m[k][2 * t + 1][g] : m[k][g][2 * t + 1];
      x->r[k] = uint32_t(lo) | uint32_t(hi) << 16;
    }
  }
}

}  // namespace detail

// d[0..3] += A·B for the warp's 16×8 tile (fragments as above).
inline void mma_m16n8k16_bf16(float* d, const uint32_t* a, const uint32_t* b) {
  detail::MmaArgs args{d, a, b};
  ::pptrain::emu::detail::warp_matrix_collective("mma.sync.m16n8k16", &args, detail::mma_all);
}

// r[0..num-1] = the lane's fragments of `num` 8×8 bf16 matrices whose rows the lanes address.
inline void ldmatrix(uint32_t* r, int num, bool trans, const void* row) {
  detail::LdmatrixArgs args{r, row, num, trans};
  ::pptrain::emu::detail::warp_matrix_collective("ldmatrix", &args, detail::ldmatrix_all);
}

inline void cp_async_16(void* dst, const void* src, int src_bytes) {
  ::pptrain::emu::detail::check_aligned(dst, 16, "cp.async destination");
  if (!::pptrain::emu::detail::in_shared(dst, 16))
    ::pptrain::emu::detail::fault("cp.async: the destination is not in shared memory");
  if (src_bytes != 0 && src_bytes != 16)
    ::pptrain::emu::detail::fault("cp.async: source size " + std::to_string(src_bytes) + " (0 or 16 here)");
  if (src_bytes) ::pptrain::emu::detail::check_aligned(src, 16, "cp.async source");
  ::pptrain::emu::detail::async_copy(dst, src, 16, size_t(src_bytes));
}
inline void cp_async_commit() { ::pptrain::emu::detail::async_commit(); }
inline void cp_async_wait(int pending) { ::pptrain::emu::detail::async_wait(pending); }

}  // namespace pptrain::emu::ptx
