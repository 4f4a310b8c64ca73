// Fused causal attention, FlashAttention-2 style (see flash_attention.cuh for the ops). The
// fp32 kernels are in this file (lane layout and tile products: flash_attention_tiles.cuh);
// the bf16 kernels, on tensor cores, in flash_attention_bf16.cuh. Both share the block shape,
// the order of work and the backward's split below.
//
// Blocks: 128 threads (4 warps); each warp owns 16 rows, a block 64. Columns stream through
// shared memory in tiles of kCols = 64 (HD 32, 64) or 32 (HD 128) rows (bf16 forward: 64 for
// every HD). Static shared memory per block, independent of T (flash_attention_shared_bytes):
//   bf16  HD 32: 20.0 KiB, HD 64: 36.0 KiB, HD 128: 34.3 KiB (the largest of its 3 kernels)
//   fp32  HD 32: 16.5 KiB, HD 64: 32.5 KiB, HD 128: 32.3 KiB
// Per streamed tile a block reads 2·kCols·HD elements (16 KiB for bf16, HD 64) from global
// memory (mostly L2) and does 4·64·kCols·HD FLOPs in the forward (S = QKᵀ and PV: 1 MFLOP),
// 8·64·kCols·HD in the backward kernels: 64 (forward) and 128 (backward) FLOPs per byte.
//
// Grouped-query attention: a query head reads the rows of its key/value head (Head); the
// forward and dQ change nothing else. dK and dV of a key/value head sum over the query
// heads of its group: one kv_kernel block per key tile of the key/value head loops over the
// group's heads, so that sum stays in the block's registers too.
//
// Forward: one block per (query tile, b·h); for each key tile j0 ≤ the tile's last query:
//   S = Q Kᵀ · (log2 e / √HD)           [64, kCols]   (base 2: exp2f is one instruction)
//   mask j > i to −∞ (every tile; a no-op below the diagonal)
//   m' = max(m, rowmax S), α = 2^(m − m'), P = 2^(S − m'), l = α l + rowsum P
//   O = α O + P V                       [64, HD] in registers
// then out = O / l, lse = (m + log2 l) · ln 2. Fully masked key tiles are never visited.
// bf16: S and PV on tensor cores (mma.sync m16n8k16, fp32 accumulate); P is rounded to bf16
// before the PV product (l sums the unrounded fp32 P).
// fp32: the same tiles with plain FMAs (tf32 tensor cores would not meet 1e-5).
//
// Backward (the I action), deterministic, no atomics:
//   delta_kernel: delta[i] = Σ_d dout[i,d] · out[i,d]
//   kv_kernel: one block per (key tile, b·kv) loops over the group's query heads and, for
//     each, over query tiles i0 ≥ its first key and
//     accumulates dV += Pᵀ dO, dK += dSᵀ Q with P = 2^(S·log2e − lse·log2e), dS = P (dP − delta),
//     dP = dO Vᵀ, in registers it owns (bf16: P and dS rounded to bf16 for the products).
//   q_kernel: one block per (query tile, b·h) loops over key tiles and accumulates dQ += dS K.
// Splitting dQ from dK/dV costs recomputing S and dP twice, but each output row then has one
// owner summing in a fixed order: no float atomics, bit-reproducible results.
#include "flash_attention.cuh"
#include "flash_attention_bf16.cuh"
#include "flash_attention_sm90.cuh"
#include "flash_attention_sm90_backward.cuh"
#include "flash_attention_tiles.cuh"

#include <algorithm>

