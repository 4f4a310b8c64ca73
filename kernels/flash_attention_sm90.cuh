// The Hopper (sm_90a) bf16 flash attention kernels (flash_attention.cu only): the same
// algorithm, softmax and deterministic backward split as the mma.sync kernels
// (flash_attention_bf16.cuh), with every product on warpgroup MMA (wgmma.cuh):
//   forward  S [64 × 64] = Q Kᵀ (SS: Q, K K-major in shared memory) and O += P V (RS: P from
//            registers, already in the A-fragment layout; V MN-major, i.e. transposed B)
//   dK, dV   Sᵀ = K Qᵀ, dPᵀ = V dOᵀ (SS), dV += Pᵀ dO, dK += dSᵀ Q (RS, dO and Q MN-major)
//   dQ       S = Q Kᵀ, dP = dO Vᵀ (SS), dQ += dS K (RS, K MN-major)
// A consumer warpgroup owns 64 rows: warp w rows 16w..16w+15 of every accumulator (the wgmma
// D layout per warp is the mma.sync C layout), so the softmax and the epilogues are shared.
// HD 64 and 128 (the swizzle atom is 64 columns; HD 32 stays on the mma.sync kernels).
//
// Every kernel is warp-specialised (FlashAttention-3's structure): consumer warpgroups do the
// products and the softmax, and one thread of a producer warp loads every tile with the bulk
// tensor copy engine (tma.cuh) into shared memory guarded by mbarriers. The forward has 2
// consumer warpgroups (128 query rows), Q loaded once and K, V streamed through a ring of
// stages; within a consumer warpgroup the softmax of one key tile overlaps the tensor cores'
// work on the next tile's scores. The backward kernels have one consumer warpgroup: dK/dV
// keeps its K and V and streams (Q, dO) tiles of kN = 64 (HD 64) or 32 (HD 128: two HD-wide
// accumulators per thread already take 128 registers) rows, dQ keeps Q and dO and streams
// (K, V); the dQ kernel, and the dK/dV kernel at HD 128, overlap each tile's exponentials
// with the previous tile's accumulating products in the same way. The copy engine zero-fills rows past T (qkv and dout are mapped as [B][T][width]).
//
// Shared memory (dynamic, 1024-byte aligned in the shared window: the 128B swizzle pattern
// repeats at 1024 bytes, and descriptors with base offset 0 assume it): every tile a [R][HD]
// array of HD/64 swizzled atoms of [R rows][64 columns] (wgmma.cuh's swizzled_offset, which
// is also where the copy engine's 128-byte swizzle puts each element), serving as a K-major
// operand (its rows are M or N) and as an MN-major one (its rows are K) alike. Forward: Q and
// kStages × (K, V): 81 KiB (HD 64, 4 stages), 97 KiB (HD 128, 2); backward: 81 KiB (4 stages
// at HD 64, 3 at HD 128). Above 48 KiB launch() opts in.
//
// The backward kernels are in flash_attention_sm90_backward.cuh, over this file's tiles and
// descriptors.
//
// The emulator checks the layouts and the synchronisation (tests/test_kernels_flash_attention
// .cpp: copies land as late as the barriers allow in one fiber order, at once in the other),
// gpu-tests/test_ptx the instructions and bench/cuda/attention_check the kernels on a GPU.
#pragma once
#include "flash_attention_bf16.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

