// The bf16 flash attention kernels (flash_attention.cu only): FlashAttention-2 on tensor
// cores with mma.sync m16n8k16, ldmatrix and cp.async (ptx.cuh).
//
// Every kernel is one block of 4 warps; warp w owns 16 "rows" of the block's 64 (query rows
// in the forward and dQ kernels, key rows in the dK/dV kernel) and streams over tiles of kN
// "columns" (the other side) staged in shared memory. Everything a warp accumulates stays in
// registers in the mma C layout (ptx.cuh): lane (g, t) holds rows g and g + 8 of its 16 and,
// of every 8-column tile, columns 2t and 2t + 1. A row's softmax statistics are therefore
// spread over the 4 lanes of a quad (shuffles with xor 1 and 2), and a score tile becomes the
// A operand of the next product in registers (ptx::pack_a_from_c): S and P never touch shared
// memory, unlike the WMMA version before, which went through a scratch tile per product.
//
// Shared tiles are row-major [rows][HD + 8] bf16: the 16 bytes of padding put the 8 rows an
// ldmatrix reads into 8 different groups of 4 banks (row strides of 80, 144, 272 bytes),
// and keep every row 16-byte aligned for cp.async. Each kernel's tiles are one block of
// dynamic shared memory (the launcher passes Shape's byte counts), at most 36 KiB (HD 64: 36
// KiB for dQ; HD 128: 34.3 KiB), so two blocks fit an SM of 100 KiB or more, and under 48
// KiB no opt-in attribute is needed.
//
// Pipelining (cp.async groups, completed per thread by cp_async_wait<N> and published to the
// block by the barrier after it):
//  - forward: one K and one V buffer. K_{j+1} streams in while the block does the softmax and
//    P·V_j, V_{j+1} while it does Q·K_{j+1}ᵀ (FlashAttention-2's order).
//  - dQ: two stages of (K, V); tile j + 2 loads while tile j + 1 is computed.
//  - dK/dV: the query tile's Q and dO in two groups: Sᵀ = K Qᵀ starts when Q has landed.
#pragma once
#include "flash_attention_tiles.cuh"
#include "ptx.cuh"

namespace pptrain::kernels::flash::bf16_tc {

using ptx::u32;

template <int HD>
struct Shape {
  static constexpr int kLd = HD + 8;                 // shared tile row stride (elements)
  static constexpr int kN = HD == 128 ? 32 : 64;     // columns per streamed tile (dQ, dK/dV)
  static constexpr int kChunks = HD / 16;            // k16 chunks of a head vector
  static constexpr int kHdTiles = HD / 8;            // n8 tiles of a head vector
  // Bytes of static shared memory of each kernel.
  static constexpr size_t kForwardBytes = 2 * size_t(kRows) * kLd * sizeof(bf16);
  static constexpr size_t kQBytes = 4 * size_t(kN) * kLd * sizeof(bf16);
  static constexpr size_t kKvBytes = (size_t(kRows) + 2 * kN) * kLd * sizeof(bf16) + 2 * kN * sizeof(float);
  static constexpr size_t kMaxBytes = kForwardBytes > kQBytes ? (kForwardBytes > kKvBytes ? kForwardBytes : kKvBytes)
                                                              : (kQBytes > kKvBytes ? kQBytes : kKvBytes);
  static_assert(kMaxBytes <= 48 * 1024, "static shared memory over 48 KiB");
  static_assert(2 * kN >= kRows, "a dQ stage holds the 64 staged rows of Q or dO");
};

// cp.async of rows [0, rows) of a [*][HD] global matrix (row stride `stride` elements) into a
// shared [rows][HD + 8] tile; rows ≥ valid are zero-filled (their source address is row 0,
// which is never read). Every thread issues its share of 16-byte chunks; the caller commits.
template <int HD>
__device__ __forceinline__ void async_tile(bf16* dst, const bf16* src, size_t stride, int rows, int valid) {
  constexpr int kChunks = HD / 8;
  for (int idx = threadIdx.x; idx < rows * kChunks; idx += blockDim.x) {
    int r = idx / kChunks, c = idx % kChunks;
    bool ok = r < valid;
    ptx::cp_async_16(dst + r * Shape<HD>::kLd + c * 8, src + (ok ? size_t(r) * stride + c * 8 : 0), ok ? 16 : 0);
  }
}

// Sum of v over the 4 lanes of the quad (the lanes that share a row of a C fragment).
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(kFullMask, v, 1);
  return v + __shfl_xor_sync(kFullMask, v, 2);
}
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(kFullMask, v, 1));
  return fmaxf(v, __shfl_xor_sync(kFullMask, v, 2));
}

