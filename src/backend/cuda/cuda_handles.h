// Owned CUDA, cuBLAS and cuBLASLt objects of the cuda backend (RAII: created in the
// constructor, destroyed in the destructor, never copied), and the grow-only device
// workspace. Also selects the cuBLASLt header: the toolkit's, or in the emulated build
// (PPTRAIN_EMULATED) the host shim of emu/ (cuda_api.h does the same for the runtime and
// cuBLAS).
#pragma once
#include <cstddef>
#include <utility>

#include "backend/cuda/cuda_api.h"
#ifdef PPTRAIN_EMULATED
#include "emu/cublaslt_emu.h"
#else
#include <cublasLt.h>
#endif

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

// An owned cudaEvent_t: for ordering only (timing disabled, the cheaper kind), or with
// timing for cudaEventElapsedTime (op profiling).
class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
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

// An owned cuBLASLt handle (the stream is given per cublasLtMatmul call).
class CublasLtHandle {
 public:
  CublasLtHandle();
  ~CublasLtHandle();
  CublasLtHandle(const CublasLtHandle&) = delete;
  CublasLtHandle& operator=(const CublasLtHandle&) = delete;
  cublasLtHandle_t get() const { return handle_; }

 private:
  cublasLtHandle_t handle_ = nullptr;
};

// An owned cuBLASLt descriptor (matmul, matrix layout or preference): holds what a
// cublasLt*Create returned and passes it to `Destroy` once. Movable, so descriptors can
// live in containers.
template <typename Handle, cublasStatus_t (*Destroy)(Handle)>
class LtDescriptor {
 public:
  LtDescriptor() = default;
  explicit LtDescriptor(Handle h) : h_(h) {}
  ~LtDescriptor() {
    if (h_) (void)Destroy(h_);
  }
  LtDescriptor(LtDescriptor&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  LtDescriptor& operator=(LtDescriptor&& o) noexcept {
    std::swap(h_, o.h_);
    return *this;
  }
  LtDescriptor(const LtDescriptor&) = delete;
  LtDescriptor& operator=(const LtDescriptor&) = delete;
  Handle get() const { return h_; }

 private:
  Handle h_ = nullptr;
};

using LtMatmulDesc = LtDescriptor<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using LtMatrixLayout = LtDescriptor<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using LtPreference = LtDescriptor<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;

// Device scratch that only grows. Growing frees the old block (cudaFree waits for queued
// work that may still read it), so a pointer from reserve() is valid until the next call.
class Workspace {
 public:
  Workspace() = default;
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* reserve(size_t bytes);
  size_t capacity() const { return capacity_; }

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace pptrain::cuda