namespace pptrain::kernels {
namespace {

using namespace flash;


// One online-softmax step of a row over n scores s[] (already scaled to base 2, masked to
// −∞): updates the running max m and sum l, turns s into P = 2^(s − m'), and returns
// α = 2^(m − m'), the factor for what was accumulated before. With kPair the row's scores
// are split between the two lanes of a pair, which combine max and sum (identically).
template <int N, bool kPair>
__device__ __forceinline__ float softmax_step(float* s, float& m, float& l) {
  float row_max = m;
  for (int k = 0; k < N; ++k) row_max = fmaxf(row_max, s[k]);
  if constexpr (kPair) row_max = fmaxf(row_max, __shfl_xor_sync(kFullMask, row_max, 1));
  // Column 0 is visible to every row, so m' is finite after the first tile; before, m = −∞
  // and α = 2^(−∞) = 0 multiplies the empty accumulators.
  float alpha = exp2f(m - row_max), sum = 0.0f;
  for (int k = 0; k < N; ++k) {
    s[k] = exp2f(s[k] - row_max);
    sum += s[k];
  }
  if constexpr (kPair) sum += __shfl_xor_sync(kFullMask, sum, 1);
  m = row_max;
  l = alpha * l + sum;
  return alpha;
}

template <typename T, int HD>
__global__ void __launch_bounds__(kThreads) forward_kernel(T* out, float* lse, const T* qkv, int t, int nh,
                                                           int nkv) {
  using C = Config<T, HD>;
  constexpr int kCols = C::kCols;
  PPTRAIN_STATIC_SHARED(unsigned char, smem, C::kBytes);
  T* k_tile = reinterpret_cast<T*>(smem + C::kX);  // [kCols][HD]
  T* v_tile = reinterpret_cast<T*>(smem + C::kY);  // [kCols][HD]
  Head head(blockIdx.y / nh, blockIdx.y % nh, t, nh, nkv, HD);
  const T* q = qkv + head.q;
  const T* k = qkv + head.k;
  const T* v = qkv + head.v;
  int warp = threadIdx.x / kWarp, r = threadIdx.x % kWarp / 2, h = threadIdx.x % 2;
  int q0 = (gridDim.x - 1 - blockIdx.x) * kRows;  // the longest rows first: better tail balance
  int q_end = min_int(q0 + kRows, t);
  int i = q0 + warp * kWarpRows + r;  // this lane's query row
  float scale2 = kLog2e / sqrtf(float(HD));
  float m = -INFINITY, l = 0.0f, o[HD / 2];  // o: the lane's half of row i of O
  for (int k2 = 0; k2 < HD / 2; ++k2) o[k2] = 0.0f;

  float qr[HD / 2];  // the lane's half of query row i
  load_half_row<T, HD>(qr, q + size_t(i) * head.qkv_stride, i < t, h);
  for (int j0 = 0; j0 < q_end; j0 += kCols) {
    load_tile<T, HD>(k_tile, k + j0 * head.qkv_stride, head.qkv_stride, kCols, t - j0);
    load_tile<T, HD>(v_tile, v + j0 * head.qkv_stride, head.qkv_stride, kCols, t - j0);
    __syncthreads();
    float s[kCols];  // the whole row of the tile, in both lanes of the pair
    for (int jj = 0; jj < kCols; ++jj) {
      float dot = pair_dot<T, HD>(qr, k_tile + jj * HD, h);
      s[jj] = j0 + jj > i ? -INFINITY : dot * scale2;
    }
    float alpha = softmax_step<kCols, false>(s, m, l);
    for (int k2 = 0; k2 < HD / 2; ++k2) o[k2] *= alpha;
    for (int jj = 0; jj < kCols; ++jj) axpy_half<T, HD>(o, s[jj], v_tile + jj * HD, h);
    __syncthreads();
  }
  if (i >= t) return;  // rows past the end of a partial tile (no barrier follows)
  float inv = 1.0f / l;
  for (int k2 = 0; k2 < HD / 2; ++k2) o[k2] *= inv;
  store_half_row<T, HD>(out + head.row + size_t(i) * head.row_stride, o, h);
  if (h == 0) lse[head.stats + i] = (m + log2f(l)) * kLn2;
}

// delta[b,h,i] = Σ_d dout · out over row (b, i, h): one warp per row, 4 rows per block.
template <typename T>
__global__ void delta_kernel(float* delta, const T* dout, const T* out, int rows, int t, int nh, int hd) {
  int row = blockIdx.x * kWarps + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (row >= rows) return;  // whole warps leave; no barrier follows
  const T* a = dout + size_t(row) * hd;
  const T* b = out + size_t(row) * hd;
  float sum = 0.0f;
  for (int d = lane; d < hd; d += kWarp) sum += to_float(a[d]) * to_float(b[d]);
  sum = warp_reduce(sum, Sum{});
  int hi = row % nh, i = row / nh % t, bi = row / nh / t;
  if (lane == 0) delta[(size_t(bi) * nh + hi) * t + i] = sum;
}

// dK and dV of one key tile (the block's 64 rows) of key/value head (b, kv) over every query
// tile at or after it of each of the group's NH/NKV query heads, in head order.
template <typename T, int HD>
__global__ void __launch_bounds__(kThreads)
    kv_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* delta, int t, int nh, int nkv) {
  using C = Config<T, HD>;
  constexpr int kCols = C::kCols;
  PPTRAIN_STATIC_SHARED(unsigned char, smem, C::kBytes);
  T* q_tile = reinterpret_cast<T*>(smem + C::kX);     // [kCols][HD]
  T* do_tile = reinterpret_cast<T*>(smem + C::kY);    // [kCols][HD]
  float* lse2 = reinterpret_cast<float*>(smem + C::kStats);  // [kCols] lse in base 2
  float* dlt = lse2 + kCols;                                  // [kCols] delta
  int bi = blockIdx.y / nkv, group = nh / nkv, first_head = blockIdx.y % nkv * group;
  Head head(bi, first_head, t, nh, nkv, HD);  // the query head being summed (k, v: the group's)
  const T* k = qkv + head.k;
  const T* v = qkv + head.v;
  int warp = threadIdx.x / kWarp, r = threadIdx.x % kWarp / 2, h = threadIdx.x % 2;
  int k0 = blockIdx.x * kRows;  // key tiles near 0 see the most queries: launched first
  int j = k0 + warp * kWarpRows + r;  // this lane's key row
  float scale = 1.0f / sqrtf(float(HD)), scale2 = scale * kLog2e;
  float dk[HD / 2], dv[HD / 2];  // the lane's halves of dK and dV row j (fp32 path and epilogue)

  // Query tile i0 of the current query head into q_tile / do_tile / lse2 / dlt; rows past T
  // get lse = +∞ (P = 0).
  auto load_query_tile = [&](int i0) {
    load_tile<T, HD>(q_tile, qkv + head.q + i0 * head.qkv_stride, head.qkv_stride, kCols, t - i0);
    load_tile<T, HD>(do_tile, dout + head.row + i0 * head.row_stride, head.row_stride, kCols, t - i0);
    for (int c = threadIdx.x; c < kCols; c += blockDim.x) {
      bool valid = i0 + c < t;
      lse2[c] = valid ? lse[head.stats + i0 + c] * kLog2e : INFINITY;
      dlt[c] = valid ? delta[head.stats + i0 + c] : 0.0f;
    }
    __syncthreads();
  };
  int first = k0 / kCols * kCols;  // the first query tile that sees key k0
  // Both paths visit every (query head of the group, query tile) pair in a fixed order: the
  // group's sum of dK and dV is accumulated by this block alone, in registers, no atomics.

  float kr[HD / 2], vr[HD / 2];
  load_half_row<T, HD>(kr, k + size_t(j) * head.qkv_stride, j < t, h);
  load_half_row<T, HD>(vr, v + size_t(j) * head.qkv_stride, j < t, h);
  for (int k2 = 0; k2 < HD / 2; ++k2) dk[k2] = dv[k2] = 0.0f;
  for (int hi = first_head; hi < first_head + group; ++hi) {
    head = Head(bi, hi, t, nh, nkv, HD);
    for (int i0 = first; i0 < t; i0 += kCols) {
      load_query_tile(i0);
      for (int c = 0; c < kCols; ++c) {
        float s = pair_dot<T, HD>(kr, q_tile + c * HD, h);
        float p = i0 + c < j ? 0.0f : exp2f(s * scale2 - lse2[c]);
        float dp = pair_dot<T, HD>(vr, do_tile + c * HD, h);
        axpy_half<T, HD>(dv, p, do_tile + c * HD, h);
        axpy_half<T, HD>(dk, p * (dp - dlt[c]), q_tile + c * HD, h);
      }
      __syncthreads();
    }
  }
  if (j >= t) return;
  for (int k2 = 0; k2 < HD / 2; ++k2) dk[k2] *= scale;  // S = scale · q·k
  store_half_row<T, HD>(dqkv + head.k + size_t(j) * head.qkv_stride, dk, h);
  store_half_row<T, HD>(dqkv + head.v + size_t(j) * head.qkv_stride, dv, h);
}

// dQ of one query tile (the block's 64 rows) over every key tile up to it.
template <typename T, int HD>
__global__ void __launch_bounds__(kThreads)
    q_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* delta, int t, int nh, int nkv) {
  using C = Config<T, HD>;
  constexpr int kCols = C::kCols;
  PPTRAIN_STATIC_SHARED(unsigned char, smem, C::kBytes);
  T* k_tile = reinterpret_cast<T*>(smem + C::kX);
  T* v_tile = reinterpret_cast<T*>(smem + C::kY);
  Head head(blockIdx.y / nh, blockIdx.y % nh, t, nh, nkv, HD);
  const T* q = qkv + head.q;
  const T* k = qkv + head.k;
  const T* v = qkv + head.v;
  const T* dO = dout + head.row;
  int warp = threadIdx.x / kWarp, r = threadIdx.x % kWarp / 2, h = threadIdx.x % 2;
  int q0 = (gridDim.x - 1 - blockIdx.x) * kRows;
  int q_end = min_int(q0 + kRows, t);
  int i = q0 + warp * kWarpRows + r;
  float scale = 1.0f / sqrtf(float(HD)), scale2 = scale * kLog2e;
  float lse2 = i < t ? lse[head.stats + i] * kLog2e : INFINITY;  // +∞: P = 0 past the end
  float dlt = i < t ? delta[head.stats + i] : 0.0f;
  float dq[HD / 2];
  auto load_key_tile = [&](int j0) {
    load_tile<T, HD>(k_tile, k + j0 * head.qkv_stride, head.qkv_stride, kCols, t - j0);
    load_tile<T, HD>(v_tile, v + j0 * head.qkv_stride, head.qkv_stride, kCols, t - j0);
    __syncthreads();
  };

  float qr[HD / 2], dor[HD / 2];
  load_half_row<T, HD>(qr, q + size_t(i) * head.qkv_stride, i < t, h);
  load_half_row<T, HD>(dor, dO + size_t(i) * head.row_stride, i < t, h);
  for (int k2 = 0; k2 < HD / 2; ++k2) dq[k2] = 0.0f;
  for (int j0 = 0; j0 < q_end; j0 += kCols) {
    load_key_tile(j0);
    for (int c = 0; c < kCols; ++c) {
      float s = pair_dot<T, HD>(qr, k_tile + c * HD, h);
      float p = j0 + c > i ? 0.0f : exp2f(s * scale2 - lse2);
      float dp = pair_dot<T, HD>(dor, v_tile + c * HD, h);
      axpy_half<T, HD>(dq, p * (dp - dlt), k_tile + c * HD, h);
    }
    __syncthreads();
  }
  if (i >= t) return;
  for (int k2 = 0; k2 < HD / 2; ++k2) dq[k2] *= scale;
  store_half_row<T, HD>(dqkv + head.q + size_t(i) * head.qkv_stride, dq, h);
}

