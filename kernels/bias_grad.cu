// Bias gradient (see bias_grad.cuh): column sums of dY with the deterministic two-stage
// reduction of column_sum.cuh.
#include "bias_grad.cuh"
#include "column_sum.cuh"

namespace pptrain::kernels {
namespace {

template <typename T>
struct BiasGradValues {
  const T* dy;
  int o;
  static constexpr int kPack = Pack128<T>::kSize;
  bool aligned() const { return aligned16(dy); }
  __device__ __forceinline__ void operator()(int row, int col, float (&v)[1]) const {
    v[0] = to_float(dy[size_t(row) * o + col]);
  }
  __device__ __forceinline__ void pack(int row, int col, float (&v)[kPack][1]) const {
    Pack128<T> dp = load_pack(dy + size_t(row) * o + col);
    for (int e = 0; e < kPack; ++e) v[e][0] = to_float(dp.v[e]);
  }
};

}  // namespace

size_t bias_backward_workspace_bytes(int n, int o) { return column_sum_workspace_bytes(n, o, 1); }

template <typename T>
void launch_bias_backward(const LaunchContext& ctx, float* db, const T* dy, float* workspace, int n,
                          int o) {
  launch_column_sums<1>(ctx, "bias_backward", ColumnOutputs<1>{{db}}, workspace, n, o,
                        BiasGradValues<T>{dy, o});
}

template void launch_bias_backward<float>(const LaunchContext&, float*, const float*, float*, int, int);
template void launch_bias_backward<bf16>(const LaunchContext&, float*, const bf16*, float*, int, int);

}  // namespace pptrain::kernels
