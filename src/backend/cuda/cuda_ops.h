// CudaOps: the Ops interface on one GPU, in fp32 and with bf16 storage. Everything but GEMMs
// runs the handwritten kernels of kernels/ through their launchers; the linear layers'
// GEMMs are cuBLASLt (bias fused as an epilogue), the attention core's batched GEMMs are
// cublasGemmStridedBatchedEx; all accumulate in fp32 (CUBLAS_COMPUTE_32F, no TF32).
// All work is queued on one compute stream owned by the object, in call order; copies
// to and from the host wait for it (they return when the data has arrived), everything
// else is asynchronous until synchronize(). Memory comes from a caching allocator;
// scratch for GEMM operands and reductions is owned here and grown on demand.
//
// Each fp32 op and its bf16 overload share one body, a private template over the storage
// type T (float or kernels::bf16), as the kernels do.
//
// Built twice: with the CUDA toolkit (PPTRAIN_WITH_CUDA), and against the emulated
// runtime/cuBLAS/cuBLASLt of emu/ with the kernels under the SIMT emulator
// (PPTRAIN_EMULATED), which is how the tests run this exact host code on a CPU.
#pragma once
#include <cstddef>

#include "backend/cuda/caching_allocator.h"
#include "backend/cuda/cuda_handles.h"
#include "backend/cuda/cuda_lt_gemm.h"
#include "backend/ops.h"
#include "launch.cuh"

namespace pptrain::cuda {

// pptrain::bfloat16 (the host type of ops.h) and kernels::bf16 (__nv_bfloat16) are the same
// 16 bits; this is the one place a pointer crosses from one to the other.
static_assert(sizeof(bfloat16) == sizeof(kernels::bf16) && alignof(bfloat16) == alignof(kernels::bf16));
inline kernels::bf16* to_kernel(bfloat16* p) { return reinterpret_cast<kernels::bf16*>(p); }
inline const kernels::bf16* to_kernel(const bfloat16* p) { return reinterpret_cast<const kernels::bf16*>(p); }

class CudaOps final : public Ops {
 public:
  explicit CudaOps(int device);
  std::string name() const override { return "cuda"; }
  int device() const { return device_; }
  cudaStream_t compute_stream() const { return stream_.get(); }
  const CachingAllocator& allocator() const { return allocator_; }
  const LtGemm& lt_gemm() const { return lt_; }

  // memory, casts, optimizer (cuda_ops.cpp)
  void* allocate(size_t bytes) override;
  void release(void* p) override;
  void copy_to_device(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* p, size_t bytes) override;
  void synchronize() override;
  void cast(bfloat16* dst, const float* src, size_t n) override;
  void cast(float* dst, const bfloat16* src, size_t n) override;
  void adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float b1, float b2,
             float eps, float wd, int t) override;
  double sum_squares(const float* x, size_t n) override;
  double ce_loss_sum(const float* rmax, const float* sumexp, const float* target_logit,
                     int n) override;

  // GEMMs (cuda_gemm.cpp)
  void linear_forward(float* y, const float* x, const float* w, const float* b, int n, int in,
                      int out) override;
  void linear_forward(bfloat16* y, const bfloat16* x, const bfloat16* w, const bfloat16* b, int n,
                      int in, int out) override;
  void linear_backward_input(float* dx, const float* dy, const float* w, int n, int in, int out,
                             bool accumulate) override;
  void linear_backward_input(bfloat16* dx, const bfloat16* dy, const bfloat16* w, int n, int in,
                             int out, bool accumulate) override;
  void linear_backward_weight(float* dw, float* db, const float* dy, const float* x, int n, int in,
                              int out) override;
  void linear_backward_weight(float* dw, float* db, const bfloat16* dy, const bfloat16* x, int n,
                              int in, int out) override;
  void attention_forward(float* out, float* probs, const float* qkv, int b, int t, int nh,
                         int hd) override;
  void attention_forward(bfloat16* out, bfloat16* probs, const bfloat16* qkv, int b, int t, int nh,
                         int hd) override;
  void attention_backward_input(float* dqkv, const float* dout, const float* qkv,
                                const float* probs, int b, int t, int nh, int hd) override;
  void attention_backward_input(bfloat16* dqkv, const bfloat16* dout, const bfloat16* qkv,
                                const bfloat16* probs, int b, int t, int nh, int hd) override;

