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

// ---- sm_90a: wgmma (warpgroup MMA) on shared-memory matrix descriptors ----------------------
// wgmma.mma_async.m64nNk16.f32.bf16.bf16 (PTX ISA 9.7.15): the 128 threads of a warpgroup
// compute D[64×N] (+)= A[64×16] · B[16×N]. A comes from registers (warp w holds rows 16w..16w+15
// in the mma.sync A layout of ptx.cuh) or, like B, from shared memory through a 64-bit matrix
// descriptor; D is in registers, lane (w, g, t) holding d[4j + i] = D[16w + g + 8(i/2)][8j + 2t + i%2].
// Descriptors are decoded by the canonical layouts of the manual ("Shared Memory Matrix Layout",
// in CuTe notation, T = 8 bf16 per 16 bytes, w = the swizzle atom's width in 16-byte units):
//   K-major,  no swizzle: ((8,m),(T,2k)):((T,SBO),(1,LBO))      element (mn, k)
//   K-major,  swizzled:   ((8,m),(T,2k)):((wT,SBO),(1,T))
//   MN-major, no swizzle: ((T,1,m),(8,k)):((1,T,SBO),(T,LBO))
//   MN-major, swizzled:   ((T,w,m),(8,k)):((1,T,LBO),(wT,SBO))
// and the swizzle Swizzle<log2 w, 4, 3> applied to the shared-window byte address: bits 4..
// of the address XORed with bits 7.. (so a pattern repeats at 1024 bytes for 128B swizzling;
// a descriptor with a non-zero base offset is reported as not emulated). Shared addresses are
// those of ptx_emu's window: dynamic shared memory at kDynamicWindowStart.
// The operation completes when the 128th thread arrives (forward order) or at the issuing
// threads' wgmma.wait_group (reverse order), after every other thread has run as far as it
// can: reading D early, or changing A's registers before the wait, shows in one of the two;
// a copy issued over its shared operands, or a store that changes them, before the wait is
// reported (block_async.cpp).
namespace pptrain::emu::ptx {

inline uint32_t shared_address(const void* p) {
  uint32_t start;
  size_t bytes;
  auto* base = static_cast<const unsigned char*>(::pptrain::emu::detail::shared_base(start, bytes));
  auto* q = static_cast<const unsigned char*>(p);
  if (q < base || q > base + bytes)
    ::pptrain::emu::detail::fault("shared address of a pointer outside dynamic shared memory (the emulated window "
                                  "holds dynamic shared memory only)");
  return start + uint32_t(q - base);
}

namespace detail {

struct WgmmaArgs {
  float* d;
  const uint32_t* a;  // nullptr: A from desc_a
  uint64_t desc_a, desc_b;
  int n;
  bool scale_d, trans_a, trans_b;
};

// Where the bf16 element (mn, k) of an operand described by `desc` lies (mn_major: the
// layout's contiguous dimension is M or N, else K).
inline const unsigned char* descriptor_address(uint64_t desc, bool mn_major, int mn, int k) {
  uint32_t start = uint32_t(desc & 0x3fff) << 4, lbo = uint32_t((desc >> 16) & 0x3fff) << 4,
           sbo = uint32_t((desc >> 32) & 0x3fff) << 4;
  if ((desc >> 49) & 7) ::pptrain::emu::detail::fault("wgmma: a descriptor with a base offset (not emulated)");
  int mode = int(desc >> 62), w = mode == 1 ? 8 : mode == 2 ? 4 : mode == 3 ? 2 : 1;
  uint32_t off;
  if (!mn_major)
    off = mode == 0 ? uint32_t(mn % 8) * 16 + uint32_t(mn / 8) * sbo + uint32_t(k % 8) * 2 + uint32_t(k / 8) * lbo
                    : uint32_t(mn % 8) * 16 * w + uint32_t(mn / 8) * sbo + uint32_t(k) * 2;
  else
    off = mode == 0 ? uint32_t(mn % 8) * 2 + uint32_t(mn / 8) * sbo + uint32_t(k % 8) * 16 + uint32_t(k / 8) * lbo
                    : uint32_t(mn % (8 * w)) * 2 + uint32_t(mn / (8 * w)) * lbo + uint32_t(k % 8) * 16 * w +
                          uint32_t(k / 8) * sbo;
  uint32_t addr = start + off;
  addr ^= ((addr >> 7) & uint32_t(w - 1)) << 4;
  uint32_t window;
  size_t bytes;
  auto* base = static_cast<const unsigned char*>(::pptrain::emu::detail::shared_base(window, bytes));
  if (addr < window || addr + 2 > window + bytes)
    ::pptrain::emu::detail::fault("wgmma: descriptor element at shared address " + std::to_string(addr) +
                                  " outside dynamic shared memory");
  return base + (addr - window);
}
inline float descriptor_element(uint64_t desc, bool mn_major, int mn, int k) {
  uint16_t bits;
  std::memcpy(&bits, descriptor_address(desc, mn_major, mn, k), 2);
  return bf16_bits_to_float(bits);
}

// The shared elements a wgmma reads: A's 64×16 (unless in registers) and B's N×16.
inline void wgmma_reads(const void* operands, std::vector<const unsigned char*>& elements) {
  const auto* x = static_cast<const WgmmaArgs*>(operands);
  if (!x->a)
    for (int m = 0; m < 64; ++m)
      for (int k = 0; k < 16; ++k) elements.push_back(descriptor_address(x->desc_a, x->trans_a, m, k));
  for (int k = 0; k < 16; ++k)
    for (int j = 0; j < x->n; ++j) elements.push_back(descriptor_address(x->desc_b, x->trans_b, j, k));
}

inline void wgmma_all(void* const* lanes) {
  const auto* first = static_cast<const WgmmaArgs*>(lanes[0]);
  int n = first->n;
  for (int l = 1; l < 128; ++l) {
    const auto* x = static_cast<const WgmmaArgs*>(lanes[l]);
    if (x->n != n || (x->a == nullptr) != (first->a == nullptr) || x->desc_a != first->desc_a ||
        x->desc_b != first->desc_b || x->scale_d != first->scale_d || x->trans_a != first->trans_a ||
        x->trans_b != first->trans_b)
      ::pptrain::emu::detail::fault("wgmma: threads 0 and " + std::to_string(l) +
                                    " of the warpgroup pass different shapes, descriptors or flags");
  }
  std::vector<float> a(64 * 16), b(16 * size_t(n)), d(64 * size_t(n));
  for (int m = 0; m < 64; ++m)
    for (int k = 0; k < 16; ++k)
      if (!first->a) a[m * 16 + k] = descriptor_element(first->desc_a, first->trans_a, m, k);
  if (first->a)
    for (int l = 0; l < 128; ++l) {
      const uint32_t* r = static_cast<const WgmmaArgs*>(lanes[l])->a;
      int row0 = 16 * (l / 32), g = l % 32 / 4, t = l % 4;
      for (int reg = 0; reg < 4; ++reg) {
        int row = row0 + g + (reg & 1) * 8, col = 2 * t + (reg >> 1) * 8;
        a[row * 16 + col] = low_half(r[reg]), a[row * 16 + col + 1] = high_half(r[reg]);
      }
    }
  for (int k = 0; k < 16; ++k)
    for (int j = 0; j < n; ++j) b[k * n + j] = descriptor_element(first->desc_b, first->trans_b, j, k);
  auto d_index = [](int l, int e) {  // (row, column) of d[e] of lane l, as row·N + column
    int j = e / 4, i = e % 4;
    return std::pair<int, int>(16 * (l / 32) + l % 32 / 4 + 8 * (i / 2), 8 * j + 2 * (l % 4) + i % 2);
  };
  for (int l = 0; l < 128; ++l) {
    const float* x = static_cast<const WgmmaArgs*>(lanes[l])->d;
    for (int e = 0; e < n / 2; ++e) {
      auto [row, col] = d_index(l, e);
      d[row * n + col] = first->scale_d ? x[e] : 0.0f;
    }
  }
  for (int m = 0; m < 64; ++m)
    for (int j = 0; j < n; ++j) {
      float acc = d[m * n + j];
      for (int k = 0; k < 16; ++k) acc += a[m * 16 + k] * b[k * n + j];  // exact products, fp32 sums
      d[m * n + j] = acc;
    }
  for (int l = 0; l < 128; ++l) {
    float* x = static_cast<const WgmmaArgs*>(lanes[l])->d;
    for (int e = 0; e < n / 2; ++e) {
      auto [row, col] = d_index(l, e);
      x[e] = d[row * n + col];
    }
  }
}

}  // namespace detail

// d[0 .. n/2) (+)= A·B (a = nullptr: A from desc_a). d and a must stay alive until the
// thread's wgmma.wait_group covers the operation.
inline void wgmma_bf16(float* d, int n, const uint32_t* a, uint64_t desc_a, uint64_t desc_b, bool scale_d,
                       bool trans_a, bool trans_b) {
  if (n < 8 || n > 256 || n % 8) ::pptrain::emu::detail::fault("wgmma: N = " + std::to_string(n) + " (8..256, a multiple of 8)");
  detail::WgmmaArgs args{d, a, desc_a, desc_b, n, scale_d, trans_a, trans_b};
  ::pptrain::emu::detail::warpgroup_collective("wgmma.mma_async", &args, sizeof args, detail::wgmma_all, true,
                                                detail::wgmma_reads);
}
inline void wgmma_commit() { ::pptrain::emu::detail::async_matrix_commit(); }
inline void wgmma_wait(int pending) { ::pptrain::emu::detail::async_matrix_wait(pending); }

}  // namespace pptrain::emu::ptx

