// The slice of the cuBLAS v2 API the cuda backend uses, for the emulated build only: the
// column-major GEMMs run as OpenBLAS cblas_sgemm in CblasColMajor layout (so the cuda
// backend's row-major-as-transposed-column-major argument mapping is exercised exactly as
// cuBLAS sees it). Arguments are validated like cuBLAS does (CUBLAS_STATUS_INVALID_VALUE
// for a leading dimension too small), so a wrong mapping fails here instead of reading
// out of bounds. alpha and beta are host pointers (CUBLAS_POINTER_MODE_HOST).
#pragma once
#include "backend/cuda/emu/cuda_runtime_emu.h"

struct cublasContext;
using cublasHandle_t = cublasContext*;

enum cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
};

enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasMath_t { CUBLAS_DEFAULT_MATH = 0 };

const char* cublasGetStatusString(cublasStatus_t status);
cublasStatus_t cublasCreate(cublasHandle_t* handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);

// C[m,n] = alpha op(A)[m,k] op(B)[k,n] + beta C, column-major.
cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                           int m, int n, int k, const float* alpha, const float* A, int lda,
                           const float* B, int ldb, const float* beta, float* C, int ldc);
// The same over `batch` matrices at A + i·strideA, B + i·strideB, C + i·strideC.
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const float* alpha, const float* A, int lda,
                                         long long strideA, const float* B, int ldb,
                                         long long strideB, const float* beta, float* C, int ldc,
                                         long long strideC, int batch);