// Calls f(std::integral_constant<int, HD>) for a supported head dim; fails otherwise.
template <typename F>
void with_head_dim(int hd, F f) {
  switch (hd) {
    case 32: return f(std::integral_constant<int, 32>{});
    case 64: return f(std::integral_constant<int, 64>{});
    case 128: return f(std::integral_constant<int, 128>{});
    default: fail("flash attention: head dim ", hd, " is not supported (32, 64, 128)");
  }
}

void check_shape(int b, int t, int nh, int nkv, bool aligned) {
  if (b < 0 || t < 0 || nh < 0) fail("flash attention: negative shape b=", b, " t=", t, " nh=", nh);
  if (nkv < 1 || nh % nkv != 0)
    fail("flash attention: ", nkv, " key/value heads do not divide ", nh, " query heads evenly");
  if (size_t(b) * nh > 65535) fail("flash attention: b·nh = ", size_t(b) * nh, " exceeds 65535 heads per launch");
  if (!aligned) fail("flash attention: tensors must be 16-byte aligned");
}

}  // namespace

template <typename T>
size_t flash_attention_shared_bytes(int hd) {
  size_t bytes = 0;
  with_head_dim(hd, [&](auto hd_constant) {
    constexpr int HD = decltype(hd_constant)::value;
    if constexpr (std::is_same_v<T, bf16>) {
      bytes = bf16_tc::Shape<HD>::kMaxBytes;
      if constexpr (HD != 32)
        if (flash_attention_uses_wgmma(HD))
          bytes = std::max({bytes, sm90::Forward<HD>::kBytes, sm90::Backward<HD>::kBytes});
    } else {
      bytes = Config<T, HD>::kBytes;
    }
  });
  return bytes;
}