// acc[n] (n8 tiles of a [16 × 8·N] result) += A · Bᵀ-of-rows: A the warp's k16 fragments
// a[0..K-1] (registers), B = tileᵀ for a shared [8·N][HD] tile (rows = result columns).
template <int HD, int N>
__device__ __forceinline__ void product_with_rows(float (&acc)[N][4], const u32 (&a)[HD / 16][4], const bf16* tile,
                                                  int lane) {
  for (int c = 0; c < HD / 16; ++c)
    for (int n2 = 0; n2 < N / 2; ++n2) {
      u32 b[4];
      ptx::load_b_of_rows(b, tile + n2 * 16 * Shape<HD>::kLd + c * 16, Shape<HD>::kLd, lane);
      ptx::mma_bf16_16816(acc[2 * n2], a[c], b);
      ptx::mma_bf16_16816(acc[2 * n2 + 1], a[c], b + 2);
    }
}

// acc[d] (n8 tiles of a [16 × HD] result) += P · tile: P the warp's [16 × 16·K] operand as A
// fragments p[0..K-1], `tile` a shared [16·K][HD] tile.
template <int HD, int K>
__device__ __forceinline__ void product_with_tile(float (&acc)[HD / 8][4], const u32 (&p)[K][4], const bf16* tile,
                                                  int lane) {
  for (int k = 0; k < K; ++k)
    for (int d2 = 0; d2 < HD / 16; ++d2) {
      u32 b[4];
      ptx::load_b_of_cols(b, tile + k * 16 * Shape<HD>::kLd + d2 * 16, Shape<HD>::kLd, lane);
      ptx::mma_bf16_16816(acc[2 * d2], p[k], b);
      ptx::mma_bf16_16816(acc[2 * d2 + 1], p[k], b + 2);
    }
}

// A fragments of all k16 chunks of an [16 × 8·N] result held in C tiles.
template <int N>
__device__ __forceinline__ void to_a(u32 (&a)[N / 2][4], const float (&c)[N][4]) {
  for (int k = 0; k < N / 2; ++k) ptx::pack_a_from_c(a[k], c[2 * k], c[2 * k + 1]);
}

// Two bf16 to global memory as one 4-byte store (p 4-byte aligned).
__device__ __forceinline__ void store_pair(bf16* p, u32 v) {
#ifdef PPTRAIN_EMULATED
  std::memcpy(p, &v, 4);
#else
  *reinterpret_cast<u32*>(p) = v;
#endif
}

// Rows g and g + 8 of the warp's [16 × HD] C tiles, scaled, into global rows row_lo / row_hi
// (nullptr: past T, not stored) as bf16 pairs.
template <int HD>
__device__ __forceinline__ void store_rows(bf16* row_lo, bf16* row_hi, const float (&acc)[HD / 8][4], float scale_lo,
                                           float scale_hi, int t4) {
  for (int n = 0; n < HD / 8; ++n) {
    int d = n * 8 + 2 * t4;
    if (row_lo) store_pair(row_lo + d, ptx::pack_bf16(acc[n][0] * scale_lo, acc[n][1] * scale_lo));
    if (row_hi) store_pair(row_hi + d, ptx::pack_bf16(acc[n][2] * scale_hi, acc[n][3] * scale_hi));
  }
}

