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
// The forward is warp-specialised (FlashAttention-3's structure): 2 consumer warpgroups (128
// query rows) and a producer warp whose one thread loads Q, K and V with the bulk tensor copy
// engine (tma.cuh) into a ring of stages guarded by mbarriers; within a consumer warpgroup
// the softmax of one key tile overlaps the tensor cores' work on the next tile's scores. The backward kernels are one
// warpgroup each, streaming tiles of kN = 64 (HD 64) or 32 (HD 128: two HD-wide accumulators
// per thread already take 128 registers) columns through two cp.async stages; each tile's
// data is published to the async proxy (fence.proxy.async) and the warpgroup (barrier)
// before the wgmma that reads it.
//
// Shared memory (dynamic, 1024-byte aligned in the shared window: the 128B swizzle pattern
// repeats at 1024 bytes, and descriptors with base offset 0 assume it): every tile a [R][HD]
// array of HD/64 swizzled atoms of [R rows][64 columns] (wgmma.cuh's swizzled_offset, which
// is also where the copy engine's 128-byte swizzle puts each element), serving as a K-major
// operand (its rows are M or N) and as an MN-major one (its rows are K) alike. Forward: Q and
// kStages × (K, V): 81 KiB (HD 64, 4 stages), 97 KiB (HD 128, 2); dK/dV: the block's K and V
// and two stages of (Q, dO, lse, delta): 50 / 65.5 KiB; dQ: the block's Q and dO and two
// stages of (K, V): 49 / 65 KiB. Above 48 KiB launch() opts in.
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

template <int HD>
struct Shape {
  static constexpr int kN = HD == 128 ? 32 : 64;  // backward: columns per streamed tile (registers)
  using Rows = Tile<HD, kRows>;                    // the block's own 64 rows
  using Cols = Tile<HD, kN>;                       // a streamed backward tile
  // Dynamic shared memory of the backward kernels, with 1024 bytes of slack for the alignment.
  static constexpr size_t kKvBytes = 2 * size_t(Rows::kBytes) + 4 * size_t(Cols::kBytes) + 4 * kN * 4 + 1024;
  static constexpr size_t kQBytes = 2 * size_t(Rows::kBytes) + 4 * size_t(Cols::kBytes) + 1024;
};

