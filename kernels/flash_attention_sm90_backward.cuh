// The Hopper (sm_90a) bf16 flash attention backward (flash_attention.cu only): the dK/dV and
// dQ kernels, warp-specialised over the bulk tensor copy engine like the forward, on the
// swizzled tiles and wgmma descriptors of flash_attention_sm90.cuh (whose opening comment
// describes the layouts and the shared memory of both).
#pragma once
#include "flash_attention_sm90.cuh"

namespace pptrain::kernels::flash::sm90 {

// ---- backward ------------------------------------------------------------------------------
// Both kernels warp-specialised like the forward: one consumer warpgroup (64 rows) and a
// producer warp whose lane 0 loads the block's own two tiles once (on `own`) and streams the
// other side's tiles through a ring of kStages stages (`full` / `empty` barriers, as in the
// forward). lse and delta are read from global memory by the consumers (a few values per
// thread and tile, cached).
constexpr int kBackwardThreads = kThreads + kWarp;

template <int HD>
struct Backward {
  static constexpr int kN = HD == 128 ? 32 : 64;  // columns per streamed tile (registers)
  static constexpr int kStages = HD == 128 ? 3 : 4;  // 81 KiB of shared memory either way
  using Own = Tile<HD, kRows>;                        // the block's rows: K, V or Q, dO
  using Streamed = Tile<HD, kN>;                      // a streamed tile
  static constexpr uint32_t kStageBytes = 2 * Streamed::kBytes;
  static constexpr size_t kBarriers = 2 * size_t(Own::kBytes) + size_t(kStages) * kStageBytes;  // byte offset
  static constexpr size_t kBytes = kBarriers + (1 + 2 * kStages) * 8 + 1024;
};

// The shared memory of a backward block: the two own tiles, the ring, the barriers.
template <int HD>
struct BackwardSmem {
  using B = Backward<HD>;
  unsigned char *own0, *own1, *ring;
  uint64_t *own_full, *full, *empty;
  __device__ explicit BackwardSmem(unsigned char* raw) {
    unsigned char* smem = aligned_shared(raw);
    own0 = smem, own1 = smem + B::Own::kBytes, ring = smem + 2 * B::Own::kBytes;
    own_full = reinterpret_cast<uint64_t*>(smem + B::kBarriers);
    full = own_full + 1, empty = full + B::kStages;
    if (threadIdx.x == 0) {
      tma::mbarrier_init(own_full, 1);
      for (int s = 0; s < B::kStages; ++s) tma::mbarrier_init(&full[s], 1), tma::mbarrier_init(&empty[s], kThreads);
      tma::fence_barrier_init();
    }
    __syncthreads();
  }
  __device__ unsigned char* first(int stage) const { return ring + stage * B::kStageBytes; }
  __device__ unsigned char* second(int stage) const { return first(stage) + B::Streamed::kBytes; }
};

// Both kernels' pair of score products, one wgmma group: p = A Bᵀ and dp = C Dᵀ, the four
// operands K-major tiles in shared memory (A, C [kRows × HD]; B, D [kN × HD]), issued and
// committed but not waited for (the caller waits, after its other work).
template <int HD, int kN>
__device__ __forceinline__ void issue_score_products(float (&p)[kN / 8][4], float (&dp)[kN / 8][4], uint32_t a,
                                                     uint32_t b, uint32_t c, uint32_t d) {
  wgmma::fence_operand(p), wgmma::fence_operand(dp);
  wgmma::fence();
  for (int kc = 0; kc < HD / 16; ++kc)
    wgmma::mma_ss<kN>(reinterpret_cast<float(&)[kN / 2]>(p), k_major<HD, kRows>(a, kc), k_major<HD, kN>(b, kc),
                      kc > 0);
  for (int kc = 0; kc < HD / 16; ++kc)
    wgmma::mma_ss<kN>(reinterpret_cast<float(&)[kN / 2]>(dp), k_major<HD, kRows>(c, kc), k_major<HD, kN>(d, kc),
                      kc > 0);
  wgmma::commit();
  wgmma::fence_operand(p), wgmma::fence_operand(dp);
}

// dK, dV: as bf16_tc::kv_kernel (one block per key tile of 64 and key/value head, over the
// group's query heads and their query tiles in a fixed order: no atomics), each product a
// wgmma:
//   Sᵀ [64 × kN]  = K Qᵀ      SS, K and Q K-major        dPᵀ = V dOᵀ   SS, V and dO K-major
//   dV [64 × HD] += Pᵀ dO     RS, Pᵀ in registers, dO MN-major
//   dK [64 × HD] += dSᵀ Q     RS, dSᵀ in registers, Q MN-major
// K and V are the block's own tiles; (Q, dO) stream through the ring, the (head, tile)
// sequence flattened so the pipeline runs across heads.
template <int HD>
__global__ void __launch_bounds__(kBackwardThreads)
    kv_kernel(bf16* dqkv, const __grid_constant__ tma::Map qkv_streamed, const __grid_constant__ tma::Map qkv_own,
              const __grid_constant__ tma::Map dout_streamed, const float* lse, const float* delta, int t, int nh,
              int nkv) {
  using B = Backward<HD>;
  constexpr int kN = B::kN;
  PPTRAIN_DYNAMIC_SHARED(unsigned char, raw);  // B::kBytes
  BackwardSmem<HD> sm(raw);                    // own0: K, own1: V; stages: (Q, dO)
  int bi = blockIdx.y / nkv, group = nh / nkv, first_head = blockIdx.y % nkv * group, kv = blockIdx.y % nkv;
  int k0 = blockIdx.x * kRows;                 // key tiles near 0 see the most queries: launched first
  int first = k0 / kN * kN;                    // the first query tile that sees key k0
  int per_head = (t - first + kN - 1) / kN;    // query tiles per head
  int tiles = group * per_head;

  if (threadIdx.x >= kThreads) {  // the producer warp
    if (threadIdx.x != kThreads) return;
    tma::mbarrier_arrive_expect_tx(sm.own_full, 2 * B::Own::kBytes);
    for (int a = 0; a < HD / 64; ++a) {
      tma::load_3d(sm.own0 + a * B::Own::kAtomBytes, qkv_own, (nh + kv) * HD + 64 * a, k0, bi, sm.own_full);
      tma::load_3d(sm.own1 + a * B::Own::kAtomBytes, qkv_own, (nh + nkv + kv) * HD + 64 * a, k0, bi, sm.own_full);
    }
    for (int it = 0; it < tiles; ++it) {
      int s = it % B::kStages, hi = first_head + it / per_head, i0 = first + it % per_head * kN;
      if (it >= B::kStages) tma::mbarrier_wait(&sm.empty[s], (it / B::kStages - 1) & 1);
      tma::mbarrier_arrive_expect_tx(&sm.full[s], B::kStageBytes);
      for (int a = 0; a < HD / 64; ++a) {
        tma::load_3d(sm.first(s) + a * B::Streamed::kAtomBytes, qkv_streamed, hi * HD + 64 * a, i0, bi, &sm.full[s]);
        tma::load_3d(sm.second(s) + a * B::Streamed::kAtomBytes, dout_streamed, hi * HD + 64 * a, i0, bi, &sm.full[s]);
      }
    }
    return;
  }

  int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t4 = lane % 4;
  int j_lo = k0 + warp * kWarpRows + g, j_hi = j_lo + 8;  // this lane's two key rows
  float scale = 1.0f / sqrtf(float(HD)), scale2 = scale * kLog2e;
  uint32_t k_addr = wgmma::smem_address(sm.own0), v_addr = wgmma::smem_address(sm.own1);
  float dk[HD / 8][4] = {}, dv[HD / 8][4] = {};
  auto q_of = [&](int it) { return wgmma::smem_address(sm.first(it % B::kStages)); };
  auto do_of = [&](int it) { return wgmma::smem_address(sm.second(it % B::kStages)); };
  // Sᵀ = K Qᵀ and dPᵀ = V dOᵀ of tile `it` into p, dp [16 keys × kN] per warp: waits for the
  // stage, issues both products (one wgmma group).
  auto issue_ss = [&](int it, float (&p)[kN / 8][4], float (&dp)[kN / 8][4]) {
    tma::mbarrier_wait(&sm.full[it % B::kStages], (it / B::kStages) & 1);
    issue_score_products<HD, kN>(p, dp, k_addr, q_of(it), v_addr, do_of(it));
  };
  // Tile `it`'s columns of this lane: their lse (base 2, +∞ past T: P = 0) and delta, read
  // before the tile's products are waited for.
  using Stats = float[kN / 8][2];
  auto load_stats = [&](int it, Stats& lse2, Stats& dlt) {
    Head h(bi, first_head + it / per_head, t, nh, nkv, HD);
    int i0 = first + it % per_head * kN;
    for (int n = 0; n < kN / 8; ++n)
      for (int e = 0; e < 2; ++e) {
        int i = i0 + n * 8 + 2 * t4 + e;
        lse2[n][e] = i < t ? lse[h.stats + i] * kLog2e : INFINITY;
        dlt[n][e] = i < t ? delta[h.stats + i] : 0.0f;
      }
  };
  // Pᵀ in place of Sᵀ and dSᵀ = Pᵀ ∘ (dPᵀ − delta) in place of dPᵀ, for tile `it`.
  auto probabilities = [&](int it, float (&p)[kN / 8][4], float (&dp)[kN / 8][4], const Stats& lse2,
                           const Stats& dlt) {
    int i0 = first + it % per_head * kN;
    for (int n = 0; n < kN / 8; ++n)
      for (int e = 0; e < 4; ++e) {
        int i = i0 + n * 8 + 2 * t4 + (e & 1), j = e < 2 ? j_lo : j_hi;
        p[n][e] = i < j ? 0.0f : exp2f(p[n][e] * scale2 - lse2[n][e & 1]);
        dp[n][e] = p[n][e] * (dp[n][e] - dlt[n][e & 1]);
      }
  };
  // dV += Pᵀ dO and dK += dSᵀ Q of tile `it` (one wgmma group; Pᵀ, dSᵀ from registers).
  auto issue_rs = [&](int it, u32 (&pa)[kN / 16][4], u32 (&dsa)[kN / 16][4]) {
    uint32_t q_addr = q_of(it), do_addr = do_of(it);
    wgmma::fence_operand(dv), wgmma::fence_operand(dk), wgmma::fence_operand(pa), wgmma::fence_operand(dsa);
    wgmma::fence();  // pa and dsa were written by plain instructions
    for (int kk = 0; kk < kN / 16; ++kk)
      wgmma::mma_rs_mn<HD>(reinterpret_cast<float(&)[HD / 2]>(dv), pa[kk], mn_major<HD, kN>(do_addr, kk), true);
    for (int kk = 0; kk < kN / 16; ++kk)
      wgmma::mma_rs_mn<HD>(reinterpret_cast<float(&)[HD / 2]>(dk), dsa[kk], mn_major<HD, kN>(q_addr, kk), true);
    wgmma::commit();
    wgmma::fence_operand(dv), wgmma::fence_operand(dk), wgmma::fence_operand(pa), wgmma::fence_operand(dsa);
  };
  auto release = [&](int it) { tma::mbarrier_arrive(&sm.empty[it % B::kStages]); };  // this thread is done with it

  // HD 128: the exponentials of tile `it` overlap the tensor cores' dV, dK products of tile
  // it − 1 (as the forward's softmax overlaps P·V): iteration it issues Sᵀ, dPᵀ of tile it and
  // then the products of tile it − 1, waits for the first group alone, computes Pᵀ and dSᵀ
  // while the second runs, and only after waiting for it rewrites their bf16 operands and
  // releases tile it − 1's stage. Registers a wgmma writes are read only after a wait on
  // every path. HD 64 keeps one tile at a time: there the overlapped loop needs 237
  // registers a thread (ptxas, sm_90a) against 200, which would leave one block per SM
  // instead of two, and two blocks already overlap one's exponentials with the other's
  // products; at HD 128 it is one block per SM either way (206 registers before).
  constexpr bool kOverlap = HD == 128;
  u32 pa[kN / 16][4], dsa[kN / 16][4];  // Pᵀ and dSᵀ rounded to bf16: A operands in registers
  tma::mbarrier_wait(sm.own_full, 0);
  if constexpr (!kOverlap) {
    for (int it = 0; it < tiles; ++it) {
      Stats lse2, dlt;
      load_stats(it, lse2, dlt);
      float p[kN / 8][4] = {}, dp[kN / 8][4] = {};
      issue_ss(it, p, dp);
      wgmma::wait<0>();
      wgmma::fence_operand(p), wgmma::fence_operand(dp);
      probabilities(it, p, dp, lse2, dlt);
      flash::bf16_tc::to_a<kN / 8>(pa, p);
      flash::bf16_tc::to_a<kN / 8>(dsa, dp);
      issue_rs(it, pa, dsa);
      wgmma::wait<0>();
      wgmma::fence_operand(dv), wgmma::fence_operand(dk);
      release(it);
    }
  } else {
    {
      Stats lse2, dlt;
      load_stats(0, lse2, dlt);
      float p[kN / 8][4] = {}, dp[kN / 8][4] = {};
      issue_ss(0, p, dp);
      wgmma::wait<0>();
      wgmma::fence_operand(p), wgmma::fence_operand(dp);
      probabilities(0, p, dp, lse2, dlt);
      flash::bf16_tc::to_a<kN / 8>(pa, p);
      flash::bf16_tc::to_a<kN / 8>(dsa, dp);
      wgmma::fence_operand(pa), wgmma::fence_operand(dsa);
    }
    for (int it = 1; it < tiles; ++it) {
      Stats lse2, dlt;
      load_stats(it, lse2, dlt);
      float p[kN / 8][4] = {}, dp[kN / 8][4] = {};
      issue_ss(it, p, dp);
      issue_rs(it - 1, pa, dsa);
      wgmma::wait<1>();  // Sᵀ and dPᵀ of tile it (the products of tile it − 1 may still run)
      wgmma::fence_operand(p), wgmma::fence_operand(dp);
      probabilities(it, p, dp, lse2, dlt);
      wgmma::fence_operand(p), wgmma::fence_operand(dp);
      wgmma::wait<0>();  // the products of tile it − 1: only now may pa and dsa be written
      wgmma::fence_operand(pa), wgmma::fence_operand(dsa), wgmma::fence_operand(dv), wgmma::fence_operand(dk);
      release(it - 1);
      flash::bf16_tc::to_a<kN / 8>(pa, p);
      flash::bf16_tc::to_a<kN / 8>(dsa, dp);
      wgmma::fence_operand(pa), wgmma::fence_operand(dsa);  // final before the next issue
    }
    issue_rs(tiles - 1, pa, dsa);
    wgmma::wait<0>();
    wgmma::fence_operand(dv), wgmma::fence_operand(dk);
    release(tiles - 1);
  }
  Head head(bi, first_head, t, nh, nkv, HD);  // k, v: the group's
  const size_t ld = head.qkv_stride;
  bf16* k_lo = j_lo < t ? dqkv + head.k + size_t(j_lo) * ld : nullptr;
  bf16* k_hi = j_hi < t ? dqkv + head.k + size_t(j_hi) * ld : nullptr;
  flash::bf16_tc::store_rows<HD>(k_lo, k_hi, dk, scale, scale, t4);  // S = scale · q·k
  bf16* v_lo = j_lo < t ? dqkv + head.v + size_t(j_lo) * ld : nullptr;
  bf16* v_hi = j_hi < t ? dqkv + head.v + size_t(j_hi) * ld : nullptr;
  flash::bf16_tc::store_rows<HD>(v_lo, v_hi, dv, 1.0f, 1.0f, t4);
}

// dQ: as bf16_tc::q_kernel (one block per query tile of 64 and query head, over the key
// tiles up to it), each product a wgmma:
//   S [64 × kN] = Q Kᵀ, dP = dO Vᵀ   SS, all K-major;   dQ [64 × HD] += dS K   RS, K MN-major.
// Q and dO are the block's own tiles; (K, V) stream through the ring.
template <int HD>
__global__ void __launch_bounds__(kBackwardThreads)
    q_kernel(bf16* dqkv, const __grid_constant__ tma::Map qkv_streamed, const __grid_constant__ tma::Map qkv_own,
             const __grid_constant__ tma::Map dout_own, const float* lse, const float* delta, int t, int nh, int nkv) {
  using B = Backward<HD>;
  constexpr int kN = B::kN;
  PPTRAIN_DYNAMIC_SHARED(unsigned char, raw);  // B::kBytes
  BackwardSmem<HD> sm(raw);                    // own0: Q, own1: dO; stages: (K, V)
  int bi = blockIdx.y / nh, hi = blockIdx.y % nh, kv = hi / (nh / nkv);
  Head head(bi, hi, t, nh, nkv, HD);
  int warp = threadIdx.x % kThreads / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t4 = lane % 4;
  flash::bf16_tc::QueryRows rows(head, t, lse, delta, warp, g);
  const int q0 = rows.q0, q_end = rows.q_end, tiles = (q_end + kN - 1) / kN;

  if (threadIdx.x >= kThreads) {  // the producer warp
    if (threadIdx.x != kThreads) return;
    tma::mbarrier_arrive_expect_tx(sm.own_full, 2 * B::Own::kBytes);
    for (int a = 0; a < HD / 64; ++a) {
      tma::load_3d(sm.own0 + a * B::Own::kAtomBytes, qkv_own, hi * HD + 64 * a, q0, bi, sm.own_full);
      tma::load_3d(sm.own1 + a * B::Own::kAtomBytes, dout_own, hi * HD + 64 * a, q0, bi, sm.own_full);
    }
    for (int it = 0; it < tiles; ++it) {
      int s = it % B::kStages;
      if (it >= B::kStages) tma::mbarrier_wait(&sm.empty[s], (it / B::kStages - 1) & 1);
      tma::mbarrier_arrive_expect_tx(&sm.full[s], B::kStageBytes);
      for (int a = 0; a < HD / 64; ++a) {
        tma::load_3d(sm.first(s) + a * B::Streamed::kAtomBytes, qkv_streamed, (nh + kv) * HD + 64 * a, it * kN, bi,
                     &sm.full[s]);
        tma::load_3d(sm.second(s) + a * B::Streamed::kAtomBytes, qkv_streamed, (nh + nkv + kv) * HD + 64 * a, it * kN,
                     bi, &sm.full[s]);
      }
    }
    return;
  }

  const int i_lo = rows.i_lo, i_hi = rows.i_hi;
  float scale = 1.0f / sqrtf(float(HD)), scale2 = scale * kLog2e;
  uint32_t q_addr = wgmma::smem_address(sm.own0), do_addr = wgmma::smem_address(sm.own1);
  float dq[HD / 8][4] = {};
  auto k_of = [&](int it) { return wgmma::smem_address(sm.first(it % B::kStages)); };
  // S = Q Kᵀ and dP = dO Vᵀ of key tile `it` into p, dp: waits for the stage, issues both
  // products (one wgmma group).
  auto issue_ss = [&](int it, float (&p)[kN / 8][4], float (&dp)[kN / 8][4]) {
    int s = it % B::kStages;
    tma::mbarrier_wait(&sm.full[s], (it / B::kStages) & 1);
    issue_score_products<HD, kN>(p, dp, q_addr, wgmma::smem_address(sm.first(s)), do_addr,
                                 wgmma::smem_address(sm.second(s)));
  };
  // dS = P ∘ (dP − delta) in place of dP, for key tile `it`.
  auto scores_gradient = [&](int it, const float (&p)[kN / 8][4], float (&dp)[kN / 8][4]) {
    for (int n = 0; n < kN / 8; ++n)
      for (int e = 0; e < 4; ++e) {
        int j = it * kN + n * 8 + 2 * t4 + (e & 1), i = e < 2 ? i_lo : i_hi;
        float pe = j > i ? 0.0f : exp2f(p[n][e] * scale2 - (e < 2 ? rows.lse2_lo : rows.lse2_hi));
        dp[n][e] = pe * (dp[n][e] - (e < 2 ? rows.dlt_lo : rows.dlt_hi));
      }
  };
  // dQ += dS K of key tile `it` (one wgmma group; dS from registers, K MN-major).
  auto issue_rs = [&](int it, u32 (&dsa)[kN / 16][4]) {
    uint32_t k_addr = k_of(it);
    wgmma::fence_operand(dq), wgmma::fence_operand(dsa);
    wgmma::fence();  // dsa was written by plain instructions
    for (int kk = 0; kk < kN / 16; ++kk)
      wgmma::mma_rs_mn<HD>(reinterpret_cast<float(&)[HD / 2]>(dq), dsa[kk], mn_major<HD, kN>(k_addr, kk), true);
    wgmma::commit();
    wgmma::fence_operand(dq), wgmma::fence_operand(dsa);
  };
  auto release = [&](int it) { tma::mbarrier_arrive(&sm.empty[it % B::kStages]); };  // this thread is done with it

  // As in the dK/dV kernel: the exponentials of tile `it` overlap dQ's product of tile it − 1.
  u32 dsa[kN / 16][4];  // dS rounded to bf16: the A operand in registers
  tma::mbarrier_wait(sm.own_full, 0);
  {
    float p[kN / 8][4] = {}, dp[kN / 8][4] = {};
    issue_ss(0, p, dp);
    wgmma::wait<0>();
    wgmma::fence_operand(p), wgmma::fence_operand(dp);
    scores_gradient(0, p, dp);
    flash::bf16_tc::to_a<kN / 8>(dsa, dp);
    wgmma::fence_operand(dsa);
  }
  for (int it = 1; it < tiles; ++it) {
    float p[kN / 8][4] = {}, dp[kN / 8][4] = {};
    issue_ss(it, p, dp);
    issue_rs(it - 1, dsa);
    wgmma::wait<1>();  // S and dP of tile it (dQ's product of tile it − 1 may still run)
    wgmma::fence_operand(p), wgmma::fence_operand(dp);
    scores_gradient(it, p, dp);
    wgmma::fence_operand(dp);
    wgmma::wait<0>();  // dQ's product of tile it − 1: only now may dsa be written
    wgmma::fence_operand(dsa), wgmma::fence_operand(dq);
    release(it - 1);
    flash::bf16_tc::to_a<kN / 8>(dsa, dp);
    wgmma::fence_operand(dsa);  // final before the next issue
  }
  issue_rs(tiles - 1, dsa);
  wgmma::wait<0>();
  wgmma::fence_operand(dq);
  release(tiles - 1);
  const size_t ld = head.qkv_stride;
  bf16* row_lo = i_lo < t ? dqkv + head.q + size_t(i_lo) * ld : nullptr;
  bf16* row_hi = i_hi < t ? dqkv + head.q + size_t(i_hi) * ld : nullptr;
  flash::bf16_tc::store_rows<HD>(row_lo, row_hi, dq, scale, scale, t4);
}

}  // namespace pptrain::kernels::flash::sm90
