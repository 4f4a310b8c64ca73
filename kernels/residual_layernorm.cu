// Bias add + residual add + layernorm forward (see residual_layernorm.cuh).
//
// Unfused, the bias add reads and writes a, the residual add reads a and b and writes sum,
// and the layernorm reads sum again before it writes y: 6 row-sized global transfers before
// y, 3 launches. Here one warp owns a row (as in layernorm.cu): lane l adds channels l,
// l + 32, ..., stores the sum and keeps the row's running total; the later passes (centred
// variance, normalise) re-read the values this lane just stored, which at GPT sizes (C ≤
// 2048: 8 KiB per fp32 row) stay in L1. So a and b are read once and sum written once: 3
// transfers and one launch.
//
// The statistics are taken of the sum as stored (rounded to T), in the same order as
// layernorm_forward_kernel, so y, mean and rstd are the bits of launch_add followed by
// launch_layernorm_forward.
#include "layernorm_row.cuh"
#include "residual_layernorm.cuh"

namespace pptrain::kernels {
namespace {

constexpr int kRowBlock = kLayernormRowBlock;

template <typename T>
__global__ void residual_layernorm_forward_kernel(T* sum, T* y, float* mean, float* rstd, const T* a,
                                                  const T* bias, const T* b, const T* g, const T* beta, int n,
                                                  int c, bool packed) {
  int lane = threadIdx.x % kWarp;
  int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (row >= n) return;  // whole warps leave; nothing below synchronises the block
  size_t offset = size_t(row) * c;
  const T* ar = a + offset;
  const T* br = b + offset;
  T* sr = sum + offset;
  // Pass 1: sum = (a + bias) + b, stored; each lane reads a[i], b[i] before it writes sum[i],
  // so sum may alias a or b. a + bias is rounded to T as add_bias stores it.
  // Packed rows: the lane's packs in the order layernorm_forward_kernel sums them.
  auto one = [&](T a_i, const T* bias_i, T b_i) {
    const T biased = bias_i ? from_float<T>(to_float(a_i) + to_float(*bias_i)) : a_i;
    return from_float<T>(to_float(biased) + to_float(b_i));
  };
  constexpr int P = Pack128<T>::kSize;
  float total = 0.0f;
  if (packed) {
    for (int k = lane; k < c / P; k += kWarp) {
      const Pack128<T> ap = load_pack(ar + k * P), bp = load_pack(br + k * P);
      Pack128<T> biasp, sp;
      if (bias) biasp = load_pack(bias + k * P);
      PPTRAIN_UNROLL
      for (int e = 0; e < P; ++e) {
        sp.v[e] = one(ap.v[e], bias ? &biasp.v[e] : nullptr, bp.v[e]);
        total += to_float(sp.v[e]);
      }
      store_pack(sr + k * P, sp);
    }
  } else {
    for (int i = lane; i < c; i += kWarp) {
      T s = one(ar[i], bias ? bias + i : nullptr, br[i]);
      sr[i] = s;
      total += to_float(s);
    }
  }
  float m = warp_reduce(total, Sum{}) / c;
  // Passes 2 and 3 (centred variance, normalise) over the values this lane stored.
  layernorm_row_normalize(y + offset, sr, m, g, beta, c, lane, mean, rstd, row, packed);
}

}  // namespace

template <typename T>
void launch_residual_layernorm_forward(const LaunchContext& ctx, T* sum, T* y, float* mean, float* rstd,
                                       const T* a, const T* bias, const T* b, const T* g, const T* beta, int n,
                                       int c) {
  if (n <= 0) return;
  launch(ctx, "residual_layernorm_forward", residual_layernorm_forward_kernel<T>,
         dim3(ceil_div(n, kRowBlock / kWarp)), dim3(kRowBlock), 0, sum, y, mean, rstd, a, bias, b, g, beta, n,
         c, layernorm_rows_packed<T>(c, sum, y, a, bias, b, g, beta));
}

#define PPTRAIN_INSTANTIATE(T)                                                                              \
  template void launch_residual_layernorm_forward<T>(const LaunchContext&, T*, T*, float*, float*, const T*, \
                                                     const T*, const T*, const T*, const T*, int, int);
PPTRAIN_INSTANTIATE(float)
PPTRAIN_INSTANTIATE(bf16)
#undef PPTRAIN_INSTANTIATE

}  // namespace pptrain::kernels