// The wgmma kernel runs where the cubin the runtime loaded for this device is sm_90 (the
// build makes every 90 target sm_90a: mk/kernels.mk); elsewhere the kernel would trap.
bool flash_attention_uses_wgmma(int hd) {
#ifdef PPTRAIN_EMULATED
  (void)hd;
  return false;
#else
  if (hd != 64 && hd != 128) return false;
  static const bool sm90a = [] {
    cudaFuncAttributes attr{};
    return cudaFuncGetAttributes(&attr, sm90::forward_kernel<64>) == cudaSuccess && attr.binaryVersion == 90;
  }();
  return sm90a;
#endif
}

namespace {
// `automatic` resolved; a forced wgmma that cannot run fails with one line.
FlashKernels resolve(FlashKernels kernels, int hd) {
  if (kernels == FlashKernels::automatic)
    return flash_attention_uses_wgmma(hd) ? FlashKernels::wgmma : FlashKernels::mma;
  if (kernels == FlashKernels::wgmma && hd != 64 && hd != 128)
    fail("flash attention: the wgmma kernels take head sizes 64 and 128, not ", hd);
#ifndef PPTRAIN_EMULATED
  if (kernels == FlashKernels::wgmma && !flash_attention_uses_wgmma(hd))
    fail("flash attention: the wgmma kernels need a Hopper GPU (compute capability 9.0) and a build with "
         "CUDA_ARCH including 90");
#endif
  return kernels;
}
}  // namespace

