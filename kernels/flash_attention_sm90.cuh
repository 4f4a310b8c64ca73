// The Hopper (sm_90a) bf16 flash attention forward (flash_attention.cu only): the same
// algorithm, block shape and softmax as the mma.sync forward (flash_attention_bf16.cuh), with
// both products on warpgroup MMA (wgmma.cuh):
//   S [64 × 64]  = Q Kᵀ: wgmma m64n64k16, Q and K K-major in shared memory (descriptors)
//   O [64 × HD] += P V: wgmma m64nHDk16, P from registers (the softmax's output, already in
//                 the A-fragment layout), V MN-major in shared memory (transposed B)
// One block is one warpgroup (128 threads) and 64 query rows, as before: warp w owns rows
// 16w..16w+15 of every accumulator, so the softmax code is shared. HD 64 and 128 (the
// swizzle atom is 64 columns; HD 32 stays on the mma.sync kernel).
//
// Shared memory (dynamic, 1024-byte aligned in the shared window: the 128B swizzle pattern
// repeats at 1024 bytes, and descriptors with base offset 0 assume it): Q, then two stages of
// (K, V), each a [64][HD] tile stored as HD/64 swizzled atoms of [64 rows][64 columns]
// (8 KiB each, wgmma.cuh's swizzled_offset). HD 64: 41 KiB; HD 128: 81 KiB (above 48 KiB:
// launch() opts in), two blocks per SM.
//
// Pipeline: cp.async fills stage j + 2 while the block computes tile j + 1, as in the mma.sync
// dQ kernel; each tile's data is published to the async proxy (fence.proxy.async) and the
// warpgroup (barrier) before the wgmma that reads it.
#pragma once
#include "flash_attention_bf16.cuh"
#include "wgmma.cuh"