// One online-softmax step of the forward over the warp's scores S [16 × kCols] of the key tile
// at j0 (C tiles; the lane's rows i_lo = row g and i_hi = row g + 8): scale to base 2, mask
// j > i to −∞ (a no-op below the diagonal), update the running max m and this lane's share of
// the sum l (l sums the unrounded P), and leave P = 2^(S − m') in s (to_a rounds it to bf16
// as the A fragments of the P·V product); return the factors α = 2^(m − m') by which the
// accumulators must be rescaled before P·V adds to them (rescale_rows). Column 0 is visible to
// every row, so m' is finite after the first tile; before, m = −∞ and α = 2^(−∞) = 0
// multiplies the empty accumulators.
template <int kCols>
__device__ __forceinline__ void softmax_probabilities(float (&s)[kCols / 8][4], int j0, int i_lo, int i_hi, int t4,
                                                      float scale2, float& m_lo, float& m_hi, float& l_lo,
                                                      float& l_hi, float& alpha_lo, float& alpha_hi) {
  float mx_lo = m_lo, mx_hi = m_hi;
  for (int n = 0; n < kCols / 8; ++n)
    for (int e = 0; e < 2; ++e) {
      int j = j0 + n * 8 + 2 * t4 + e;
      s[n][e] = j > i_lo ? -INFINITY : s[n][e] * scale2;
      s[n][2 + e] = j > i_hi ? -INFINITY : s[n][2 + e] * scale2;
      mx_lo = fmaxf(mx_lo, s[n][e]), mx_hi = fmaxf(mx_hi, s[n][2 + e]);
    }
  mx_lo = quad_max(mx_lo), mx_hi = quad_max(mx_hi);
  alpha_lo = exp2f(m_lo - mx_lo), alpha_hi = exp2f(m_hi - mx_hi);
  float sum_lo = 0.0f, sum_hi = 0.0f;
  for (int n = 0; n < kCols / 8; ++n)
    for (int e = 0; e < 2; ++e) {
      s[n][e] = exp2f(s[n][e] - mx_lo), sum_lo += s[n][e];
      s[n][2 + e] = exp2f(s[n][2 + e] - mx_hi), sum_hi += s[n][2 + e];
    }
  m_lo = mx_lo, m_hi = mx_hi;
  l_lo = alpha_lo * l_lo + sum_lo, l_hi = alpha_hi * l_hi + sum_hi;
}

// o's rows (the lane's i_lo in [0..1], i_hi in [2..3]) times their softmax rescale factors.
template <int HD>
__device__ __forceinline__ void rescale_rows(float (&o)[HD / 8][4], float alpha_lo, float alpha_hi) {
  for (int n = 0; n < HD / 8; ++n) o[n][0] *= alpha_lo, o[n][1] *= alpha_lo, o[n][2] *= alpha_hi, o[n][3] *= alpha_hi;
}

// Both of the above, for a kernel whose accumulators are idle during the softmax.
template <int kCols, int HD>
__device__ __forceinline__ void softmax_step(float (&s)[kCols / 8][4], u32 (&pa)[kCols / 16][4],
                                             float (&o)[HD / 8][4], int j0, int i_lo, int i_hi, int t4,
                                             float scale2, float& m_lo, float& m_hi, float& l_lo, float& l_hi) {
  float alpha_lo, alpha_hi;
  softmax_probabilities<kCols>(s, j0, i_lo, i_hi, t4, scale2, m_lo, m_hi, l_lo, l_hi, alpha_lo, alpha_hi);
  rescale_rows<HD>(o, alpha_lo, alpha_hi);
  to_a<kCols / 8>(pa, s);
}

// The forward's epilogue: out rows = O / l, lse = (m + log2 l) · ln 2 for the lane's rows
// (rows at or past T are not stored).
template <int HD>
__device__ __forceinline__ void store_forward_rows(bf16* out, float* lse, const Head& head, float (&o)[HD / 8][4],
                                                   int t, int i_lo, int i_hi, int t4, float m_lo, float m_hi,
                                                   float l_lo, float l_hi) {
  l_lo = quad_sum(l_lo), l_hi = quad_sum(l_hi);
  bf16* row_lo = i_lo < t ? out + head.row + size_t(i_lo) * head.row_stride : nullptr;
  bf16* row_hi = i_hi < t ? out + head.row + size_t(i_hi) * head.row_stride : nullptr;
  store_rows<HD>(row_lo, row_hi, o, 1.0f / l_lo, 1.0f / l_hi, t4);
  if (t4 == 0 && row_lo) lse[head.stats + i_lo] = (m_lo + log2f(l_lo)) * kLn2;
  if (t4 == 0 && row_hi) lse[head.stats + i_hi] = (m_hi + log2f(l_hi)) * kLn2;
}

