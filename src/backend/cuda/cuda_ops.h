// CudaOps: the Ops interface on one GPU, fp32. Everything but GEMMs runs the handwritten
// kernels of kernels/ through their launchers; GEMMs are cuBLAS (fp32 in, fp32 accumulate).
// All work is queued on one compute stream owned by the object, in call order; copies
// to and from the host wait for it (they return when the data has arrived), everything
// else is asynchronous until synchronize(). Memory comes from a caching allocator;
// scratch for GEMM operands and reductions is owned here and grown on demand.
//
// Built twice: with the CUDA toolkit (PPTRAIN_WITH_CUDA), and against the emulated
// runtime/cuBLAS of emu/ with the kernels under the SIMT emulator (PPTRAIN_EMULATED), which
// is how the tests run this exact host code on a CPU.
#pragma once
#include <cstddef>

#include "backend/cuda/caching_allocator.h"
#include "backend/cuda/cuda_api.h"
#include "backend/ops.h"
#include "launch.cuh"

namespace pptrain::cuda {

// An owned cudaStream_t.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// An owned cuBLAS handle bound to a stream.
class CublasHandle {
 public:
  explicit CublasHandle(cudaStream_t stream);
  ~CublasHandle();
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

// Device scratch that only grows. Growing frees the old block (cudaFree waits for queued
// work that may still read it), so a pointer from reserve() is valid until the next call.
class Workspace {
 public:
  Workspace() = default;
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* reserve(size_t bytes);

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

class CudaOps final : public Ops {
 public:
  explicit CudaOps(int device);
  std::string name() const override { return "cuda"; }
  int device() const { return device_; }
  cudaStream_t compute_stream() const { return stream_.get(); }
  const CachingAllocator& allocator() const { return allocator_; }

  // memory (cuda_ops.cpp)
  void* allocate(size_t bytes) override;
  void release(void* p) override;
  void copy_to_device(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* p, size_t bytes) override;
  void synchronize() override;

  // GEMMs (cuda_gemm.cpp)
  void linear_forward(float* y, const float* x, const float* w, const float* b, int n, int in,
                      int out) override;
  void linear_backward_input(float* dx, const float* dy, const float* w, int n, int in, int out,
                             bool accumulate) override;
  void linear_backward_weight(float* dw, float* db, const float* dy, const float* x, int n, int in,
                              int out) override;
  void attention_forward(float* out, float* probs, const float* qkv, int b, int t, int nh,
                         int hd) override;
  void attention_backward_input(float* dqkv, const float* dout, const float* qkv,
                                const float* probs, int b, int t, int nh, int hd) override;

  // kernels (cuda_ops.cpp)
  void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* g,
                         const float* b, int n, int c) override;
  void layernorm_backward_input(float* dx, const float* dy, const float* x, const float* mean,
                                const float* rstd, const float* g, int n, int c,
                                bool accumulate) override;
  void layernorm_backward_weight(float* dg, float* db, const float* dy, const float* x,
                                 const float* mean, const float* rstd, int n, int c) override;
  void gelu_forward(float* y, const float* x, size_t n) override;
  void gelu_backward(float* dx, const float* dy, const float* x, size_t n) override;
  void add(float* y, const float* a, const float* b, size_t n) override;
  void accumulate(float* y, const float* x, size_t n) override;
  void scale(float* y, float s, size_t n) override;
  void add_bias(float* y, const float* b, int n, int c) override;
  void embedding_forward(float* y, const int32_t* tokens, const float* wte, const float* wpe, int n,
                         int t, int c, int v0, int vl) override;
  void embedding_backward_weight(float* dwte, float* dwpe, const float* dy, const int32_t* tokens,
                                 int n, int t, int c, int v0, int vl) override;
  void ce_row_max(float* rmax, const float* logits, int n, int vl, int valid) override;
  void ce_sumexp_target(float* sumexp, float* target_logit, const float* logits, const float* rmax,
                        const int32_t* targets, int n, int vl, int valid, int v0) override;
  double ce_loss_sum(const float* rmax, const float* sumexp, const float* target_logit,
                     int n) override;
  void ce_backward(float* dlogits, const float* logits, const float* rmax, const float* sumexp,
                   const int32_t* targets, int n, int vl, int valid, int v0, float scale) override;
  void adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float b1, float b2,
             float eps, float wd, int t) override;
  double sum_squares(const float* x, size_t n) override;

 private:
  // Row-major C[M,N] = op(A)[M,K] · op(B)[K,N] + beta·C over `batch` matrices at the given
  // element strides; lda/ldb/ldc are row strides. `what` names the op in errors.
  void gemm(const char* what, bool transpose_a, bool transpose_b, int m, int n, int k,
            const float* a, int lda, long long stride_a, const float* b, int ldb,
            long long stride_b, float beta, float* c, int ldc, long long stride_c, int batch);
  kernels::LaunchContext ctx() const { return kernels::LaunchContext{stream_.get()}; }

  int device_;
  Stream stream_;  // declared before the users of the stream, destroyed after them
  CublasHandle cublas_;
  CachingAllocator allocator_;
  Workspace column_workspace_;     // partial column sums (bias, layernorm weight gradients)
  Workspace attention_workspace_;  // per-head q, k, v, outputs and score gradients
  Workspace reduce_workspace_;     // a double result + its partial sums (loss, Σ x²)
};

}  // namespace pptrain::cuda
