// The owned CUDA, cuBLAS and cuBLASLt objects of cuda_handles.h.
#include "backend/cuda/cuda_handles.h"

#include "backend/cuda/cuda_check.h"

namespace pptrain::cuda {

// Non-blocking: the compute stream never waits for the legacy default stream, which other
// libraries may use.
Stream::Stream() { PPTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
Stream::~Stream() { (void)cudaStreamDestroy(stream_); }

Event::Event(bool timing) {
  PPTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}
Event::~Event() { (void)cudaEventDestroy(event_); }

CublasHandle::CublasHandle(cudaStream_t stream) {
  PPTRAIN_CUBLAS_CHECK(cublasCreate(&handle_));
  PPTRAIN_CUBLAS_CHECK(cublasSetStream(handle_, stream));
  // Plain fp32 GEMMs: no TF32 tensor-core rounding unless asked for.
  PPTRAIN_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
}
CublasHandle::~CublasHandle() { (void)cublasDestroy(handle_); }

CublasLtHandle::CublasLtHandle() { PPTRAIN_CUBLAS_CHECK(cublasLtCreate(&handle_)); }
CublasLtHandle::~CublasLtHandle() { (void)cublasLtDestroy(handle_); }

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

}  // namespace pptrain::cuda