// The dQ kernels' block of 64 query rows (the last tile first: the longest rows first gives
// better tail balance) and this lane's two rows g and g + 8 of warp `warp`, with their lse in
// base 2 (+∞ past T: P = 0 there) and delta.
struct QueryRows {
  int q0, q_end, i_lo, i_hi;
  float lse2_lo, lse2_hi, dlt_lo, dlt_hi;
  __device__ QueryRows(const Head& head, int t, const float* lse, const float* delta, int warp, int g) {
    q0 = (gridDim.x - 1 - blockIdx.x) * kRows;
    q_end = min_int(q0 + kRows, t);
    i_lo = q0 + warp * kWarpRows + g, i_hi = i_lo + 8;
    lse2_lo = i_lo < t ? lse[head.stats + i_lo] * kLog2e : INFINITY;
    lse2_hi = i_hi < t ? lse[head.stats + i_hi] * kLog2e : INFINITY;
    dlt_lo = i_lo < t ? delta[head.stats + i_lo] : 0.0f;
    dlt_hi = i_hi < t ? delta[head.stats + i_hi] : 0.0f;
  }
};

// ---- forward ---------------------------------------------------------------------------------
// One block per (query tile of 64, b·h); S = Q Kᵀ · log2(e)/√HD per key tile of 64 up to the
// diagonal, online softmax in base 2, O += P V; out = O / l, lse = (m + log2 l) · ln 2.
template <int HD>
__global__ void __launch_bounds__(kThreads) forward_kernel(bf16* out, float* lse, const bf16* qkv, int t, int nh,
                                                           int nkv) {
  using S = Shape<HD>;
  constexpr int kCols = kRows;                                   // keys per tile
  PPTRAIN_DYNAMIC_SHARED(bf16, smem);     // S::kForwardBytes
  bf16* k_tile = smem;                    // [64][HD + 8]
  bf16* v_tile = smem + kCols * S::kLd;   // [64][HD + 8]; first Q's staging
  Head head(blockIdx.y / nh, blockIdx.y % nh, t, nh, nkv, HD);
  const size_t ld = head.qkv_stride;
  int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t4 = lane % 4;
  int q0 = (gridDim.x - 1 - blockIdx.x) * kRows;  // the longest rows first: better tail balance
  int q_end = min_int(q0 + kRows, t);
  int i_lo = q0 + warp * kWarpRows + g, i_hi = i_lo + 8;  // this lane's two query rows
  float scale2 = kLog2e / sqrtf(float(HD));

  async_tile<HD>(v_tile, qkv + head.q + q0 * ld, ld, kRows, q_end - q0);
  ptx::cp_async_commit();
  async_tile<HD>(k_tile, qkv + head.k, ld, kCols, t);
  ptx::cp_async_commit();
  ptx::cp_async_wait<1>();  // Q
  __syncthreads();
  u32 qa[S::kChunks][4];  // Q [16 × HD] of the warp
  for (int c = 0; c < S::kChunks; ++c) ptx::load_a(qa[c], v_tile + warp * kWarpRows * S::kLd + c * 16, S::kLd, lane);
  __syncthreads();  // every warp has its Q: the buffer takes V_0
  async_tile<HD>(v_tile, qkv + head.v, ld, kCols, t);
  ptx::cp_async_commit();

  float o[S::kHdTiles][4] = {};
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;  // l: this lane's columns only
  for (int j0 = 0; j0 < q_end; j0 += kCols) {
    ptx::cp_async_wait<1>();  // K_j (V_j may still be in flight)
    __syncthreads();
    float s[kCols / 8][4] = {};
    product_with_rows<HD, kCols / 8>(s, qa, k_tile, lane);
    __syncthreads();  // every warp is done with K_j
    if (j0 + kCols < q_end) async_tile<HD>(k_tile, qkv + head.k + (j0 + kCols) * ld, ld, kCols, t - j0 - kCols);
    ptx::cp_async_commit();

    u32 pa[kCols / 16][4];  // P rounded to bf16 for the product
    softmax_step<kCols, HD>(s, pa, o, j0, i_lo, i_hi, t4, scale2, m_lo, m_hi, l_lo, l_hi);

    ptx::cp_async_wait<1>();  // V_j (K_{j+1} may still be in flight)
    __syncthreads();
    product_with_tile<HD, kCols / 16>(o, pa, v_tile, lane);
    __syncthreads();  // every warp is done with V_j
    if (j0 + kCols < q_end) async_tile<HD>(v_tile, qkv + head.v + (j0 + kCols) * ld, ld, kCols, t - j0 - kCols);
    ptx::cp_async_commit();
  }
  store_forward_rows<HD>(out, lse, head, o, t, i_lo, i_hi, t4, m_lo, m_hi, l_lo, l_hi);
}