// cp.async of R rows of a [*][HD] global matrix (row stride `stride` elements) into a
// swizzled [R][HD] tile; rows ≥ valid are zero-filled.
template <int HD, int R>
__device__ __forceinline__ void async_tile(unsigned char* tile, const bf16* src, size_t stride, int valid) {
  constexpr int kChunks = HD / 8;  // 16-byte chunks per row
  for (int idx = threadIdx.x; idx < R * kChunks; idx += blockDim.x) {
    int r = idx / kChunks, c = idx % kChunks;
    bool ok = r < valid;
    unsigned char* dst = tile + (c / 8) * Tile<HD, R>::kAtomBytes + wgmma::swizzled_offset(r, (c % 8) * 8);
    ptx::cp_async_16(dst, src + (ok ? size_t(r) * stride + c * 8 : 0), ok ? 16 : 0);
  }
}

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

  if (threadIdx.x >= 2 * kThreads) {  // the producer warp
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
  int c = threadIdx.x / kThreads, warp = threadIdx.x % kThreads / kWarp, lane = threadIdx.x % kWarp;
  int g = lane / 4, t4 = lane % 4;
  int r0 = q0 + c * kRows;                                // the warpgroup's first row
  int my_end = r0 < t ? min_int(r0 + kRows, t) : 0;      // keys it needs: j < my_end (none past T)
  int i_lo = r0 + warp * kWarpRows + g, i_hi = i_lo + 8;  // this lane's two query rows
  float scale2 = kLog2e / sqrtf(float(HD));
  uint32_t q_addr = wgmma::smem_address(q_tile) + uint32_t(c * kRows * 128);  // the warpgroup's 64 rows

  float o[HD / 8][4] = {};
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;  // l: this lane's columns only
  // S of key tile j into `dst`: waits for the tile, issues the products (one wgmma group).
  int my_tiles = (my_end + kCols - 1) / kCols;  // the key tiles this warpgroup computes
  auto issue_s = [&](int j, float (&dst)[kCols / 8][4]) {
    int s = j % F::kStages;
    tma::mbarrier_wait(&full[s], (j / F::kStages) & 1);
    uint32_t k_addr = wgmma::smem_address(k_tile(s));
    wgmma::fence();
    for (int kc = 0; kc < HD / 16; ++kc)
      wgmma::mma_ss<64>(reinterpret_cast<float(&)[32]>(dst), k_major<HD, kForwardRows>(q_addr, kc),
                        k_major<HD, kCols>(k_addr, kc), kc > 0);
    wgmma::commit();
  };
  // The softmax of tile j overlaps the tensor cores' work on S of tile j + 1: S_{j+1} is issued
  // before the softmax of S_j and waited for only after P_j V_j (FlashAttention-3's
  // intra-warpgroup pipelining), so two score tiles live in registers.
  float s_cur[kCols / 8][4] = {}, s_next[kCols / 8][4] = {};
  tma::mbarrier_wait(q_full, 0);
  if (my_tiles > 0) issue_s(0, s_cur);
  for (int j = 0; j < tiles; ++j) {
    int s = j % F::kStages, j0 = j * kCols;
    if (j < my_tiles) {
      if (j + 1 < my_tiles) {
        issue_s(j + 1, s_next);
        wgmma::wait<1>();  // S_j (S_{j+1} may still run)
      } else {
        wgmma::wait<0>();
      }
      u32 pa[kCols / 16][4];  // P rounded to bf16: the A operand of P·V, in registers
      flash::bf16_tc::softmax_step<kCols, HD>(s_cur, pa, o, j0, i_lo, i_hi, t4, scale2, m_lo, m_hi, l_lo, l_hi);
      uint32_t v_addr = wgmma::smem_address(v_tile(s));
      wgmma::fence();  // o was rescaled and pa written by plain instructions
      for (int kk = 0; kk < kCols / 16; ++kk)
        wgmma::mma_rs_mn<HD>(reinterpret_cast<float(&)[HD / 2]>(o), pa[kk], mn_major<HD, kCols>(v_addr, kk), true);
      wgmma::commit();
      wgmma::wait<0>();  // P_j V_j, and S_{j+1}
      for (int n = 0; n < kCols / 8; ++n)
        for (int e = 0; e < 4; ++e) s_cur[n][e] = s_next[n][e];
    } else {
      tma::mbarrier_wait(&full[s], (j / F::kStages) & 1);  // not needed, but its phase is
    }
    tma::mbarrier_arrive(&empty[s]);  // this thread is done with the stage
  }
  if (r0 >= t) return;
  Head head(bi, hi, t, nh, nkv, HD);
  flash::bf16_tc::store_forward_rows<HD>(out, lse, head, o, t, i_lo, i_hi, t4, m_lo, m_hi, l_lo, l_hi);
}

