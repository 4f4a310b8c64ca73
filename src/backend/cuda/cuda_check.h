// Error checks for CUDA runtime and cuBLAS calls. A failure becomes a pptrain::Error that
// names the call, the rank and the device, e.g.
//   "cudaMalloc failed on rank 3, device 1: out of memory"
#pragma once
#include <string>

#include "backend/cuda/cuda_api.h"

namespace pptrain::cuda {

// `call` is the call's source text; the message keeps the function name only.
void check_cuda(cudaError_t err, const char* call);
void check_cublas(cublasStatus_t status, const char* call);

// "CUBLAS_STATUS_INVALID_VALUE (an unsupported value ...)": the status name, which stays the
// same across cuBLAS versions, and the library's own text, which does not.
std::string cublas_status(cublasStatus_t status);

// "rank R, device D" for messages (the device the calling thread has selected).
std::string where();

}  // namespace pptrain::cuda

#define PPTRAIN_CUDA_CHECK(call) ::pptrain::cuda::check_cuda((call), #call)
#define PPTRAIN_CUBLAS_CHECK(call) ::pptrain::cuda::check_cublas((call), #call)