// ---- backward: dK, dV -----------------------------------------------------------------------
// One block per (key tile of 64, b·kv) over every query tile at or after it of each of the
// group's query heads, in head order: the group's sum stays in the block's registers (no
// atomics). Per query tile: Sᵀ = K Qᵀ, Pᵀ = 2^(Sᵀ·scale2 − lse2), dV += Pᵀ dO,
// dPᵀ = V dOᵀ, dSᵀ = Pᵀ (dPᵀ − delta), dK += dSᵀ Q; dK is scaled by 1/√HD at the end.
template <int HD>
__global__ void __launch_bounds__(kThreads)
    kv_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* delta, int t, int nh,
              int nkv) {
  using S = Shape<HD>;
  constexpr int kN = S::kN;
  PPTRAIN_DYNAMIC_SHARED(bf16, smem);              // S::kKvBytes
  bf16* v_rows = smem;                             // the block's V [64][HD + 8]; first K's staging
  bf16* q_tile = v_rows + kRows * S::kLd;          // [kN][HD + 8]
  bf16* do_tile = q_tile + kN * S::kLd;            // [kN][HD + 8]
  float* lse2 = reinterpret_cast<float*>(do_tile + kN * S::kLd);  // [kN] lse in base 2 (+∞ past T)
  float* dlt = lse2 + kN;                                         // [kN] delta
  int bi = blockIdx.y / nkv, group = nh / nkv, first_head = blockIdx.y % nkv * group;
  Head head(bi, first_head, t, nh, nkv, HD);
  const size_t ld = head.qkv_stride;
  int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t4 = lane % 4;
  int k0 = blockIdx.x * kRows;  // key tiles near 0 see the most queries: launched first
  int k_valid = min_int(kRows, t - k0);
  int j_lo = k0 + warp * kWarpRows + g, j_hi = j_lo + 8;  // this lane's two key rows
  float scale = 1.0f / sqrtf(float(HD)), scale2 = scale * kLog2e;

  async_tile<HD>(v_rows, qkv + head.k + k0 * ld, ld, kRows, k_valid);
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
  __syncthreads();
  u32 ka[S::kChunks][4];  // K [16 × HD] of the warp, in registers for the whole block
  for (int c = 0; c < S::kChunks; ++c) ptx::load_a(ka[c], v_rows + warp * kWarpRows * S::kLd + c * 16, S::kLd, lane);
  __syncthreads();
  async_tile<HD>(v_rows, qkv + head.v + k0 * ld, ld, kRows, k_valid);
  ptx::cp_async_commit();  // waited for with the first query tile's Q

  float dk[S::kHdTiles][4] = {}, dv[S::kHdTiles][4] = {};
  int first = k0 / kN * kN;  // the first query tile that sees key k0
  for (int hi = first_head; hi < first_head + group; ++hi) {
    head = Head(bi, hi, t, nh, nkv, HD);
    for (int i0 = first; i0 < t; i0 += kN) {
      async_tile<HD>(q_tile, qkv + head.q + i0 * ld, ld, kN, t - i0);
      ptx::cp_async_commit();
      async_tile<HD>(do_tile, dout + head.row + i0 * head.row_stride, head.row_stride, kN, t - i0);
      ptx::cp_async_commit();
      for (int c = threadIdx.x; c < kN; c += blockDim.x) {
        bool valid = i0 + c < t;
        lse2[c] = valid ? lse[head.stats + i0 + c] * kLog2e : INFINITY;  // +∞: P = 0
        dlt[c] = valid ? delta[head.stats + i0 + c] : 0.0f;
      }
      ptx::cp_async_wait<1>();  // Q (and V, the first time)
      __syncthreads();
      float p[kN / 8][4] = {};  // Sᵀ, then Pᵀ [16 keys × kN queries]
      product_with_rows<HD, kN / 8>(p, ka, q_tile, lane);
      for (int n = 0; n < kN / 8; ++n)
        for (int e = 0; e < 2; ++e) {
          int col = n * 8 + 2 * t4 + e, i = i0 + col;
          p[n][e] = i < j_lo ? 0.0f : exp2f(p[n][e] * scale2 - lse2[col]);
          p[n][2 + e] = i < j_hi ? 0.0f : exp2f(p[n][2 + e] * scale2 - lse2[col]);
        }
      u32 pa[kN / 16][4];
      to_a<kN / 8>(pa, p);
      ptx::cp_async_wait<0>();  // dO
      __syncthreads();
      product_with_tile<HD, kN / 16>(dv, pa, do_tile, lane);  // dV += Pᵀ dO
      float dp[kN / 8][4] = {};                               // dPᵀ = V dOᵀ
      for (int c = 0; c < S::kChunks; ++c) {
        u32 va[4];
        ptx::load_a(va, v_rows + warp * kWarpRows * S::kLd + c * 16, S::kLd, lane);
        for (int n2 = 0; n2 < kN / 16; ++n2) {
          u32 b[4];
          ptx::load_b_of_rows(b, do_tile + n2 * 16 * S::kLd + c * 16, S::kLd, lane);
          ptx::mma_bf16_16816(dp[2 * n2], va, b);
          ptx::mma_bf16_16816(dp[2 * n2 + 1], va, b + 2);
        }
      }
      for (int n = 0; n < kN / 8; ++n)
        for (int e = 0; e < 4; ++e) dp[n][e] = p[n][e] * (dp[n][e] - dlt[n * 8 + 2 * t4 + (e & 1)]);  // dSᵀ
      u32 dsa[kN / 16][4];
      to_a<kN / 8>(dsa, dp);
      product_with_tile<HD, kN / 16>(dk, dsa, q_tile, lane);  // dK += dSᵀ Q
      __syncthreads();  // every warp is done with q_tile, do_tile and the statistics
    }
  }
  bf16* k_lo = j_lo < t ? dqkv + head.k + size_t(j_lo) * ld : nullptr;
  bf16* k_hi = j_hi < t ? dqkv + head.k + size_t(j_hi) * ld : nullptr;
  store_rows<HD>(k_lo, k_hi, dk, scale, scale, t4);  // S = scale · q·k
  bf16* v_lo = j_lo < t ? dqkv + head.v + size_t(j_lo) * ld : nullptr;
  bf16* v_hi = j_hi < t ? dqkv + head.v + size_t(j_hi) * ld : nullptr;
  store_rows<HD>(v_lo, v_hi, dv, 1.0f, 1.0f, t4);
}

