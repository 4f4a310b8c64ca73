#include "backend/cuda/cuda_check.h"

#include <string>

#include "core/error.h"
#include "core/log.h"

namespace pptrain::cuda {
namespace {

// "cudaMalloc(&p, bytes)" -> "cudaMalloc".
std::string function_name(const char* call) {
  std::string s(call);
  size_t paren = s.find('(');
  return paren == std::string::npos ? s : s.substr(0, paren);
}

}  // namespace

std::string where() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) device = -1;
  return cat("rank ", log::rank(), ", device ", device);
}

void check_cuda(cudaError_t err, const char* call) {
  if (err == cudaSuccess) return;
  std::string name = function_name(call);
  const char* what = cudaGetErrorString(err);
  fail(name, " failed on ", where(), ": ", what);
}

std::string cublas_status(cublasStatus_t status) {
  return cat(cublasGetStatusName(status), " (", cublasGetStatusString(status), ")");
}

void check_cublas(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  fail(function_name(call), " failed on ", where(), ": ", cublas_status(status));
}

}  // namespace pptrain::cuda