void launch_flash_attention_forward_bf16(const LaunchContext& ctx, bf16* out, float* lse, const bf16* qkv, int b,
                                         int t, int nh, int nkv, int hd, FlashKernels kernel) {
  with_head_dim(hd, [&](auto hd_constant) {
    constexpr int HD = decltype(hd_constant)::value;
    check_shape(b, t, nh, nkv, aligned16(out, qkv));
    kernel = resolve(kernel, hd);
    if (size_t(b) * t * nh == 0) return;
    dim3 grid(ceil_div(t, kRows), b * nh);
    if constexpr (HD != 32)
      if (kernel == FlashKernels::wgmma) {
        // qkv as a [B][T][W] tensor (W = (NH + 2·NKV)·HD): rows past T are outside it, so the
        // copy engine zero-fills a partial tile; boxes of 64 columns × 128 (Q) or 64 (K, V) rows.
        const uint64_t w = uint64_t(nh + 2 * nkv) * HD;
        tma::Map q_map = tma::make_map_3d(qkv, w, uint64_t(t), uint64_t(b), w * 2, uint64_t(t) * w * 2, 64,
                                          sm90::kForwardRows);
        tma::Map kv_map = tma::make_map_3d(qkv, w, uint64_t(t), uint64_t(b), w * 2, uint64_t(t) * w * 2, 64, kRows);
        return launch(ctx, "flash_attention_forward_sm90", sm90::forward_kernel<HD>,
                      dim3(ceil_div(t, sm90::kForwardRows), b * nh), dim3(sm90::kForwardThreads),
                      sm90::Forward<HD>::kBytes, out, lse, q_map, kv_map, t, nh, nkv);
      }
    launch(ctx, "flash_attention_forward", bf16_tc::forward_kernel<HD>, grid, dim3(kThreads),
           bf16_tc::Shape<HD>::kForwardBytes, out, lse, qkv, t, nh, nkv);
  });
}

