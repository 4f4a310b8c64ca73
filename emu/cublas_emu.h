// The slice of the cuBLAS v2 API the cuda backend uses, for the emulated build only: the
// column-major GEMMs run as OpenBLAS cblas_sgemm in CblasColMajor layout (so the cuda
// backend's row-major-as-transposed-column-major argument mapping is exercised exactly as
// cuBLAS sees it); bf16 operands are widened to fp32 first and a bf16 output is rounded
// once (nearest even), as cuBLAS does with CUBLAS_COMPUTE_32F. Arguments are validated
// like cuBLAS does (CUBLAS_STATUS_INVALID_VALUE for a leading dimension too small,
// CUBLAS_STATUS_NOT_SUPPORTED for a type combination it does not run), so a wrong mapping
// fails here instead of reading out of bounds. alpha and beta are host pointers
// (CUBLAS_POINTER_MODE_HOST). The cuBLASLt slice is in cublaslt_emu.h.
#pragma once
#include "emu/cuda_runtime_emu.h"

struct cublasContext;
using cublasHandle_t = cublasContext*;

enum cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};

enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasMath_t { CUBLAS_DEFAULT_MATH = 0 };

// library_types.h / cublas_api.h: the storage types and the compute type the backend uses.
enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16BF = 14 };
using cudaDataType = cudaDataType_t;
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68 };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1 };

const char* cublasGetStatusString(cublasStatus_t status);
const char* cublasGetStatusName(cublasStatus_t status);
cublasStatus_t cublasCreate(cublasHandle_t* handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);

// C[m,n] = alpha op(A)[m,k] op(B)[k,n] + beta C, column-major, over `batch` matrices at
// A + i·strideA, B + i·strideB, C + i·strideC (strides in elements). alpha and beta are
// floats (the scale type of CUBLAS_COMPUTE_32F). Supported: A, B and C fp32; or A and B
// bf16 with C bf16 or fp32.
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long strideA, const void* B,
                                          cudaDataType Btype, int ldb, long long strideB,
                                          const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t algo);
