// The emulated CUDA runtime and cuBLAS (see cuda_runtime_emu.h, cublas_emu.h). Kernels run
// synchronously at launch under the SIMT emulator, so streams and events carry no state
// beyond the emulator's run options: synchronising is a no-op and every event is complete.
#include <cblas.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "backend/cuda/emu/cublas_emu.h"
#include "backend/cuda/emu/cuda_runtime_emu.h"

struct CUevent_st {};
struct cublasContext {
  cudaStream_t stream = nullptr;
};

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

// ---- cuBLAS ----------------------------------------------------------------------------

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
  }
  return "unknown error";
}

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = new (std::nothrow) cublasContext();
  return *handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t) {
  return handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

namespace {

// cuBLAS's argument checks for column-major op(A)[m,k], op(B)[k,n], C[m,n].
cublasStatus_t check_gemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                          int m, int n, int k, int lda, int ldb, int ldc) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  auto max1 = [](int v) { return v > 1 ? v : 1; };
  int a_rows = transa == CUBLAS_OP_N ? m : k;  // A is stored a_rows x ..., column-major
  int b_rows = transb == CUBLAS_OP_N ? k : n;
  if (m < 0 || n < 0 || k < 0 || lda < max1(a_rows) || ldb < max1(b_rows) || ldc < max1(m))
    return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

CBLAS_TRANSPOSE to_cblas(cublasOperation_t op) { return op == CUBLAS_OP_N ? CblasNoTrans : CblasTrans; }

void run_gemm(cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k, float alpha,
              const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // cblas with k = 0 only scales C; spell it out to keep beta = 0 exact
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) C[size_t(j) * ldc + i] = beta == 0.0f ? 0.0f : beta * C[size_t(j) * ldc + i];
    return;
  }
  cblas_sgemm(CblasColMajor, to_cblas(transa), to_cblas(transb), m, n, k, alpha, A, lda, B, ldb, beta,
              C, ldc);
}

}  // namespace

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                           int m, int n, int k, const float* alpha, const float* A, int lda,
                           const float* B, int ldb, const float* beta, float* C, int ldc) {
  cublasStatus_t status = check_gemm(handle, transa, transb, m, n, k, lda, ldb, ldc);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  run_gemm(transa, transb, m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const float* alpha, const float* A, int lda,
                                         long long strideA, const float* B, int ldb,
                                         long long strideB, const float* beta, float* C, int ldc,
                                         long long strideC, int batch) {
  cublasStatus_t status = check_gemm(handle, transa, transb, m, n, k, lda, ldb, ldc);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  if (batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  for (int i = 0; i < batch; ++i)
    run_gemm(transa, transb, m, n, k, *alpha, A + i * strideA, lda, B + i * strideB, ldb, *beta,
             C + i * strideC, ldc);
  return CUBLAS_STATUS_SUCCESS;
}