// ---- backward: dK, dV -----------------------------------------------------------------------
// As bf16_tc::kv_kernel (one block per key tile of 64 and key/value head, over the group's
// query heads and their query tiles in a fixed order: no atomics), each product a wgmma:
//   Sᵀ [64 × kN]  = K Qᵀ      SS, K and Q K-major        dPᵀ = V dOᵀ   SS, V and dO K-major
//   dV [64 × HD] += Pᵀ dO     RS, Pᵀ in registers, dO MN-major
//   dK [64 × HD] += dSᵀ Q     RS, dSᵀ in registers, Q MN-major
// K and V of the block stay in shared memory; the query tiles (Q, dO, lse, delta) stream
// through two stages, the (head, tile) sequence flattened so the pipeline runs across heads.
template <int HD>
__global__ void __launch_bounds__(kThreads)
    kv_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* delta, int t, int nh,
              int nkv) {
  using S = Shape<HD>;
  using RowsT = typename S::Rows;
  using ColsT = typename S::Cols;
  constexpr int kN = S::kN;
  PPTRAIN_DYNAMIC_SHARED(unsigned char, raw);  // S::kKvBytes
  unsigned char* smem = aligned_shared(raw);
  unsigned char* k_tile = smem;                               // [64][HD], the block's keys
  unsigned char* v_tile = smem + RowsT::kBytes;               // [64][HD]
  auto q_tile = [&](int stage) { return smem + 2 * RowsT::kBytes + (2 * stage) * ColsT::kBytes; };
  auto do_tile = [&](int stage) { return smem + 2 * RowsT::kBytes + (2 * stage + 1) * ColsT::kBytes; };
  float* stats = reinterpret_cast<float*>(smem + 2 * RowsT::kBytes + 4 * ColsT::kBytes);  // [2][lse2 | delta][kN]
  int bi = blockIdx.y / nkv, group = nh / nkv, first_head = blockIdx.y % nkv * group;
  Head head(bi, first_head, t, nh, nkv, HD);  // k, v: the group's
  const size_t ld = head.qkv_stride;
  int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t4 = lane % 4;
  int k0 = blockIdx.x * kRows;  // key tiles near 0 see the most queries: launched first
  int j_lo = k0 + warp * kWarpRows + g, j_hi = j_lo + 8;  // this lane's two key rows
  float scale = 1.0f / sqrtf(float(HD)), scale2 = scale * kLog2e;
  int first = k0 / kN * kN;                    // the first query tile that sees key k0
  int per_head = (t - first + kN - 1) / kN;    // query tiles per head
  int tiles = group * per_head;

  // Query tile `it` of the flattened (head, tile) sequence into `stage`; its statistics with
  // plain stores (published by the barrier before they are read), +∞ lse past T (P = 0).
  auto load_query_tile = [&](int it, int stage) {
    if (it < tiles) {
      Head h(bi, first_head + it / per_head, t, nh, nkv, HD);
      int i0 = first + it % per_head * kN;
      async_tile<HD, kN>(q_tile(stage), qkv + h.q + i0 * ld, ld, t - i0);
      async_tile<HD, kN>(do_tile(stage), dout + h.row + i0 * h.row_stride, h.row_stride, t - i0);
      for (int c = threadIdx.x; c < kN; c += blockDim.x) {
        bool valid = i0 + c < t;
        stats[stage * 2 * kN + c] = valid ? lse[h.stats + i0 + c] * kLog2e : INFINITY;
        stats[stage * 2 * kN + kN + c] = valid ? delta[h.stats + i0 + c] : 0.0f;
      }
    }
    ptx::cp_async_commit();  // possibly empty: one group per tile keeps wait<1> exact
  };
  int k_valid = min_int(kRows, t - k0);
  async_tile<HD, kRows>(k_tile, qkv + head.k + k0 * ld, ld, k_valid);  // in the first tile's group
  async_tile<HD, kRows>(v_tile, qkv + head.v + k0 * ld, ld, k_valid);
  load_query_tile(0, 0);
  load_query_tile(1, 1);
  uint32_t k_addr = wgmma::smem_address(k_tile), v_addr = wgmma::smem_address(v_tile);

  float dk[HD / 8][4] = {}, dv[HD / 8][4] = {};
  for (int it = 0, stage = 0; it < tiles; ++it, stage ^= 1) {
    ptx::cp_async_wait<1>();  // this tile (the next may be in flight)
    wgmma::fence_proxy_async();
    __syncthreads();
    int i0 = first + it % per_head * kN;
    uint32_t q_addr = wgmma::smem_address(q_tile(stage)), do_addr = wgmma::smem_address(do_tile(stage));
    const float* lse2 = stats + stage * 2 * kN;
    const float* dlt = lse2 + kN;
    float p[kN / 8][4] = {}, dp[kN / 8][4] = {};  // Sᵀ then Pᵀ; dPᵀ then dSᵀ [16 keys × kN] per warp
    wgmma::fence();
    for (int kc = 0; kc < HD / 16; ++kc)
      wgmma::mma_ss<kN>(reinterpret_cast<float(&)[kN / 2]>(p), k_major<HD, kRows>(k_addr, kc),
                        k_major<HD, kN>(q_addr, kc), kc > 0);
    for (int kc = 0; kc < HD / 16; ++kc)
      wgmma::mma_ss<kN>(reinterpret_cast<float(&)[kN / 2]>(dp), k_major<HD, kRows>(v_addr, kc),
                        k_major<HD, kN>(do_addr, kc), kc > 0);
    wgmma::commit();
    wgmma::wait<0>();
    for (int n = 0; n < kN / 8; ++n)
      for (int e = 0; e < 4; ++e) {
        int col = n * 8 + 2 * t4 + (e & 1), i = i0 + col, j = e < 2 ? j_lo : j_hi;
        p[n][e] = i < j ? 0.0f : exp2f(p[n][e] * scale2 - lse2[col]);
        dp[n][e] = p[n][e] * (dp[n][e] - dlt[col]);
      }
    u32 pa[kN / 16][4], dsa[kN / 16][4];  // Pᵀ and dSᵀ rounded to bf16: A operands in registers
    flash::bf16_tc::to_a<kN / 8>(pa, p);
    flash::bf16_tc::to_a<kN / 8>(dsa, dp);
    wgmma::fence();
    for (int kk = 0; kk < kN / 16; ++kk)
      wgmma::mma_rs_mn<HD>(reinterpret_cast<float(&)[HD / 2]>(dv), pa[kk], mn_major<HD, kN>(do_addr, kk), true);
    for (int kk = 0; kk < kN / 16; ++kk)
      wgmma::mma_rs_mn<HD>(reinterpret_cast<float(&)[HD / 2]>(dk), dsa[kk], mn_major<HD, kN>(q_addr, kk), true);
    wgmma::commit();
    wgmma::wait<0>();
    __syncthreads();  // the warpgroup is done with this stage
    load_query_tile(it + 2, stage);
  }
  bf16* k_lo = j_lo < t ? dqkv + head.k + size_t(j_lo) * ld : nullptr;
  bf16* k_hi = j_hi < t ? dqkv + head.k + size_t(j_hi) * ld : nullptr;
  flash::bf16_tc::store_rows<HD>(k_lo, k_hi, dk, scale, scale, t4);  // S = scale · q·k
  bf16* v_lo = j_lo < t ? dqkv + head.v + size_t(j_lo) * ld : nullptr;
  bf16* v_hi = j_hi < t ? dqkv + head.v + size_t(j_hi) * ld : nullptr;
  flash::bf16_tc::store_rows<HD>(v_lo, v_hi, dv, 1.0f, 1.0f, t4);
}