template <typename T>
void launch_flash_attention_forward(const LaunchContext& ctx, T* out, float* lse, const T* qkv, int b, int t,
                                    int nh, int nkv, int hd) {
  if constexpr (std::is_same_v<T, bf16>) {
    launch_flash_attention_forward_bf16(ctx, out, lse, qkv, b, t, nh, nkv, hd, FlashKernels::automatic);
  } else {
    with_head_dim(hd, [&](auto hd_constant) {
      constexpr int HD = decltype(hd_constant)::value;
      check_shape(b, t, nh, nkv, aligned16(out, qkv));
      if (size_t(b) * t * nh == 0) return;
      launch(ctx, "flash_attention_forward", forward_kernel<T, HD>, dim3(ceil_div(t, kRows), b * nh), dim3(kThreads),
             0, out, lse, qkv, t, nh, nkv);
    });
  }
}

void launch_flash_attention_backward_input_bf16(const LaunchContext& ctx, bf16* dqkv, float* delta,
                                                const bf16* dout, const bf16* qkv, const bf16* out,
                                                const float* lse, int b, int t, int nh, int nkv, int hd,
                                                FlashKernels kernel) {
  with_head_dim(hd, [&](auto hd_constant) {
    constexpr int HD = decltype(hd_constant)::value;
    check_shape(b, t, nh, nkv, aligned16(dqkv, dout, qkv, out));
    kernel = resolve(kernel, hd);
    int rows = b * t * nh;
    if (rows == 0) return;
    launch(ctx, "flash_attention_delta", delta_kernel<bf16>, dim3(ceil_div(rows, kWarps)), dim3(kThreads), 0, delta,
           dout, out, rows, t, nh, hd);
    // dK, dV: one block per key tile of each key/value head; dQ: one per query tile of each query head.
    dim3 kv_grid(ceil_div(t, kRows), b * nkv), q_grid(ceil_div(t, kRows), b * nh);
    const float* dlt = delta;
    if constexpr (HD != 32)
      if (kernel == FlashKernels::wgmma) {
        // qkv [B][T][W] and dout [B][T][NH·HD] as tensors (rows past T zero-filled), boxes of
        // 64 columns × kN rows (streamed tiles) or 64 rows (a block's own tiles).
        constexpr int kN = sm90::Backward<HD>::kN;
        const uint64_t w = uint64_t(nh + 2 * nkv) * HD, c = uint64_t(nh) * HD, tt = uint64_t(t), bb = uint64_t(b);
        tma::Map qkv_n = tma::make_map_3d(qkv, w, tt, bb, w * 2, tt * w * 2, 64, kN);
        tma::Map qkv_64 = tma::make_map_3d(qkv, w, tt, bb, w * 2, tt * w * 2, 64, kRows);
        tma::Map dout_n = tma::make_map_3d(dout, c, tt, bb, c * 2, tt * c * 2, 64, kN);
        tma::Map dout_64 = tma::make_map_3d(dout, c, tt, bb, c * 2, tt * c * 2, 64, kRows);
        launch(ctx, "flash_attention_backward_kv_sm90", sm90::kv_kernel<HD>, kv_grid, dim3(sm90::kBackwardThreads),
               sm90::Backward<HD>::kBytes, dqkv, qkv_n, qkv_64, dout_n, lse, dlt, t, nh, nkv);
        launch(ctx, "flash_attention_backward_q_sm90", sm90::q_kernel<HD>, q_grid, dim3(sm90::kBackwardThreads),
               sm90::Backward<HD>::kBytes, dqkv, qkv_n, qkv_64, dout_64, lse, dlt, t, nh, nkv);
        return;
      }
    launch(ctx, "flash_attention_backward_kv", bf16_tc::kv_kernel<HD>, kv_grid, dim3(kThreads),
           bf16_tc::Shape<HD>::kKvBytes, dqkv, dout, qkv, lse, dlt, t, nh, nkv);
    launch(ctx, "flash_attention_backward_q", bf16_tc::q_kernel<HD>, q_grid, dim3(kThreads),
           bf16_tc::Shape<HD>::kQBytes, dqkv, dout, qkv, lse, dlt, t, nh, nkv);
  });
}

