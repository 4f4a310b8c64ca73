// CudaOps: construction, memory, and the ops that are one kernel launch each.
#include "backend/cuda/cuda_ops.h"

#include <cmath>

#include "adamw.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "bias_grad.cuh"
#include "core/config.h"
#include "core/error.h"
#include "cross_entropy.cuh"
#include "elementwise.cuh"
#include "embedding.cuh"
#include "gelu.cuh"
#include "layernorm.cuh"
#include "sum_squares.cuh"

namespace pptrain::cuda {

using namespace pptrain::kernels;

// ---- handles -------------------------------------------------------------------------------

// Non-blocking: the compute stream never waits for the legacy default stream, which other
// libraries may use.
Stream::Stream() { PPTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
Stream::~Stream() { (void)cudaStreamDestroy(stream_); }

CublasHandle::CublasHandle(cudaStream_t stream) {
  PPTRAIN_CUBLAS_CHECK(cublasCreate(&handle_));
  PPTRAIN_CUBLAS_CHECK(cublasSetStream(handle_, stream));
  // Plain fp32 GEMMs: no TF32 tensor-core rounding unless asked for.
  PPTRAIN_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
}
CublasHandle::~CublasHandle() { (void)cublasDestroy(handle_); }

void* Workspace::reserve(size_t bytes) {
  if (bytes <= capacity_) return data_;
  if (data_) PPTRAIN_CUDA_CHECK(cudaFree(data_));
  data_ = nullptr;
  capacity_ = 0;
  PPTRAIN_CUDA_CHECK(cudaMalloc(&data_, bytes));
  capacity_ = bytes;
  return data_;
}
Workspace::~Workspace() { (void)cudaFree(data_); }

CudaOps::CudaOps(int device)
    : device_((PPTRAIN_CUDA_CHECK(cudaSetDevice(device)), device)), stream_(), cublas_(stream_.get()),
      allocator_(stream_.get()) {}

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
void CudaOps::synchronize() { PPTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_.get())); }

// ---- layernorm -------------------------------------------------------------------------------

void CudaOps::layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* g,
                                const float* b, int n, int c) {
  launch_layernorm_forward<float>(ctx(), y, mean, rstd, x, g, b, n, c);
}
void CudaOps::layernorm_backward_input(float* dx, const float* dy, const float* x, const float* mean,
                                       const float* rstd, const float* g, int n, int c,
                                       bool accumulate) {
  launch_layernorm_backward_input<float>(ctx(), dx, dy, x, mean, rstd, g, n, c, accumulate);
}
void CudaOps::layernorm_backward_weight(float* dg, float* db, const float* dy, const float* x,
                                        const float* mean, const float* rstd, int n, int c) {
  auto* ws = static_cast<float*>(column_workspace_.reserve(layernorm_backward_weight_workspace_bytes(n, c)));
  launch_layernorm_backward_weight<float>(ctx(), dg, db, dy, x, mean, rstd, ws, n, c);
}

// ---- elementwise -----------------------------------------------------------------------------

void CudaOps::gelu_forward(float* y, const float* x, size_t n) { launch_gelu_forward<float>(ctx(), y, x, n); }
void CudaOps::gelu_backward(float* dx, const float* dy, const float* x, size_t n) {
  launch_gelu_backward<float>(ctx(), dx, dy, x, n);
}
void CudaOps::add(float* y, const float* a, const float* b, size_t n) { launch_add<float>(ctx(), y, a, b, n); }
void CudaOps::accumulate(float* y, const float* x, size_t n) { launch_accumulate<float>(ctx(), y, x, n); }
void CudaOps::scale(float* y, float s, size_t n) { launch_scale<float>(ctx(), y, s, n); }
void CudaOps::add_bias(float* y, const float* b, int n, int c) { launch_add_bias<float>(ctx(), y, b, n, c); }

// ---- embedding -------------------------------------------------------------------------------

void CudaOps::embedding_forward(float* y, const int32_t* tokens, const float* wte, const float* wpe,
                                int n, int t, int c, int v0, int vl) {
  launch_embedding_forward<float>(ctx(), y, tokens, wte, wpe, n, t, c, v0, vl);
}
void CudaOps::embedding_backward_weight(float* dwte, float* dwpe, const float* dy,
                                        const int32_t* tokens, int n, int t, int c, int v0, int vl) {
  launch_embedding_backward_weight<float>(ctx(), dwte, dwpe, dy, tokens, n, t, c, v0, vl);
}

// ---- cross-entropy ---------------------------------------------------------------------------

void CudaOps::ce_row_max(float* rmax, const float* logits, int n, int vl, int valid) {
  launch_ce_row_max<float>(ctx(), rmax, logits, n, vl, valid);
}
void CudaOps::ce_sumexp_target(float* sumexp, float* target_logit, const float* logits,
                               const float* rmax, const int32_t* targets, int n, int vl, int valid,
                               int v0) {
  launch_ce_sumexp_target<float>(ctx(), sumexp, target_logit, logits, rmax, targets, n, vl, valid, v0);
}
double CudaOps::ce_loss_sum(const float* rmax, const float* sumexp, const float* target_logit, int n) {
  auto* loss = static_cast<double*>(reduce_workspace_.reserve(sizeof(double)));
  launch_ce_loss_sum(ctx(), loss, rmax, sumexp, target_logit, n);
  double host = 0;
  copy_to_host(&host, loss, sizeof(double));
  return host;
}
void CudaOps::ce_backward(float* dlogits, const float* logits, const float* rmax, const float* sumexp,
                          const int32_t* targets, int n, int vl, int valid, int v0, float scale) {
  launch_ce_backward<float>(ctx(), dlogits, logits, rmax, sumexp, targets, n, vl, valid, v0, scale);
}

// ---- optimizer -------------------------------------------------------------------------------

void CudaOps::adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float b1,
                    float b2, float eps, float wd, int t) {
  launch_adamw(ctx(), p, nullptr, g, m, v, n, lr, b1, b2, eps, wd, t);
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

std::unique_ptr<Ops> make_cuda_ops(int device) { return std::make_unique<cuda::CudaOps>(device); }

std::unique_ptr<Ops> make_cuda_ops(const Config& cfg) {
  if (cfg.training.precision != "fp32")
    fail(cfg.source, ": key 'training.precision': the cuda backend runs fp32 only (bf16 weights and "
         "activations are not implemented yet), got '", cfg.training.precision, "'");
  return make_cuda_ops(cuda::select_device());
}

}  // namespace pptrain
