// The emulated cuBLAS (see cublas_emu.h) and the GEMM it shares with the emulated cuBLASLt
// (gemm_emu.h): bf16 operands widened to fp32, OpenBLAS column-major cblas_sgemm, one
// rounding to the output type.
#include <cblas.h>

#include <cmath>
#include <new>
#include <vector>

#include "emu/cublas_emu.h"
#include "emu/gemm_emu.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace pptrain::emu {
namespace {

float load(const void* p, cudaDataType type, int64_t i) {
  return type == CUDA_R_16BF ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i])
                             : static_cast<const float*>(p)[i];
}

void store(void* p, cudaDataType type, int64_t i, float v) {
  if (type == CUDA_R_16BF)
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  else
    static_cast<float*>(p)[i] = v;
}

// The stored `rows` x `cols` of a matrix as packed fp32 (leading dimension `rows`).
std::vector<float> widen(const Matrix& x) {
  std::vector<float> out(size_t(x.rows) * x.cols);
  for (int64_t j = 0; j < x.cols; ++j)
    for (int64_t i = 0; i < x.rows; ++i) out[size_t(j) * x.rows + i] = load(x.data, x.type, j * x.ld + i);
  return out;
}

}  // namespace

bool supported_types(cudaDataType a, cudaDataType b, cudaDataType c) {
  if (a != b) return false;
  if (a == CUDA_R_32F) return c == CUDA_R_32F;
  return a == CUDA_R_16BF && (c == CUDA_R_16BF || c == CUDA_R_32F);
}

float gelu_tanh(float x) {
  const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);  // √(2/π) (x + 0.044715 x³)
  return 0.5f * x * (1.0f + std::tanh(u));
}

// d/dx [0.5 x (1 + tanh u)] = 0.5 (1 + tanh u) + 0.5 x sech²(u) u',  u' = √(2/π) (1 + 3·0.044715 x²).
float gelu_tanh_derivative(float x) {
  const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  const float t = std::tanh(u);
  const float du = 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

void gemm(bool transa, bool transb, int64_t m, int64_t n, int64_t k, float alpha, const Matrix& a,
          const Matrix& b, float beta, const Matrix& c, void* d, cudaDataType d_type, int64_t ldd,
          const Epilogue& epilogue) {
  if (m == 0 || n == 0) return;
  std::vector<float> acc(size_t(m) * n, 0.0f);  // alpha·op(A)·op(B), column-major, ld m
  std::vector<float> b32 = widen(b);
  if (k > 0) {
    std::vector<float> a32 = widen(a);
    cblas_sgemm(CblasColMajor, transa ? CblasTrans : CblasNoTrans, transb ? CblasTrans : CblasNoTrans,
                int(m), int(n), int(k), alpha, a32.data(), int(a.rows > 1 ? a.rows : 1), b32.data(),
                int(b.rows > 1 ? b.rows : 1), 0.0f, acc.data(), int(m));
  }
  using Kind = Epilogue::Kind;
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) {
      float v = acc[size_t(j) * m + i];
      if (beta != 0.0f) v += beta * load(c.data, c.type, j * c.ld + i);
      if (epilogue.kind == Kind::bias || epilogue.kind == Kind::gelu_aux_bias) v += load(epilogue.bias, d_type, i);
      if (epilogue.kind == Kind::gelu_aux_bias) {
        store(epilogue.aux, d_type, j * epilogue.aux_ld + i, v);
        v = gelu_tanh(v);
      } else if (epilogue.kind == Kind::dgelu) {
        v *= gelu_tanh_derivative(load(epilogue.aux, d_type, j * epilogue.aux_ld + i));
      }
      store(d, d_type, j * ldd + i, v);
    }
  if (epilogue.kind == Kind::bgradb) {
    // bias[j] = Σ_k op(B)[k, j], k in order; b32 is B as stored, packed with ld b.rows.
    void* bias = const_cast<void*>(epilogue.bias);
    for (int64_t j = 0; j < n; ++j) {
      float sum = 0.0f;
      for (int64_t kk = 0; kk < k; ++kk) sum += transb ? b32[size_t(kk) * b.rows + j] : b32[size_t(j) * b.rows + kk];
      store(bias, d_type, j, sum);
    }
  }
}

}  // namespace pptrain::emu

// The texts of the real library (cuBLAS 13), so messages read the same on both.
const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an unsupported value or parameter was passed to the function";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the requested functionality is not supported";
  }
  return "unknown error";
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
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

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long strideA, const void* B,
                                          cudaDataType Btype, int ldb, long long strideB,
                                          const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t) {
  using pptrain::emu::Matrix;
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (computeType != CUBLAS_COMPUTE_32F || !pptrain::emu::supported_types(Atype, Btype, Ctype))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  auto max1 = [](int v) { return v > 1 ? v : 1; };
  const int a_rows = transa == CUBLAS_OP_N ? m : k, a_cols = transa == CUBLAS_OP_N ? k : m;
  const int b_rows = transb == CUBLAS_OP_N ? k : n, b_cols = transb == CUBLAS_OP_N ? n : k;
  if (m < 0 || n < 0 || k < 0 || batchCount < 0 || lda < max1(a_rows) || ldb < max1(b_rows) ||
      ldc < max1(m) || !alpha || !beta)
    return CUBLAS_STATUS_INVALID_VALUE;
  const size_t a_size = Atype == CUDA_R_16BF ? 2 : 4, c_size = Ctype == CUDA_R_16BF ? 2 : 4;
  const float alpha_f = *static_cast<const float*>(alpha), beta_f = *static_cast<const float*>(beta);
  // On the handle's stream (alpha and beta read now, as host pointers are).
  pptrain::cuda_emu::enqueue_op(handle->stream, {pptrain::cupti_emu::Op::kernel, "cublas_gemm_emulated", 0},
                                [=] {
    for (int i = 0; i < batchCount; ++i) {
      const char* a = static_cast<const char*>(A) + i * strideA * a_size;
      const char* b = static_cast<const char*>(B) + i * strideB * a_size;
      char* c = static_cast<char*>(C) + i * strideC * c_size;
      pptrain::emu::gemm(transa == CUBLAS_OP_T, transb == CUBLAS_OP_T, m, n, k, alpha_f,
                         Matrix{a, Atype, a_rows, a_cols, lda}, Matrix{b, Btype, b_rows, b_cols, ldb}, beta_f,
                         Matrix{c, Ctype, m, n, ldc}, c, Ctype, ldc);
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}