namespace pptrain::kernels::flash::sm90 {

using ptx::u32;

template <int HD>
struct Shape {
  static_assert(HD == 64 || HD == 128, "the Hopper forward takes head sizes 64 and 128");
  static constexpr int kAtoms = HD / 64;                      // 64-column atoms per row
  static constexpr uint32_t kAtomBytes = 64 * 128;            // [64 rows][64 bf16], 8 KiB
  static constexpr uint32_t kTileBytes = kAtoms * kAtomBytes; // a [64][HD] tile
  static constexpr size_t kBytes = 5 * size_t(kTileBytes) + 1024;  // Q, 2 × (K, V), alignment slack
};

// cp.async of 64 rows of a [*][HD] global matrix (row stride `stride` elements) into a
// swizzled [64][HD] tile (1024-byte aligned); rows ≥ valid are zero-filled.
template <int HD>
__device__ __forceinline__ void async_tile(unsigned char* tile, const bf16* src, size_t stride, int valid) {
  constexpr int kChunks = HD / 8;  // 16-byte chunks per row
  for (int idx = threadIdx.x; idx < 64 * kChunks; idx += blockDim.x) {
    int r = idx / kChunks, c = idx % kChunks;
    bool ok = r < valid;
    unsigned char* dst = tile + (c / 8) * Shape<HD>::kAtomBytes + wgmma::swizzled_offset(r, (c % 8) * 8);
    ptx::cp_async_16(dst, src + (ok ? size_t(r) * stride + c * 8 : 0), ok ? 16 : 0);
  }
}

// Descriptor of the K-major operand (rows × 16 columns) at column chunk kc of a swizzled
// [64][HD] tile at shared address `tile`: the chunk's atom, 32 bytes per 16 columns inside
// it; 8-row groups 1024 bytes apart (SBO); LBO unused for swizzled K-major layouts.
template <int HD>
__device__ __forceinline__ uint64_t k_major(uint32_t tile, int kc) {
  return wgmma::descriptor_sw128(tile + (kc / 4) * Shape<HD>::kAtomBytes + (kc % 4) * 32, 16, 1024);
}

// Descriptor of V's rows 16kk..16kk+15 as the MN-major B of P·V: 8-key groups 1024 bytes apart
// (SBO), the next 64 columns in the next atom (LBO).
template <int HD>
__device__ __forceinline__ uint64_t mn_major(uint32_t tile, int kk) {
  return wgmma::descriptor_sw128(tile + kk * 16 * 128, Shape<HD>::kAtomBytes, 1024);
}

template <int HD>
__global__ void __launch_bounds__(kThreads) forward_kernel(bf16* out, float* lse, const bf16* qkv, int t, int nh,
                                                           int nkv) {
  using S = Shape<HD>;
  constexpr int kCols = kRows;  // keys per tile
  PPTRAIN_DYNAMIC_SHARED(unsigned char, raw);  // S::kBytes
  unsigned char* smem = raw + (1024 - wgmma::smem_address(raw) % 1024) % 1024;
  unsigned char* q_tile = smem;
  auto k_tile = [&](int stage) { return smem + (1 + 2 * stage) * S::kTileBytes; };
  auto v_tile = [&](int stage) { return smem + (2 + 2 * stage) * S::kTileBytes; };
  Head head(blockIdx.y / nh, blockIdx.y % nh, t, nh, nkv, HD);
  const size_t ld = head.qkv_stride;
  int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t4 = lane % 4;
  int q0 = (gridDim.x - 1 - blockIdx.x) * kRows;  // the longest rows first: better tail balance
  int q_end = min_int(q0 + kRows, t);
  int i_lo = q0 + warp * kWarpRows + g, i_hi = i_lo + 8;  // this lane's two query rows
  float scale2 = kLog2e / sqrtf(float(HD));

  auto load_key_tile = [&](int j0, int stage) {
    if (j0 < q_end) {
      async_tile<HD>(k_tile(stage), qkv + head.k + j0 * ld, ld, t - j0);
      async_tile<HD>(v_tile(stage), qkv + head.v + j0 * ld, ld, t - j0);
    }
    ptx::cp_async_commit();  // possibly empty: one group per tile keeps wait<1> exact
  };
  async_tile<HD>(q_tile, qkv + head.q + q0 * ld, ld, q_end - q0);  // in the first tile's group
  load_key_tile(0, 0);
  load_key_tile(kCols, 1);
  uint32_t q_addr = wgmma::smem_address(q_tile);

  float o[HD / 8][4] = {};
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;  // l: this lane's columns only
  for (int j0 = 0, stage = 0; j0 < q_end; j0 += kCols, stage ^= 1) {
    ptx::cp_async_wait<1>();  // this tile (the next may be in flight)
    wgmma::fence_proxy_async();
    __syncthreads();
    uint32_t k_addr = wgmma::smem_address(k_tile(stage)), v_addr = wgmma::smem_address(v_tile(stage));
    float s[kCols / 8][4] = {};  // overwritten: the first product does not accumulate
    wgmma::fence();
    for (int kc = 0; kc < HD / 16; ++kc)
      wgmma::mma_ss_n64(reinterpret_cast<float(&)[32]>(s), k_major<HD>(q_addr, kc), k_major<HD>(k_addr, kc), kc > 0);
    wgmma::commit();
    wgmma::wait<0>();

    u32 pa[kCols / 16][4];  // P rounded to bf16: the A operand of P·V, in registers
    flash::bf16_tc::softmax_step<kCols, HD>(s, pa, o, j0, i_lo, i_hi, t4, scale2, m_lo, m_hi, l_lo, l_hi);

    wgmma::fence();  // o was rescaled and pa written by plain instructions
    for (int kk = 0; kk < kCols / 16; ++kk)
      wgmma::mma_rs_mn<HD>(reinterpret_cast<float(&)[HD / 2]>(o), pa[kk], mn_major<HD>(v_addr, kk), true);
    wgmma::commit();
    wgmma::wait<0>();
    __syncthreads();  // the warpgroup is done with this stage
    load_key_tile(j0 + 2 * kCols, stage);
  }
  flash::bf16_tc::store_forward_rows<HD>(out, lse, head, o, t, i_lo, i_hi, t4, m_lo, m_hi, l_lo, l_hi);
}

}  // namespace pptrain::kernels::flash::sm90