namespace pptrain::kernels::flash::sm90 {

using ptx::u32;

// A [R][HD] bf16 tile in shared memory: HD/64 swizzled atoms of [R rows][64 columns] (R·128
// bytes each, 1024-byte aligned), element (r, c) at atom c/64, byte swizzled_offset(r, c % 64).
template <int HD, int R>
struct Tile {
  static_assert(HD == 64 || HD == 128, "the Hopper kernels take head sizes 64 and 128");
  static_assert(R % 8 == 0, "whole 8-row groups (1024 bytes each)");
  static constexpr uint32_t kAtomBytes = R * 128;
  static constexpr uint32_t kBytes = HD / 64 * kAtomBytes;
};

// Descriptor of the K-major operand (rows × 16 columns) at column chunk kc of a swizzled
// [R][HD] tile at shared address `tile`: the chunk's atom, 32 bytes per 16 columns inside
// it; 8-row groups 1024 bytes apart (SBO); LBO unused for swizzled K-major layouts.
template <int HD, int R>
__device__ __forceinline__ uint64_t k_major(uint32_t tile, int kc) {
  return wgmma::descriptor_sw128(tile + (kc / 4) * Tile<HD, R>::kAtomBytes + (kc % 4) * 32, 16, 1024);
}

// Descriptor of rows 16kk..16kk+15 of a swizzled [R][HD] tile as an MN-major B (its rows
// are B's K, its columns B's N): 8-row groups 1024 bytes apart (SBO), the next 64 columns in
// the next atom (LBO).
template <int HD, int R>
__device__ __forceinline__ uint64_t mn_major(uint32_t tile, int kk) {
  return wgmma::descriptor_sw128(tile + kk * 16 * 128, Tile<HD, R>::kAtomBytes, 1024);
}

// The dynamic shared memory, advanced to the next 1024-byte boundary of the shared window.
__device__ __forceinline__ unsigned char* aligned_shared(unsigned char* raw) {
  return raw + (1024 - wgmma::smem_address(raw) % 1024) % 1024;
}

// ---- forward ---------------------------------------------------------------------------------
// Warp-specialised, FlashAttention-3's structure: a block is 2 consumer warpgroups (threads
// 0-255: query rows q0..q0+63 and q0+64..q0+127 of the block's 128) and 1 producer warp
// (threads 256-287), whose lane 0 issues every load on the copy engine: Q once, then each key
// tile's K and V into a ring of kStages stages. Stage s has two barriers: `full` (the
// producer's arrive.expect_tx plus the copies' bytes) and `empty` (an arrival from each of the
// 256 consumer threads once its warpgroup's wgmmas on the stage have completed). Consumers
// never wait for loads they do not need next, the producer never for a stage still read; no
// __syncthreads after the barriers are set up. A warpgroup whose rows end before a key tile
// still waits for and releases it (the phases of a barrier must stay in step).
constexpr int kForwardRows = 128, kForwardThreads = 2 * kThreads + kWarp;

template <int HD>
struct Forward {
  static constexpr int kStages = HD == 128 ? 2 : 4;  // shared memory: 97 KiB (HD 128), 81 KiB (HD 64)
  using QTile = Tile<HD, kForwardRows>;               // [128][HD]
  using KTile = Tile<HD, kRows>;                      // a K or V tile [64][HD]
  static constexpr uint32_t kStageBytes = 2 * KTile::kBytes;
  static constexpr size_t kBarriers = QTile::kBytes + size_t(kStages) * kStageBytes;  // byte offset
  static constexpr size_t kBytes = kBarriers + (1 + 2 * kStages) * 8 + 1024;
};

template <int HD>
__global__ void __launch_bounds__(kForwardThreads) forward_kernel(bf16* out, float* lse,
                                                                  const __grid_constant__ tma::Map q_map,
                                                                  const __grid_constant__ tma::Map kv_map, int t,
                                                                  int nh, int nkv) {
  using F = Forward<HD>;
  constexpr int kCols = kRows;  // keys per tile
  PPTRAIN_DYNAMIC_SHARED(unsigned char, raw);  // F::kBytes
  unsigned char* smem = aligned_shared(raw);
  unsigned char* q_tile = smem;
  auto k_tile = [&](int stage) { return smem + F::QTile::kBytes + stage * F::kStageBytes; };
  auto v_tile = [&](int stage) { return k_tile(stage) + F::KTile::kBytes; };
  uint64_t* q_full = reinterpret_cast<uint64_t*>(smem + F::kBarriers);
  uint64_t* full = q_full + 1;            // [kStages]
  uint64_t* empty = full + F::kStages;    // [kStages]
  int bi = blockIdx.y / nh, hi = blockIdx.y % nh, kv = hi / (nh / nkv);
  int q_col = hi * HD, k_col = (nh + kv) * HD, v_col = (nh + nkv + kv) * HD;  // columns in a qkv row
  int q0 = (gridDim.x - 1 - blockIdx.x) * kForwardRows;  // the longest rows first: better tail balance
  int q_end = min_int(q0 + kForwardRows, t);
  int tiles = (q_end + kCols - 1) / kCols;  // key tiles up to the block's last query

  if (threadIdx.x == 0) {
    tma::mbarrier_init(q_full, 1);
    for (int s = 0; s < F::kStages; ++s) tma::mbarrier_init(&full[s], 1), tma::mbarrier_init(&empty[s], 2 * kThreads);
    tma::fence_barrier_init();
  }
  __syncthreads();

  // The warpgroup index as ptxas can see it is the same on every lane of a warp (a broadcast
  // from lane 0): a branch on threadIdx.x itself counts as divergent, and wgmma issued after
  // one is serialised (ptxas C7518), which would undo the overlap below.
  const int c = __shfl_sync(kFullMask, int(threadIdx.x) / kThreads, 0);
  if (c == 2) {  // the producer warp
    if (threadIdx.x != 2 * kThreads) return;
    tma::mbarrier_arrive_expect_tx(q_full, F::QTile::kBytes);
    for (int a = 0; a < HD / 64; ++a)
      tma::load_3d(q_tile + a * F::QTile::kAtomBytes, q_map, q_col + 64 * a, q0, bi, q_full);
    for (int j = 0; j < tiles; ++j) {
      int s = j % F::kStages;
      if (j >= F::kStages) tma::mbarrier_wait(&empty[s], (j / F::kStages - 1) & 1);  // tile j − kStages released
      tma::mbarrier_arrive_expect_tx(&full[s], F::kStageBytes);
      for (int a = 0; a < HD / 64; ++a) {
        tma::load_3d(k_tile(s) + a * F::KTile::kAtomBytes, kv_map, k_col + 64 * a, j * kCols, bi, &full[s]);
        tma::load_3d(v_tile(s) + a * F::KTile::kAtomBytes, kv_map, v_col + 64 * a, j * kCols, bi, &full[s]);
      }
    }
    return;
  }

  // A consumer: warpgroup c, its warp w, lane (g, t4).
  int warp = threadIdx.x % kThreads / kWarp, lane = threadIdx.x % kWarp;
  int g = lane / 4, t4 = lane % 4;
  int r0 = q0 + c * kRows;                                // the warpgroup's first row
  int my_end = r0 < t ? min_int(r0 + kRows, t) : 0;      // keys it needs: j < my_end (none past T)
  int i_lo = r0 + warp * kWarpRows + g, i_hi = i_lo + 8;  // this lane's two query rows
  float scale2 = kLog2e / sqrtf(float(HD));
  uint32_t q_addr = wgmma::smem_address(q_tile) + uint32_t(c * kRows * 128);  // the warpgroup's 64 rows

  float o[HD / 8][4] = {};
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;  // l: this lane's columns only
  int my_tiles = (my_end + kCols - 1) / kCols;  // the key tiles this warpgroup computes
  // S of key tile j into `dst`: waits for the tile, issues the products (one wgmma group).
  auto issue_s = [&](int j, float (&dst)[kCols / 8][4]) {
    int s = j % F::kStages;
    tma::mbarrier_wait(&full[s], (j / F::kStages) & 1);
    uint32_t k_addr = wgmma::smem_address(k_tile(s));
    wgmma::fence_operand(dst);
    wgmma::fence();
    for (int kc = 0; kc < HD / 16; ++kc)
      wgmma::mma_ss<64>(reinterpret_cast<float(&)[32]>(dst), k_major<HD, kForwardRows>(q_addr, kc),
                        k_major<HD, kCols>(k_addr, kc), kc > 0);
    wgmma::commit();
    wgmma::fence_operand(dst);
  };
  // O += P_j V_j (one wgmma group; P in registers, V of tile j's stage).
  auto issue_pv = [&](int j, u32 (&p)[kCols / 16][4]) {
    uint32_t v_addr = wgmma::smem_address(v_tile(j % F::kStages));
    uint64_t desc[kCols / 16];
    for (int kk = 0; kk < kCols / 16; ++kk) desc[kk] = mn_major<HD, kCols>(v_addr, kk);
    wgmma::fence_operand(o), wgmma::fence_operand(p);
    wgmma::fence();  // o was rescaled and p written by plain instructions
    for (int kk = 0; kk < kCols / 16; ++kk)
      wgmma::mma_rs_mn<HD>(reinterpret_cast<float(&)[HD / 2]>(o), p[kk], desc[kk], true);
    wgmma::commit();
    wgmma::fence_operand(o), wgmma::fence_operand(p);
  };
  auto release = [&](int j) { tma::mbarrier_arrive(&empty[j % F::kStages]); };  // this thread is done with it

  // The softmax of tile j overlaps the tensor cores' work on P_{j-1} V_{j-1}: iteration j
  // issues S_j and then P_{j-1} V_{j-1}, waits for S_j alone, computes P_j while the second
  // product runs, and rescales O once it is done (FlashAttention-3's intra-warpgroup
  // pipelining). Registers a wgmma writes are read only after a wait every path has taken:
  // anything else makes ptxas serialise the products or insert waits of its own (C7517/8).
  u32 pa[kCols / 16][4];  // P_{j-1} rounded to bf16: the A operand of the pending P·V
  tma::mbarrier_wait(q_full, 0);
  {
    // Every block has a key tile 0, and every warpgroup issues S_0, even one whose rows all
    // lie past T (the last query block's second warpgroup multiplies zero-filled rows and
    // discards the result): a wgmma under a condition is one ptxas serialises.
    float s0[kCols / 8][4] = {};
    issue_s(0, s0);
    wgmma::wait<0>();
    float alpha_lo, alpha_hi;  // 0: o is empty
    if (my_tiles > 0) {
      flash::bf16_tc::softmax_probabilities<kCols>(s0, 0, i_lo, i_hi, t4, scale2, m_lo, m_hi, l_lo, l_hi, alpha_lo,
                                                   alpha_hi);
      flash::bf16_tc::to_a<kCols / 8>(pa, s0);
    } else {
      release(0);
    }
    wgmma::fence_operand(pa);  // final before S_1 is issued
  }
  for (int j = 1; j < tiles; ++j) {
    if (j < my_tiles) {
      float sj[kCols / 8][4] = {};
      issue_s(j, sj);
      issue_pv(j - 1, pa);
      wgmma::wait<1>();  // S_j (P_{j-1} V_{j-1} may still run)
      wgmma::fence_operand(sj);
      float alpha_lo, alpha_hi;
      flash::bf16_tc::softmax_probabilities<kCols>(sj, j * kCols, i_lo, i_hi, t4, scale2, m_lo, m_hi, l_lo, l_hi,
                                                   alpha_lo, alpha_hi);
      wgmma::fence_operand(sj);
      wgmma::wait<0>();  // P_{j-1} V_{j-1}: only now may pa and o be written
      wgmma::fence_operand(o), wgmma::fence_operand(pa);
      release(j - 1);
      flash::bf16_tc::rescale_rows<HD>(o, alpha_lo, alpha_hi);
      flash::bf16_tc::to_a<kCols / 8>(pa, sj);  // P_j rounded to bf16
      wgmma::fence_operand(pa), wgmma::fence_operand(o);  // both final before S_{j+1} is issued
    } else {
      if (j == my_tiles) {  // the warpgroup's last product
        issue_pv(j - 1, pa);
        wgmma::wait<0>();
        release(j - 1);
      }
      tma::mbarrier_wait(&full[j % F::kStages], (j / F::kStages) & 1);  // not needed, but its phase is
      release(j);
    }
  }
  if (my_tiles == tiles) {  // the last tile was the warpgroup's own (tiles ≥ 1)
    issue_pv(tiles - 1, pa);
    wgmma::wait<0>();
    release(tiles - 1);
  }
  if (r0 >= t) return;
  Head head(bi, hi, t, nh, nkv, HD);
  flash::bf16_tc::store_forward_rows<HD>(out, lse, head, o, t, i_lo, i_hi, t4, m_lo, m_hi, l_lo, l_hi);
}

}  // namespace pptrain::kernels::flash::sm90
