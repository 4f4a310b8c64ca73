// The GEMM behind the emulated cublasGemmStridedBatchedEx and cublasLtMatmul (emulated
// build only): fp32 or bf16 column-major operands, fp32 arithmetic through OpenBLAS, one
// rounding to the output type at the end, as cuBLAS does with CUBLAS_COMPUTE_32F.
#pragma once
#include <cstdint>

#include "emu/cublas_emu.h"

namespace pptrain::emu {

// A column-major matrix in emulated device memory: `rows` x `cols` elements of `type`,
// column j starting at data + j·ld.
struct Matrix {
  const void* data = nullptr;
  cudaDataType type = CUDA_R_32F;
  int64_t rows = 0, cols = 0, ld = 0;
};

// Whether cuBLAS runs op(A)·op(B) with these storage types under CUBLAS_COMPUTE_32F:
// all fp32, or bf16 A and B with a bf16 or fp32 C (= D).
bool supported_types(cudaDataType a, cudaDataType b, cudaDataType c);

// D[m,n] = alpha·op(A)[m,k]·op(B)[k,n] + beta·C + bias[i] (bias of D's type, per row i; may
// be null), in fp32, rounded once to D's type. C may be D; C is not read when beta is 0.
// The caller has validated shapes, leading dimensions and types.
void gemm(bool transa, bool transb, int64_t m, int64_t n, int64_t k, float alpha, const Matrix& a,
          const Matrix& b, float beta, const Matrix& c, void* d, cudaDataType d_type, int64_t ldd,
          const void* bias);

}  // namespace pptrain::emu