template <typename T>
void launch_flash_attention_backward_input(const LaunchContext& ctx, T* dqkv, float* delta, const T* dout,
                                           const T* qkv, const T* out, const float* lse, int b, int t, int nh,
                                           int nkv, int hd) {
  if constexpr (std::is_same_v<T, bf16>) {
    launch_flash_attention_backward_input_bf16(ctx, dqkv, delta, dout, qkv, out, lse, b, t, nh, nkv, hd,
                                               FlashKernels::automatic);
  } else {
    with_head_dim(hd, [&](auto hd_constant) {
      constexpr int HD = decltype(hd_constant)::value;
      check_shape(b, t, nh, nkv, aligned16(dqkv, dout, qkv, out));
      int rows = b * t * nh;
      if (rows == 0) return;
      launch(ctx, "flash_attention_delta", delta_kernel<T>, dim3(ceil_div(rows, kWarps)), dim3(kThreads), 0, delta,
             dout, out, rows, t, nh, hd);
      // dK, dV: one block per key tile of each key/value head; dQ: one per query tile of each query head.
      dim3 kv_grid(ceil_div(t, kRows), b * nkv), q_grid(ceil_div(t, kRows), b * nh);
      launch(ctx, "flash_attention_backward_kv", kv_kernel<T, HD>, kv_grid, dim3(kThreads), 0, dqkv, dout, qkv, lse,
             static_cast<const float*>(delta), t, nh, nkv);
      launch(ctx, "flash_attention_backward_q", q_kernel<T, HD>, q_grid, dim3(kThreads), 0, dqkv, dout, qkv, lse,
             static_cast<const float*>(delta), t, nh, nkv);
    });
  }
}

#define PPTRAIN_INSTANTIATE(T)                                                                                   \
  template size_t flash_attention_shared_bytes<T>(int);                                                         \
  template void launch_flash_attention_forward<T>(const LaunchContext&, T*, float*, const T*, int, int, int, int, \
                                                  int);                                                         \
  template void launch_flash_attention_backward_input<T>(const LaunchContext&, T*, float*, const T*, const T*,   \
                                                         const T*, const float*, int, int, int, int, int);
PPTRAIN_INSTANTIATE(float)
PPTRAIN_INSTANTIATE(bf16)
#undef PPTRAIN_INSTANTIATE

}  // namespace pptrain::kernels
