// Rotary position embedding kernels (see rotary.cuh), two launches per call:
//  1. table_kernel: cos and sin of every (position, plane) angle into table[2][T][HD/2], one
//     thread each, computed as the cpu op does (backend/cpu/rotary.cpp): the inverse
//     frequencies come from the host (core/rotary.h computes them once per model, scaling
//     included) as a kernel parameter, the angle pos · inv_freq in fp32, its cosine and sine
//     in double rounded once. The double work is T·HD/2 elements, not one per rotated value.
//  2. rotate_kernel: one thread per (row, rotated head, plane): it reads x_i and x_{i+HD/2},
//     writes both back. Consecutive threads walk the planes, so a warp's reads and writes are
//     contiguous runs of each half-head. Threads touch disjoint pairs: in place is safe.
#include "device.cuh"
#include "rotary.cuh"

namespace pptrain::kernels {
namespace {

constexpr int kBlock = 256;

// The inverse frequencies by value: 1 KiB of kernel parameters, read from constant memory.
struct InvFreq {
  float v[kRotaryMaxPlanes];
};

__global__ void table_kernel(float* table, int t, int hd, InvFreq inv_freq) {
  int half = hd / 2;
  size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= size_t(t) * half) return;
  int i = int(idx % half), pos = int(idx / half);
  float angle = float(pos) * inv_freq.v[i];
  table[idx] = float(cos(double(angle)));                     // cos[T][HD/2]
  table[size_t(t) * half + idx] = float(sin(double(angle)));  // sin[T][HD/2]
}

// sign 1: the rotation; sign -1: its transpose.
template <typename T>
__global__ void rotate_kernel(T* x, const float* table, size_t total, int t, int nh, int nkv, int hd, float sign) {
  size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  int half = hd / 2, rotated_heads = nh + nkv;
  int i = int(idx % half);
  size_t rest = idx / half;
  int head = int(rest % rotated_heads);
  size_t row = rest / rotated_heads;
  int pos = int(row % t);
  float c = table[size_t(pos) * half + i], s = sign * table[size_t(t) * half + size_t(pos) * half + i];
  T* x1 = x + row * (size_t(nh + 2 * nkv) * hd) + size_t(head) * hd + i;
  T* x2 = x1 + half;
  float first = to_float(*x1), second = to_float(*x2);
  *x1 = from_float<T>(first * c - second * s);
  *x2 = from_float<T>(second * c + first * s);
}

template <typename T>
void rotate(const LaunchContext& ctx, const char* name, T* x, float* table, int b, int t, int nh, int nkv, int hd,
            const float* inv_freq, int planes, float sign) {
  if (b < 0 || t < 1 || nh < 1 || nkv < 1 || hd < 2 || hd % 2 != 0 || planes != hd / 2 || planes > kRotaryMaxPlanes)
    fail(name, ": expected b >= 0, t, nh, nkv >= 1, an even head size hd up to ", 2 * kRotaryMaxPlanes,
         " and hd/2 inverse frequencies, got b=", b, " t=", t, " nh=", nh, " nkv=", nkv, " hd=", hd, " planes=",
         planes);
  InvFreq freq = {};
  for (int i = 0; i < planes; ++i) freq.v[i] = inv_freq[i];
  size_t cells = size_t(t) * (hd / 2);
  size_t total = size_t(b) * t * (nh + nkv) * (hd / 2);
  if (total == 0) return;
  launch(ctx, name, table_kernel, dim3(ceil_div(cells, kBlock)), dim3(kBlock), 0, table, t, hd, freq);
  launch(ctx, name, rotate_kernel<T>, dim3(ceil_div(total, kBlock)), dim3(kBlock), 0, x,
         static_cast<const float*>(table), total, t, nh, nkv, hd, sign);
}

}  // namespace

size_t rotary_table_bytes(int t, int hd) { return 2 * size_t(t) * size_t(hd / 2) * sizeof(float); }

template <typename T>
void launch_rotary_forward(const LaunchContext& ctx, T* qkv, float* table, int b, int t, int nh, int nkv, int hd,
                           const float* inv_freq, int planes) {
  rotate(ctx, "rotary_forward", qkv, table, b, t, nh, nkv, hd, inv_freq, planes, 1.0f);
}

template <typename T>
void launch_rotary_backward_input(const LaunchContext& ctx, T* dqkv, float* table, int b, int t, int nh, int nkv,
                                  int hd, const float* inv_freq, int planes) {
  // The rotation is orthogonal: its transpose is the rotation by -angle.
  rotate(ctx, "rotary_backward_input", dqkv, table, b, t, nh, nkv, hd, inv_freq, planes, -1.0f);
}

#define PPTRAIN_INSTANTIATE(T)                                                                             \
  template void launch_rotary_forward<T>(const LaunchContext&, T*, float*, int, int, int, int, int, const float*, \
                                         int);                                                                  \
  template void launch_rotary_backward_input<T>(const LaunchContext&, T*, float*, int, int, int, int, int,         \
                                                const float*, int);
PPTRAIN_INSTANTIATE(float)
PPTRAIN_INSTANTIATE(bf16)
#undef PPTRAIN_INSTANTIATE

}  // namespace pptrain::kernels
