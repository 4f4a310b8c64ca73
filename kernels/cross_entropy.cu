// Cross-entropy kernels (see cross_entropy.cuh).
//
// One block (kBlock threads) per row of logits: thread j handles columns j, j + kBlock, ...
// (each block-wide step reads a contiguous run of the row), and the row max / sum are block
// reductions (warp butterflies, then the per-warp partials in shared memory). The fused
// kernel (the tp = 1 path) keeps a running (max, Σ exp) pair per thread (online softmax: when
// the max grows from m to m', the sum is rescaled by exp(m - m')), merges the pairs across
// the block, and then writes dlogits in a second sweep over the same columns; each thread
// rewrites only the columns it read, after the block-wide reduction, so dlogits may alias
// logits. It reads and writes 16-byte packs, several in flight per thread, with 1024 threads a
// row: the logits are the largest tensor of a step (GPT-2 124M, B=16: [16384, 50304] bf16,
// 1.65 GB), so this kernel is memory-bound: one read and one write of them, the second read
// mostly from L2.
#include "cross_entropy.cuh"
#include "device.cuh"

namespace pptrain::kernels {
namespace {

constexpr int kBlock = 256;
constexpr int kLossBlock = 1024;

// e^d for d ≤ 0 (a logit minus its row's max, or one max minus a larger one): __expf, the
// hardware's 2^x applied to d·log2(e): two instructions where expf takes about ten, and
// these are the only arithmetic of a kernel that streams the largest tensor of the step.
// CUDA documents its error as 2 + 1.173·|d| ulp: at most 3e-6 relative for the terms that
// matter (|d| ≤ 20; smaller ones are < 2e-9 of the row's largest term, e^0 = 1), inside the
// 1e-5 the kernel tests hold these outputs to. e^-∞ = 0.
__device__ __forceinline__ float exp_shifted(float d) { return __expf(d); }

template <typename T>
__global__ void row_max_kernel(float* rmax, const T* logits, int vl, int valid) {
  PPTRAIN_STATIC_SHARED(float, scratch, 32);
  const T* row = logits + size_t(blockIdx.x) * vl;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < valid; j += blockDim.x) m = fmaxf(m, to_float(row[j]));
  m = block_reduce(m, -INFINITY, scratch, Max{});
  if (threadIdx.x == 0) rmax[blockIdx.x] = m;
}

template <typename T>
__global__ void sumexp_target_kernel(float* sumexp, float* target_logit, const T* logits,
                                     const float* rmax, const int32_t* targets, int vl, int valid,
                                     int v0) {
  PPTRAIN_STATIC_SHARED(float, scratch, 32);
  const T* row = logits + size_t(blockIdx.x) * vl;
  float m = rmax[blockIdx.x];
  float s = 0.0f;
  for (int j = threadIdx.x; j < valid; j += blockDim.x) s += exp_shifted(to_float(row[j]) - m);
  s = block_reduce(s, 0.0f, scratch, Sum{});
  if (threadIdx.x == 0) {
    int target = targets[blockIdx.x] - v0;
    sumexp[blockIdx.x] = s;
    target_logit[blockIdx.x] = target >= 0 && target < valid ? to_float(row[target]) : 0.0f;
  }
}

// One block: thread k sums rows k, k + kLossBlock, ... in double (log too: N values per
// microbatch, negligible), then a block reduction.
__global__ void loss_sum_kernel(double* loss, const float* rmax, const float* sumexp,
                                const float* target_logit, int n) {
  PPTRAIN_STATIC_SHARED(double, scratch, 32);
  double s = 0.0;
  for (int r = threadIdx.x; r < n; r += blockDim.x)
    s += log(double(sumexp[r])) + double(rmax[r]) - double(target_logit[r]);
  s = block_reduce(s, 0.0, scratch, Sum{});
  if (threadIdx.x == 0) *loss = s;
}

// dlogits[row, j] for this block's row, given the row's statistics.
template <typename T>
__device__ __forceinline__ void write_dlogits(T* drow, const T* row, int vl, int valid, int target,
                                              float m, float inv_sum, float scale) {
  for (int j = threadIdx.x; j < vl; j += blockDim.x) {
    float g = 0.0f;
    if (j < valid) g = scale * (exp_shifted(to_float(row[j]) - m) * inv_sum - (j == target ? 1.0f : 0.0f));
    drow[j] = from_float<T>(g);
  }
}

template <typename T>
__global__ void backward_kernel(T* dlogits, const T* logits, const float* rmax, const float* sumexp,
                                const int32_t* targets, int vl, int valid, int v0, float scale) {
  size_t offset = size_t(blockIdx.x) * vl;
  write_dlogits(dlogits + offset, logits + offset, vl, valid, targets[blockIdx.x] - v0,
                rmax[blockIdx.x], 1.0f / sumexp[blockIdx.x], scale);
}

// Merges two online-softmax states (max m, Σ exp(x - m)).
struct OnlineSoftmax {
  float m, s;
};
__device__ __forceinline__ OnlineSoftmax merge(OnlineSoftmax a, OnlineSoftmax b) {
  float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.0f};  // both empty
  return {m, a.s * exp_shifted(a.m - m) + b.s * exp_shifted(b.m - m)};
}