  // kernels (cuda_kernel_ops.cpp)
  void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* g,
                         const float* b, int n, int c) override;
  void layernorm_forward(bfloat16* y, float* mean, float* rstd, const bfloat16* x,
                         const bfloat16* g, const bfloat16* b, int n, int c) override;
  void layernorm_backward_input(float* dx, const float* dy, const float* x, const float* mean,
                                const float* rstd, const float* g, int n, int c,
                                bool accumulate) override;
  void layernorm_backward_input(bfloat16* dx, const bfloat16* dy, const bfloat16* x,
                                const float* mean, const float* rstd, const bfloat16* g, int n,
                                int c, bool accumulate) override;
  void layernorm_backward_weight(float* dg, float* db, const float* dy, const float* x,
                                 const float* mean, const float* rstd, int n, int c) override;
  void layernorm_backward_weight(float* dg, float* db, const bfloat16* dy, const bfloat16* x,
                                 const float* mean, const float* rstd, int n, int c) override;
  void gelu_forward(float* y, const float* x, size_t n) override;
  void gelu_forward(bfloat16* y, const bfloat16* x, size_t n) override;
  void gelu_backward(float* dx, const float* dy, const float* x, size_t n) override;
  void gelu_backward(bfloat16* dx, const bfloat16* dy, const bfloat16* x, size_t n) override;
  void add(float* y, const float* a, const float* b, size_t n) override;
  void add(bfloat16* y, const bfloat16* a, const bfloat16* b, size_t n) override;
  void accumulate(float* y, const float* x, size_t n) override;
  void scale(float* y, float s, size_t n) override;
  void add_bias(float* y, const float* b, int n, int c) override;
  void add_bias(bfloat16* y, const bfloat16* b, int n, int c) override;
  void embedding_forward(float* y, const int32_t* tokens, const float* wte, const float* wpe, int n,
                         int t, int c, int v0, int vl) override;
  void embedding_forward(bfloat16* y, const int32_t* tokens, const bfloat16* wte,
                         const bfloat16* wpe, int n, int t, int c, int v0, int vl) override;
  void embedding_backward_weight(float* dwte, float* dwpe, const float* dy, const int32_t* tokens,
                                 int n, int t, int c, int v0, int vl) override;
  void embedding_backward_weight(float* dwte, float* dwpe, const bfloat16* dy,
                                 const int32_t* tokens, int n, int t, int c, int v0,
                                 int vl) override;
  void ce_row_max(float* rmax, const float* logits, int n, int vl, int valid) override;
  void ce_row_max(float* rmax, const bfloat16* logits, int n, int vl, int valid) override;
  void ce_sumexp_target(float* sumexp, float* target_logit, const float* logits, const float* rmax,
                        const int32_t* targets, int n, int vl, int valid, int v0) override;
  void ce_sumexp_target(float* sumexp, float* target_logit, const bfloat16* logits,
                        const float* rmax, const int32_t* targets, int n, int vl, int valid,
                        int v0) override;
  void ce_backward(float* dlogits, const float* logits, const float* rmax, const float* sumexp,
                   const int32_t* targets, int n, int vl, int valid, int v0, float scale) override;
  void ce_backward(bfloat16* dlogits, const bfloat16* logits, const float* rmax,
                   const float* sumexp, const int32_t* targets, int n, int vl, int valid, int v0,
                   float scale) override;

 private:
  // The shared bodies (T = float or kernels::bf16).
  template <typename T>
  void linear_forward_impl(T* y, const T* x, const T* w, const T* b, int n, int in, int out);
  template <typename T>
  void linear_backward_input_impl(T* dx, const T* dy, const T* w, int n, int in, int out, bool accumulate);
  template <typename T>
  void linear_backward_weight_impl(float* dw, float* db, const T* dy, const T* x, int n, int in, int out);
  template <typename T>
  void attention_forward_impl(T* out, T* probs, const T* qkv, int b, int t, int nh, int hd);
  template <typename T>
  void attention_backward_input_impl(T* dqkv, const T* dout, const T* qkv, const T* probs, int b, int t,
                                     int nh, int hd);
  template <typename T>
  void layernorm_backward_weight_impl(float* dg, float* db, const T* dy, const T* x, const float* mean,
                                      const float* rstd, int n, int c);

  // Row-major C[M,N] = op(A)[M,K] · op(B)[K,N] over `batch` matrices at the given element
  // strides (lda/ldb/ldc are row strides), beta 0: cublasGemmStridedBatchedEx with T in and
  // out. `what` names the op in errors.
  template <typename T>
  void gemm_batched(const char* what, bool transpose_a, bool transpose_b, int m, int n, int k, const T* a,
                    int lda, long long stride_a, const T* b, int ldb, long long stride_b, T* c, int ldc,
                    long long stride_c, int batch);
  kernels::LaunchContext ctx() const { return kernels::LaunchContext{stream_.get()}; }

  int device_;
  Stream stream_;  // declared before the users of the stream, destroyed after them
  CublasHandle cublas_;
  LtGemm lt_;
  CachingAllocator allocator_;
  Workspace column_workspace_;     // partial column sums (bias, layernorm weight gradients)
  Workspace attention_workspace_;  // per-head q, k, v, outputs and score gradients
  Workspace reduce_workspace_;     // a double result + its partial sums (loss, Σ x²)
};

}  // namespace pptrain::cuda
