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

// What follows the product, as cuBLASLt's epilogues (cublasLt.h, cublasLtEpilogue_t). With
// v = alpha·op(A)·op(B) + beta·C in fp32, per element (i, j) of D[m,n]:
//   none            D = v
//   bias            D = v + bias[i]
//   gelu_aux_bias   p = v + bias[i]; aux[i + j·aux_ld] = p; D = gelu(p), GELU in its tanh form
//                   0.5 p (1 + tanh(√(2/π) (p + 0.044715 p³)))
//   dgelu           D = v · gelu'(aux[i + j·aux_ld]) (the derivative of that tanh form)
//   bgradb          D = v; bias[j] = Σ_k op(B)[k, j] (stored, not accumulated)
// bias and aux are of D's type; every stored value is rounded once from fp32.
struct Epilogue {
  enum class Kind { none, bias, gelu_aux_bias, dgelu, bgradb } kind = Kind::none;
  const void* bias = nullptr;  // bias, gelu_aux_bias: [m] input; bgradb: [n] output
  void* aux = nullptr;         // gelu_aux_bias: output; dgelu: input (read only)
  int64_t aux_ld = 0;
};

// The tanh-form GELU and its derivative as the emulated library evaluates them (fp32).
float gelu_tanh(float x);
float gelu_tanh_derivative(float x);

// D[m,n] = epilogue(alpha·op(A)[m,k]·op(B)[k,n] + beta·C), in fp32, rounded once to D's
// type. C may be D; C is not read when beta is 0. The caller has validated shapes, leading
// dimensions, types and the epilogue's pointers.
void gemm(bool transa, bool transb, int64_t m, int64_t n, int64_t k, float alpha, const Matrix& a,
          const Matrix& b, float beta, const Matrix& c, void* d, cudaDataType d_type, int64_t ldd,
          const Epilogue& epilogue = {});

}  // namespace pptrain::emu