// The fused kernel's block: one row per block, and a large one, so that a row of a GPT-2-sized
// vocabulary (50304 columns) is a few packs per thread and enough loads are in flight.
constexpr int kFusedBlock = 1024;
// Packs each thread loads before it uses the first: independent 16-byte loads in flight.
constexpr int kFusedUnroll = 4;

// Adds column value x to an online-softmax state.
__device__ __forceinline__ void add_column(OnlineSoftmax& state, float x) {
  if (x > state.m) {
    state.s = state.s * exp_shifted(state.m - x) + 1.0f;
    state.m = x;
  } else {
    state.s += exp_shifted(x - state.m);
  }
}

// The row's (max, Σ exp) over columns [0, valid), read as 16-byte packs (vl a multiple of the
// pack, the row 16-byte aligned). Each pack is folded in at once: its max first, the state
// rescaled once if that max is larger, then its valid columns summed. Packs are visited back
// to front, so the front of the row, read last, is the part likeliest still in cache when the
// second sweep starts there.
template <typename T>
__device__ __forceinline__ OnlineSoftmax packed_row_state(const T* row, int valid) {
  constexpr int P = Pack128<T>::kSize;
  const int packs = (valid + P - 1) / P;  // every one of them holds a valid column
  OnlineSoftmax state{-INFINITY, 0.0f};
  for (int i0 = packs - 1 - int(threadIdx.x); i0 >= 0; i0 -= kFusedUnroll * int(blockDim.x)) {
    Pack128<T> x[kFusedUnroll];
    PPTRAIN_UNROLL
    for (int u = 0; u < kFusedUnroll; ++u) {
      const int i = i0 - u * int(blockDim.x);
      if (i >= 0) x[u] = load_pack(row + size_t(i) * P);
    }
    PPTRAIN_UNROLL
    for (int u = 0; u < kFusedUnroll; ++u) {
      const int i = i0 - u * int(blockDim.x);
      if (i < 0) break;
      float v[P], pm = -INFINITY;
      PPTRAIN_UNROLL
      for (int e = 0; e < P; ++e) {
        v[e] = to_float(x[u].v[e]);
        if (i * P + e < valid) pm = fmaxf(pm, v[e]);
      }
      if (pm > state.m) {
        state.s *= exp_shifted(state.m - pm);  // 0 while the state is empty (exp(-inf))
        state.m = pm;
      }
      PPTRAIN_UNROLL
      for (int e = 0; e < P; ++e)
        if (i * P + e < valid) state.s += exp_shifted(v[e] - state.m);
    }
  }
  return state;
}