// ---- sm_90: mbarrier and the bulk tensor copy (TMA) ------------------------------------------
// A tensor map as cuTensorMapEncodeTiled makes one (kernels/tma.cuh): a bf16 tensor of up to
// 3 dimensions (dims[0] contiguous), byte strides of dimensions 1 and 2, the box a copy moves,
// and the swizzle (0 none, 3 the 128-byte pattern: Swizzle<3,4,3> on the shared address, as
// wgmma reads it). cp.async.bulk.tensor copies the box at the given coordinates into shared
// memory in box order (dims[0] fastest), elements outside the tensor as zeros, and completes
// its bytes on an mbarrier (emu.h: at once in forward order, as late as possible in reverse).
namespace pptrain::emu::ptx {

struct TensorMap {
  const void* base = nullptr;
  int rank = 0;
  uint64_t dims[3] = {1, 1, 1};
  uint64_t strides[3] = {2, 0, 0};  // bytes; strides[0] is the element size
  uint32_t box[3] = {1, 1, 1};
  int swizzle = 0;
};

inline void mbarrier_init(void* bar, int count) { ::pptrain::emu::detail::mbarrier_init(bar, count); }
inline void mbarrier_arrive(void* bar) { ::pptrain::emu::detail::mbarrier_arrive(bar, 0); }
inline void mbarrier_arrive_expect_tx(void* bar, uint32_t bytes) {
  ::pptrain::emu::detail::mbarrier_arrive(bar, bytes);
}
inline void mbarrier_wait(void* bar, int parity) { ::pptrain::emu::detail::mbarrier_wait(bar, parity); }

inline void tma_load_3d(void* dst, const TensorMap& map, int c0, int c1, int c2, void* bar) {
  uint32_t box_bytes = map.box[0] * map.box[1] * map.box[2] * 2;
  if (!::pptrain::emu::detail::in_shared(dst, box_bytes))
    ::pptrain::emu::detail::fault("cp.async.bulk.tensor: the box does not fit in shared memory at the destination");
  uint32_t dst_addr = shared_address(dst);
  if (dst_addr % (map.swizzle ? 1024 : 128))
    ::pptrain::emu::detail::fault("cp.async.bulk.tensor: destination not aligned to its swizzle pattern");
  TensorMap m = map;
  ::pptrain::emu::detail::bulk_copy(bar, dst, box_bytes, [m, dst, dst_addr, c0, c1, c2] {
    auto* out = static_cast<unsigned char*>(dst);
    for (uint32_t z = 0; z < m.box[2]; ++z)
      for (uint32_t y = 0; y < m.box[1]; ++y)
        for (uint32_t x = 0; x < m.box[0]; ++x) {
          long long g0 = c0 + long(x), g1 = c1 + long(y), g2 = c2 + long(z);
          uint16_t v = 0;
          if (g0 >= 0 && g1 >= 0 && g2 >= 0 && uint64_t(g0) < m.dims[0] && uint64_t(g1) < m.dims[1] &&
              uint64_t(g2) < m.dims[2])
            std::memcpy(&v, static_cast<const unsigned char*>(m.base) + g0 * 2 + g1 * m.strides[1] + g2 * m.strides[2], 2);
          uint32_t off = ((z * m.box[1] + y) * m.box[0] + x) * 2, addr = dst_addr + off;
          if (m.swizzle) addr ^= ((addr >> 7) & 7) << 4;
          std::memcpy(out + (addr - dst_addr), &v, 2);
        }
  });
}

}  // namespace pptrain::emu::ptx
