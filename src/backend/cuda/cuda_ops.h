// CudaOps: the Ops interface on one GPU, in fp32 and with bf16 storage. Everything but GEMMs
// runs the handwritten kernels of kernels/ through their launchers; the linear layers'
// GEMMs are cuBLASLt (bias fused as an epilogue), the attention core's batched GEMMs are
// cublasGemmStridedBatchedEx; all accumulate in fp32 (CUBLAS_COMPUTE_32F, no TF32).
// All work is queued on one compute stream owned by the object, in call order; copies
// to and from the host wait for it (they return when the data has arrived), everything
// else is asynchronous until synchronize(). Memory comes from a caching allocator;
// scratch for GEMM operands and reductions is owned here and grown on demand.
//
// The ops are declared from the list of ops.h. Each body is written once, over the storage
// type T (float or kernels::bf16) as the kernels are: dispatch() below picks T from the
// call's views and hands them on as T* / const T*. The LAUNCHED ops' bodies are generated
// (cuda_kernel_ops.cpp); the others are in cuda_gemm.cpp (linear, attention),
// cuda_flash_attention.cpp (fused attention), cuda_kernel_ops.cpp (norm wgrads, rotary) and
// cuda_ops.cpp (cast, loss sum, optimizer).
//
// Built twice: with the CUDA toolkit (PPTRAIN_WITH_CUDA), and against the emulated
// runtime/cuBLAS/cuBLASLt of emu/ with the kernels under the SIMT emulator
// (PPTRAIN_EMULATED), which is how the tests run this exact host code on a CPU.
#pragma once
#include <cstddef>
#include <memory>
#include <type_traits>

#include "backend/cuda/caching_allocator.h"
#include "backend/cuda/cuda_handles.h"
#include "backend/cuda/cuda_lt_gemm.h"
#include "backend/cuda/cudnn_attention.h"
#include "backend/ops.h"
#include "core/error.h"
#include "launch.cuh"

namespace pptrain::cuda {

// pptrain::bfloat16 (the host type of ops.h) and kernels::bf16 (__nv_bfloat16) are the same
// 16 bits; dispatch() is the one place a pointer crosses from one to the other.
static_assert(sizeof(bfloat16) == sizeof(kernels::bf16) && alignof(bfloat16) == alignof(kernels::bf16));

// An argument as the kernels take it at storage type T: a view becomes T* / const T*,
// anything else passes through.
template <typename T, typename A>
auto kernel_arg(A a) {
  if constexpr (std::is_same_v<A, View>) return static_cast<T*>(a.data);
  else if constexpr (std::is_same_v<A, ConstView>) return static_cast<const T*>(a.data);
  else return a;
}

// Calls f(kernel_arg<T>(args)...) with T the storage type of the views among args: float
// for fp32, kernels::bf16 for bf16. A null view matches any dtype; views of two dtypes in
// one call fail with one line naming the op.
template <typename F, typename... Args>
decltype(auto) dispatch(const char* op, F&& f, Args... args) {
  bool seen = false;
  DType dtype = DType::f32;
  auto note = [&](const auto& a) {
    using A = std::decay_t<decltype(a)>;
    if constexpr (std::is_same_v<A, View> || std::is_same_v<A, ConstView>) {
      if (!a.data) return;
      if (seen && a.dtype != dtype)
        fail("backend 'cuda': ", op, " got ", dtype_name(dtype), " and ", dtype_name(a.dtype),
             " views in one call (the views of one call share one dtype)");
      seen = true;
      dtype = a.dtype;
    }
  };
  (note(args), ...);
  if (dtype == DType::bf16) return f(kernel_arg<kernels::bf16>(args)...);
  return f(kernel_arg<float>(args)...);
}

// Grouped-query attention's head counts: NKV ≥ 1 key/value heads dividing the NH query heads
// (config validation guarantees it for a run; a direct call with others fails with one line).
inline void check_gqa_heads(const char* op, int nh, int nkv) {
  if (nkv < 1 || nh % nkv != 0)
    fail("backend 'cuda': ", op, ": ", nkv, " key/value heads do not divide ", nh, " query heads evenly");
}

class CudaOps final : public Ops {
 public:
  // cudnn_attention: flash_attention_* run cuDNN's fused attention (model.attention: cudnn);
  // fails with one line in a build without cuDNN.
  explicit CudaOps(int device, bool cudnn_attention = false);
  // Timing events recorded on the compute stream (op_clock.cpp).
  std::unique_ptr<OpClock> make_op_clock() override;
  std::unique_ptr<KernelRecorder> make_kernel_recorder() override;  // kernel_recorder.cpp
  std::string name() const override { return "cuda"; }
  int device() const { return device_; }
  cudaStream_t compute_stream() const { return stream_.get(); }
  const CachingAllocator& allocator() const { return allocator_; }
  const LtGemm& lt_gemm() const { return lt_; }

  // memory (cuda_ops.cpp)
  void* allocate(size_t bytes) override;
  void release(void* p) override;
  void copy_to_device(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* p, size_t bytes) override;
  void synchronize() override;
  // The caching allocator's figures, in its bucket sizes (in_use and peak count a request
  // rounded up to its bucket); reserved adds its cache. The workspaces below and cuBLASLt's
  // are `outside`; cuDNN's per-call workspace comes from the allocator and is in the others.
  MemoryStats memory_stats() const override;
  void reset_peak_memory() override { allocator_.reset_peak(); }

  // the ops of ops.h (see the top of this file for where each body is)
  PPTRAIN_EACH_OP(PPTRAIN_OP_OVERRIDE)

 private:
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
  Workspace rotary_workspace_;     // the rotary embedding's cos/sin table
  Workspace reduce_workspace_;     // a double result + its partial sums (loss, Σ x²)
  // model.attention: cudnn only (else null); after the allocator it takes its workspace
  // from, so it is destroyed first.
  std::unique_ptr<CudnnAttention> cudnn_attention_;
};

}  // namespace pptrain::cuda