// dlogits of one row from its statistics, pack by pack (same layout conditions as above).
// Each thread rewrites only the packs it reads here, so dlogits may alias logits.
template <typename T>
__device__ __forceinline__ void packed_write_dlogits(T* drow, const T* row, int vl, int valid, int target, float m,
                                                     float inv_sum, float scale) {
  constexpr int P = Pack128<T>::kSize;
  const int packs = vl / P;
  for (int i0 = threadIdx.x; i0 < packs; i0 += kFusedUnroll * blockDim.x) {
    Pack128<T> x[kFusedUnroll];
    PPTRAIN_UNROLL
    for (int u = 0; u < kFusedUnroll; ++u) {
      const int i = i0 + u * blockDim.x;
      if (i < packs) x[u] = load_pack(row + size_t(i) * P);
    }
    PPTRAIN_UNROLL
    for (int u = 0; u < kFusedUnroll; ++u) {
      const int i = i0 + u * blockDim.x;
      if (i >= packs) break;
      Pack128<T> d;
      PPTRAIN_UNROLL
      for (int e = 0; e < P; ++e) {
        const int j = i * P + e;
        float g = 0.0f;
        if (j < valid) g = scale * (exp_shifted(to_float(x[u].v[e]) - m) * inv_sum - (j == target ? 1.0f : 0.0f));
        d.v[e] = from_float<T>(g);
      }
      store_pack(drow + size_t(i) * P, d);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kFusedBlock)
    fused_kernel(T* dlogits, float* rmax, float* sumexp, float* target_logit, const T* logits,
                 const int32_t* targets, int vl, int valid, float scale) {
  PPTRAIN_STATIC_SHARED(float, scratch_m, 32);
  PPTRAIN_STATIC_SHARED(float, scratch_s, 32);
  int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  size_t offset = size_t(blockIdx.x) * vl;
  const T* row = logits + offset;
  T* drow = dlogits + offset;
  int target = targets[blockIdx.x];
  // Read before the barrier below; the column's owner overwrites it (in place) after it.
  float target_value = 0.0f;
  if (threadIdx.x == 0 && target >= 0 && target < valid) target_value = to_float(row[target]);
  // 16-byte packs where the row allows them (a whole number of packs, aligned rows).
  constexpr int P = Pack128<T>::kSize;
  const bool packed = vl % P == 0 && reinterpret_cast<uintptr_t>(row) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(drow) % 16 == 0;
  OnlineSoftmax state{-INFINITY, 0.0f};
  if (packed) {
    state = packed_row_state(row, valid);
  } else {
    for (int j = threadIdx.x; j < valid; j += blockDim.x) add_column(state, to_float(row[j]));
  }
  for (int k = kWarp / 2; k > 0; k /= 2) {
    OnlineSoftmax other{__shfl_xor_sync(kFullMask, state.m, k), __shfl_xor_sync(kFullMask, state.s, k)};
    state = merge(state, other);
  }
  if (lane == 0) {
    scratch_m[warp] = state.m;
    scratch_s[warp] = state.s;
  }
  __syncthreads();
  state = lane < warps ? OnlineSoftmax{scratch_m[lane], scratch_s[lane]} : OnlineSoftmax{-INFINITY, 0.0f};
  for (int k = kWarp / 2; k > 0; k /= 2) {
    OnlineSoftmax other{__shfl_xor_sync(kFullMask, state.m, k), __shfl_xor_sync(kFullMask, state.s, k)};
    state = merge(state, other);
  }
  if (threadIdx.x == 0) {
    rmax[blockIdx.x] = state.m;
    sumexp[blockIdx.x] = state.s;
    target_logit[blockIdx.x] = target_value;
  }
  if (packed)
    packed_write_dlogits(drow, row, vl, valid, target, state.m, 1.0f / state.s, scale);
  else
    write_dlogits(drow, row, vl, valid, target, state.m, 1.0f / state.s, scale);
}

}  // namespace

template <typename T>
void launch_ce_row_max(const LaunchContext& ctx, float* rmax, const T* logits, int n, int vl,
                       int valid) {
  if (n <= 0) return;
  launch(ctx, "ce_row_max", row_max_kernel<T>, dim3(n), dim3(kBlock), 0, rmax, logits, vl, valid);
}

template <typename T>
void launch_ce_sumexp_target(const LaunchContext& ctx, float* sumexp, float* target_logit,
                             const T* logits, const float* rmax, const int32_t* targets, int n,
                             int vl, int valid, int v0) {
  if (n <= 0) return;
  launch(ctx, "ce_sumexp_target", sumexp_target_kernel<T>, dim3(n), dim3(kBlock), 0, sumexp,
         target_logit, logits, rmax, targets, vl, valid, v0);
}

void launch_ce_loss_sum(const LaunchContext& ctx, double* loss, const float* rmax,
                        const float* sumexp, const float* target_logit, int n) {
  launch(ctx, "ce_loss_sum", loss_sum_kernel, dim3(1), dim3(kLossBlock), 0, loss, rmax, sumexp,
         target_logit, n);
}

template <typename T>
void launch_ce_backward(const LaunchContext& ctx, T* dlogits, const T* logits, const float* rmax,
                        const float* sumexp, const int32_t* targets, int n, int vl, int valid,
                        int v0, float scale) {
  if (n <= 0) return;
  launch(ctx, "ce_backward", backward_kernel<T>, dim3(n), dim3(kBlock), 0, dlogits, logits, rmax,
         sumexp, targets, vl, valid, v0, scale);
}

template <typename T>
void launch_ce_fused(const LaunchContext& ctx, T* dlogits, float* rmax, float* sumexp,
                     float* target_logit, const T* logits, const int32_t* targets, int n, int vl,
                     int valid, float scale) {
  if (n <= 0) return;
  launch(ctx, "ce_fused", fused_kernel<T>, dim3(n), dim3(kFusedBlock), 0, dlogits, rmax, sumexp,
         target_logit, logits, targets, vl, valid, scale);
}

#define PPTRAIN_INSTANTIATE(T)                                                                   \
  template void launch_ce_row_max<T>(const LaunchContext&, float*, const T*, int, int, int);      \
  template void launch_ce_sumexp_target<T>(const LaunchContext&, float*, float*, const T*,        \
                                           const float*, const int32_t*, int, int, int, int);    \
  template void launch_ce_backward<T>(const LaunchContext&, T*, const T*, const float*,           \
                                      const float*, const int32_t*, int, int, int, int, float);  \
  template void launch_ce_fused<T>(const LaunchContext&, T*, float*, float*, float*, const T*,    \
                                   const int32_t*, int, int, int, float);
PPTRAIN_INSTANTIATE(float)
PPTRAIN_INSTANTIATE(bf16)
#undef PPTRAIN_INSTANTIATE

}  // namespace pptrain::kernels
