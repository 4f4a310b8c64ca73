// The emulated CUDA runtime (see cuda_runtime_emu.h; cuBLAS and cuBLASLt are in
// cublas_emu.cpp and cublaslt_emu.cpp). Kernels run synchronously at launch under the SIMT
// emulator, so streams and events carry no state beyond the emulator's run options:
// synchronising is a no-op and every event is complete.
#include <cstdlib>
#include <cstring>
#include <new>

#include "backend/cuda/emu/cuda_runtime_emu.h"

struct CUevent_st {};

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
  }
  return "unrecognized error code";
}

// Kernel faults surface as exceptions from the launch itself, never as a sticky error.
cudaError_t cudaGetLastError() { return cudaSuccess; }

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  constexpr size_t kAlign = 256;
  if (bytes > ~size_t(0) - kAlign) return cudaErrorMemoryAllocation;
  *ptr = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (bytes && (!dst || !src)) return cudaErrorInvalidValue;
  if (bytes) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  if (bytes && !ptr) return cudaErrorInvalidValue;
  if (bytes) std::memset(ptr, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t) {
  return cudaMemset(ptr, value, bytes);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  *stream = new (std::nothrow) pptrain::emu::Stream();
  return *stream ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t event, unsigned) {
  return event ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  *event = new (std::nothrow) CUevent_st();
  return *event ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  return event ? cudaSuccess : cudaErrorInvalidResourceHandle;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return event ? cudaSuccess : cudaErrorInvalidResourceHandle;
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  return event ? cudaSuccess : cudaErrorInvalidResourceHandle;
}
