// Sum of squares (see sum_squares.cuh), two stages so the order is fixed:
//  1. G = min(⌈n / (kBlock · kPerThread)⌉, kMaxPartials) blocks, G a function of n only.
//     Thread k of block b squares and adds elements i ≡ b · kBlock + k (mod G · kBlock),
//     in increasing i (a grid-stride loop: every warp access is contiguous), in double;
//     then a block reduction (warp butterflies + shared memory) gives partials[b].
//  2. One block adds the G partials (G ≤ its thread count) with the same block reduction.
#include "device.cuh"
#include "sum_squares.cuh"

namespace pptrain::kernels {
namespace {

constexpr int kBlock = 256;
constexpr int kPerThread = 16;      // elements per thread before another block is added
constexpr int kMaxPartials = 1024;  // = the finishing block's size

unsigned partial_count(size_t n) {
  size_t g = ceil_div(n, size_t(kBlock) * kPerThread);
  return unsigned(g < 1 ? 1 : g > kMaxPartials ? kMaxPartials : g);
}

__global__ void sum_squares_partial_kernel(double* partials, const float* x, size_t n) {
  PPTRAIN_STATIC_SHARED(double, scratch, 32);
  double s = 0.0;
  size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    double v = x[i];
    s += v * v;
  }
  s = block_reduce(s, 0.0, scratch, Sum{});
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void sum_squares_finish_kernel(double* out, const double* partials, int count,
                                          bool accumulate) {
  PPTRAIN_STATIC_SHARED(double, scratch, 32);
  double s = int(threadIdx.x) < count ? partials[threadIdx.x] : 0.0;
  s = block_reduce(s, 0.0, scratch, Sum{});
  if (threadIdx.x == 0) *out = accumulate ? *out + s : s;
}

}  // namespace

size_t sum_squares_workspace_bytes(size_t n) { return partial_count(n) * sizeof(double); }

void launch_sum_squares(const LaunchContext& ctx, double* out, const float* x, size_t n,
                        double* workspace, bool accumulate) {
  unsigned partials = partial_count(n);
  launch(ctx, "sum_squares_partial", sum_squares_partial_kernel, dim3(partials), dim3(kBlock), 0,
         workspace, x, n);
  launch(ctx, "sum_squares_finish", sum_squares_finish_kernel, dim3(1), dim3(kMaxPartials), 0, out,
         static_cast<const double*>(workspace), int(partials), accumulate);
}

}  // namespace pptrain::kernels
