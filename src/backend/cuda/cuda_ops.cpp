// CudaOps: construction, memory, casts, the loss sum and the optimizer ops.
#include "backend/cuda/cuda_ops.h"

#include "adamw.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "cast.cuh"
#include "core/config.h"
#include "core/error.h"
#include "cross_entropy.cuh"
#include "sum_squares.cuh"

namespace pptrain::cuda {

using namespace pptrain::kernels;

CudaOps::CudaOps(int device, bool cudnn_attention)
    : device_((PPTRAIN_CUDA_CHECK(cudaSetDevice(device)), device)), stream_(), cublas_(stream_.get()),
      lt_(stream_.get()), allocator_(stream_.get()),
      cudnn_attention_(cudnn_attention ? std::make_unique<CudnnAttention>(stream_.get(), allocator_) : nullptr) {}

// ---- memory ----------------------------------------------------------------------------------

void* CudaOps::allocate(size_t bytes) { return allocator_.allocate(bytes); }
void CudaOps::release(void* p) { allocator_.release(p); }

void CudaOps::copy_to_device(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  PPTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_.get()));
  // The caller may reuse `src` as soon as we return (pageable host memory).
  PPTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
}
void CudaOps::copy_to_host(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  PPTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_.get()));
  PPTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
}
void CudaOps::copy(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  PPTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_.get()));
}
void CudaOps::zero(void* p, size_t bytes) {
  if (!bytes) return;
  PPTRAIN_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_.get()));
}
MemoryStats CudaOps::memory_stats() const {
  const size_t outside = column_workspace_.capacity() + attention_workspace_.capacity() +
                         rotary_workspace_.capacity() + reduce_workspace_.capacity() + lt_.workspace_bytes();
  return {allocator_.bytes_in_use(), allocator_.peak_bytes_in_use(), allocator_.bytes_reserved(), outside};
}

void CudaOps::synchronize() { PPTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_.get())); }

// ---- casts ---------------------------------------------------------------------------------

void CudaOps::cast(View dst, ConstView src, size_t n) {
  // dst[n] = src[n]: fp32 -> bf16 rounds to nearest even, bf16 -> fp32 is exact, one dtype copies.
  if (dst.dtype == src.dtype) return copy(dst.data, src.data, n * dtype_size(dst.dtype));
  if (dst.dtype == DType::bf16)
    launch_cast(ctx(), kernel_arg<bf16>(dst), kernel_arg<float>(src), n);
  else
    launch_cast(ctx(), kernel_arg<float>(dst), kernel_arg<bf16>(src), n);
}

// ---- cross-entropy loss (fp32 row statistics only; the per-logit ops are in cuda_kernel_ops.cpp)

void CudaOps::ce_loss_sum(double* loss, const float* rmax, const float* sumexp, const float* target_logit,
                          int n) {
  launch_ce_loss_sum(ctx(), loss, rmax, sumexp, target_logit, n);
}

// ---- optimizer -------------------------------------------------------------------------------

void CudaOps::adamw(float* p_out, float* m_out, float* v_out, View p_working, const float* p, const float* g,
                    const float* m, const float* v, size_t n, float grad_scale, float lr, float b1, float b2,
                    float eps, float wd, int t) {
  if (p_working.data && p_working.dtype != DType::bf16)
    fail("adamw: p_working is the bf16 working copy or null, got an ", dtype_name(p_working.dtype), " view");
  launch_adamw(ctx(), p_out, m_out, v_out, static_cast<bf16*>(p_working.data), p, g, m, v, n, grad_scale, lr, b1,
               b2, eps, wd, t);
}

void CudaOps::adamw_multi(const std::vector<AdamwTensor>& tensors, float grad_scale, float lr, float b1, float b2,
                          float eps, int t) {
  std::vector<AdamwTensorArgs> args;
  args.reserve(tensors.size());
  for (const AdamwTensor& x : tensors) {
    if (x.p_working.data && x.p_working.dtype != DType::bf16)
      fail("adamw: p_working is the bf16 working copy or null, got an ", dtype_name(x.p_working.dtype), " view");
    args.push_back({x.p_out, x.m_out, x.v_out, static_cast<bf16*>(x.p_working.data), x.p, x.g, x.m, x.v, x.n, x.wd});
  }
  launch_adamw_multi(ctx(), args.data(), int(args.size()), grad_scale, lr, b1, b2, eps, t);
}

double CudaOps::sum_squares(const float* x, size_t n) {
  // [result: one double, padded to 256 bytes][partial sums of the reduction]
  constexpr size_t kResultBytes = 256;
  auto* base = static_cast<char*>(reduce_workspace_.reserve(kResultBytes + sum_squares_workspace_bytes(n)));
  auto* result = reinterpret_cast<double*>(base);
  launch_sum_squares(ctx(), result, x, n, reinterpret_cast<double*>(base + kResultBytes), false);
  double host = 0;
  copy_to_host(&host, result, sizeof(double));
  return host;
}

}  // namespace pptrain::cuda

namespace pptrain {

int cuda_device_of(Ops& ops) {
  auto* cuda_ops = dynamic_cast<cuda::CudaOps*>(&ops);
  return cuda_ops ? cuda_ops->device() : -1;
}

std::unique_ptr<Ops> make_cuda_ops(int device) { return std::make_unique<cuda::CudaOps>(device); }

std::unique_ptr<Ops> make_cuda_ops(const Config& cfg) {
  // One backend object serves both precisions (each op runs at the dtype of its views);
  // model.attention: cudnn hands the fused attention ops to cuDNN.
  const int device = cuda::select_device();
  return std::make_unique<cuda::CudaOps>(device, cfg.model.attention == "cudnn");
}

}  // namespace pptrain