// ---- backward: dQ ---------------------------------------------------------------------------
// One block per (query tile of 64, b·h) over every key tile up to it: S = Q Kᵀ, dP = dO Vᵀ,
// P = 2^(S·scale2 − lse2), dS = P (dP − delta), dQ += dS K; dQ scaled by 1/√HD at the end.
template <int HD>
__global__ void __launch_bounds__(kThreads)
    q_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* delta, int t, int nh,
             int nkv) {
  using S = Shape<HD>;
  constexpr int kN = S::kN;
  // Two stages, each [K tile | V tile] = [2·kN][HD + 8]; before the loop stage 0 stages Q
  // and stage 1 dO (64 rows each: 2·kN ≥ 64).
  PPTRAIN_DYNAMIC_SHARED(bf16, smem);  // S::kQBytes
  constexpr int kStage = 2 * kN * S::kLd;  // elements of a stage
  Head head(blockIdx.y / nh, blockIdx.y % nh, t, nh, nkv, HD);
  const size_t ld = head.qkv_stride;
  int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, g = lane / 4, t4 = lane % 4;
  QueryRows rows(head, t, lse, delta, warp, g);
  const int q0 = rows.q0, q_end = rows.q_end, i_lo = rows.i_lo, i_hi = rows.i_hi;
  const float lse2_lo = rows.lse2_lo, lse2_hi = rows.lse2_hi, dlt_lo = rows.dlt_lo, dlt_hi = rows.dlt_hi;
  float scale = 1.0f / sqrtf(float(HD)), scale2 = scale * kLog2e;

  async_tile<HD>(smem, qkv + head.q + q0 * ld, ld, kRows, q_end - q0);
  async_tile<HD>(smem + kStage, dout + head.row + q0 * head.row_stride, head.row_stride, kRows, q_end - q0);
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
  __syncthreads();
  u32 qa[S::kChunks][4], doa[S::kChunks][4];  // Q and dO [16 × HD] of the warp
  for (int c = 0; c < S::kChunks; ++c) {
    ptx::load_a(qa[c], smem + warp * kWarpRows * S::kLd + c * 16, S::kLd, lane);
    ptx::load_a(doa[c], smem + kStage + warp * kWarpRows * S::kLd + c * 16, S::kLd, lane);
  }
  __syncthreads();  // the stages take the key tiles
  auto load_key_tile = [&](int j0, int stage) {
    if (j0 < q_end) {
      async_tile<HD>(smem + stage * kStage, qkv + head.k + j0 * ld, ld, kN, t - j0);
      async_tile<HD>(smem + stage * kStage + kN * S::kLd, qkv + head.v + j0 * ld, ld, kN, t - j0);
    }
    ptx::cp_async_commit();  // possibly empty: one group per tile keeps wait<1> exact
  };
  load_key_tile(0, 0);
  load_key_tile(kN, 1);
  float dq[S::kHdTiles][4] = {};
  for (int j0 = 0, stage = 0; j0 < q_end; j0 += kN, stage ^= 1) {
    ptx::cp_async_wait<1>();  // this tile (the next may be in flight)
    __syncthreads();
    const bf16* k_tile = smem + stage * kStage;
    const bf16* v_tile = k_tile + kN * S::kLd;
    float p[kN / 8][4] = {}, dp[kN / 8][4] = {};
    product_with_rows<HD, kN / 8>(p, qa, k_tile, lane);    // S
    product_with_rows<HD, kN / 8>(dp, doa, v_tile, lane);  // dP = dO Vᵀ
    for (int n = 0; n < kN / 8; ++n)
      for (int e = 0; e < 2; ++e) {
        int j = j0 + n * 8 + 2 * t4 + e;
        float p_lo = j > i_lo ? 0.0f : exp2f(p[n][e] * scale2 - lse2_lo);
        float p_hi = j > i_hi ? 0.0f : exp2f(p[n][2 + e] * scale2 - lse2_hi);
        dp[n][e] = p_lo * (dp[n][e] - dlt_lo);  // dS
        dp[n][2 + e] = p_hi * (dp[n][2 + e] - dlt_hi);
      }
    u32 dsa[kN / 16][4];
    to_a<kN / 8>(dsa, dp);
    product_with_tile<HD, kN / 16>(dq, dsa, k_tile, lane);  // dQ += dS K
    __syncthreads();  // every warp is done with this stage
    load_key_tile(j0 + 2 * kN, stage);
  }
  bf16* row_lo = i_lo < t ? dqkv + head.q + size_t(i_lo) * ld : nullptr;
  bf16* row_hi = i_hi < t ? dqkv + head.q + size_t(i_hi) * ld : nullptr;
  store_rows<HD>(row_lo, row_hi, dq, scale, scale, t4);
}

}  // namespace pptrain::kernels::flash::bf16_tc
