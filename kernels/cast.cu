// Casts (see cast.cuh). Thread i converts elements [4i, 4i + 4): one 128-bit fp32 access and
// one 64-bit bf16 access when both pointers allow it, else four scalar conversions.
#include "cast.cuh"
#include "device.cuh"

namespace pptrain::kernels {
namespace {

constexpr int kBlock = 256;
constexpr int kPerThread = 4;

struct alignas(8) Bf16x4 {
  bf16 v[kPerThread];
};

template <typename Dst, typename Src>
__global__ void cast_kernel(Dst* dst, const Src* src, size_t n, bool vectorized) {
  size_t base = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * kPerThread;
  if (base >= n) return;
  if (vectorized && base + kPerThread <= n) {
    if constexpr (sizeof(Src) == 4) {  // fp32 -> bf16
      Pack128<float> in = load_pack(reinterpret_cast<const float*>(src) + base);
      Bf16x4 out;
      for (int k = 0; k < kPerThread; ++k) out.v[k] = from_float<bf16>(in.v[k]);
      *reinterpret_cast<Bf16x4*>(dst + base) = out;
    } else {  // bf16 -> fp32
      Bf16x4 in = *reinterpret_cast<const Bf16x4*>(src + base);
      Pack128<float> out;
      for (int k = 0; k < kPerThread; ++k) out.v[k] = to_float(in.v[k]);
      store_pack(reinterpret_cast<float*>(dst) + base, out);
    }
  } else {
    size_t end = base + kPerThread < n ? base + kPerThread : n;
    for (size_t i = base; i < end; ++i) dst[i] = from_float<Dst>(to_float(src[i]));
  }
}

template <typename Dst, typename Src>
void launch_cast_impl(const LaunchContext& ctx, Dst* dst, const Src* src, size_t n) {
  if (n == 0) return;
  const float* f = sizeof(Src) == 4 ? reinterpret_cast<const float*>(src) : reinterpret_cast<const float*>(dst);
  const void* h = sizeof(Src) == 4 ? static_cast<const void*>(dst) : static_cast<const void*>(src);
  bool vectorized = aligned16(f) && reinterpret_cast<uintptr_t>(h) % 8 == 0;
  launch(ctx, "cast", cast_kernel<Dst, Src>, dim3(ceil_div(ceil_div(n, kPerThread), kBlock)),
         dim3(kBlock), 0, dst, src, n, vectorized);
}

}  // namespace

void launch_cast(const LaunchContext& ctx, bf16* dst, const float* src, size_t n) {
  launch_cast_impl(ctx, dst, src, n);
}
void launch_cast(const LaunchContext& ctx, float* dst, const bf16* src, size_t n) {
  launch_cast_impl(ctx, dst, src, n);
}

}  // namespace pptrain::kernels