// ---- backward: dQ ---------------------------------------------------------------------------
// As bf16_tc::q_kernel (one block per query tile of 64 and query head, over the key tiles up
// to it), each product a wgmma:
//   S [64 × kN] = Q Kᵀ, dP = dO Vᵀ   SS, all K-major;   dQ [64 × HD] += dS K   RS, K MN-major.
template <int HD>
__global__ void __launch_bounds__(kThreads)
    q_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* delta, int t, int nh,
             int nkv) {
  using S = Shape<HD>;
  using RowsT = typename S::Rows;
  using ColsT = typename S::Cols;
  constexpr int kN = S::kN;
  PPTRAIN_DYNAMIC_SHARED(unsigned char, raw);  // S::kQBytes
  unsigned char* smem = aligned_shared(raw);
  unsigned char* q_tile = smem;                    // [64][HD], the block's queries
  unsigned char* do_tile = smem + RowsT::kBytes;   // [64][HD]
  auto k_tile = [&](int stage) { return smem + 2 * RowsT::kBytes + (2 * stage) * ColsT::kBytes; };
  auto v_tile = [&](int stage) { return smem + 2 * RowsT::kBytes + (2 * stage + 1) * ColsT::kBytes; };
  Head head(blockIdx.y / nh, blockIdx.y % nh, t, nh, nkv, HD);
  const size_t ld = head.qkv_stride;
  int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t4 = lane % 4;
  flash::bf16_tc::QueryRows rows(head, t, lse, delta, warp, g);
  const int q0 = rows.q0, q_end = rows.q_end, i_lo = rows.i_lo, i_hi = rows.i_hi;
  const float lse2_lo = rows.lse2_lo, lse2_hi = rows.lse2_hi, dlt_lo = rows.dlt_lo, dlt_hi = rows.dlt_hi;
  float scale = 1.0f / sqrtf(float(HD)), scale2 = scale * kLog2e;

  auto load_key_tile = [&](int j0, int stage) {
    if (j0 < q_end) {
      async_tile<HD, kN>(k_tile(stage), qkv + head.k + j0 * ld, ld, t - j0);
      async_tile<HD, kN>(v_tile(stage), qkv + head.v + j0 * ld, ld, t - j0);
    }
    ptx::cp_async_commit();  // possibly empty: one group per tile keeps wait<1> exact
  };
  async_tile<HD, kRows>(q_tile, qkv + head.q + q0 * ld, ld, q_end - q0);  // in the first tile's group
  async_tile<HD, kRows>(do_tile, dout + head.row + q0 * head.row_stride, head.row_stride, q_end - q0);
  load_key_tile(0, 0);
  load_key_tile(kN, 1);
  uint32_t q_addr = wgmma::smem_address(q_tile), do_addr = wgmma::smem_address(do_tile);

  float dq[HD / 8][4] = {};
  for (int j0 = 0, stage = 0; j0 < q_end; j0 += kN, stage ^= 1) {
    ptx::cp_async_wait<1>();  // this tile (the next may be in flight)
    wgmma::fence_proxy_async();
    __syncthreads();
    uint32_t k_addr = wgmma::smem_address(k_tile(stage)), v_addr = wgmma::smem_address(v_tile(stage));
    float p[kN / 8][4] = {}, dp[kN / 8][4] = {};
    wgmma::fence();
    for (int kc = 0; kc < HD / 16; ++kc)
      wgmma::mma_ss<kN>(reinterpret_cast<float(&)[kN / 2]>(p), k_major<HD, kRows>(q_addr, kc),
                        k_major<HD, kN>(k_addr, kc), kc > 0);
    for (int kc = 0; kc < HD / 16; ++kc)
      wgmma::mma_ss<kN>(reinterpret_cast<float(&)[kN / 2]>(dp), k_major<HD, kRows>(do_addr, kc),
                        k_major<HD, kN>(v_addr, kc), kc > 0);
    wgmma::commit();
    wgmma::wait<0>();
    for (int n = 0; n < kN / 8; ++n)
      for (int e = 0; e < 4; ++e) {
        int j = j0 + n * 8 + 2 * t4 + (e & 1), i = e < 2 ? i_lo : i_hi;
        float pe = j > i ? 0.0f : exp2f(p[n][e] * scale2 - (e < 2 ? lse2_lo : lse2_hi));
        dp[n][e] = pe * (dp[n][e] - (e < 2 ? dlt_lo : dlt_hi));  // dS
      }
    u32 dsa[kN / 16][4];
    flash::bf16_tc::to_a<kN / 8>(dsa, dp);
    wgmma::fence();
    for (int kk = 0; kk < kN / 16; ++kk)
      wgmma::mma_rs_mn<HD>(reinterpret_cast<float(&)[HD / 2]>(dq), dsa[kk], mn_major<HD, kN>(k_addr, kk), true);
    wgmma::commit();
    wgmma::wait<0>();
    __syncthreads();  // the warpgroup is done with this stage
    load_key_tile(j0 + 2 * kN, stage);
  }
  bf16* row_lo = i_lo < t ? dqkv + head.q + size_t(i_lo) * ld : nullptr;
  bf16* row_hi = i_hi < t ? dqkv + head.q + size_t(i_hi) * ld : nullptr;
  flash::bf16_tc::store_rows<HD>(row_lo, row_hi, dq, scale, scale, t4);
}

}  // namespace pptrain::kernels::flash::sm90
