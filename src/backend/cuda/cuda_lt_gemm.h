// GEMMs through cuBLASLt with a plan cache. cublasLtMatmul needs a matmul descriptor,
// four matrix layouts and an algorithm from cublasLtMatmulAlgoGetHeuristic; building
// them costs host time comparable to a small GEMM, and a training step repeats the same
// few shapes every microbatch. So each distinct problem (shape, transposes, types,
// epilogue, operand alignments) is planned once, on first use, and reused afterwards;
// only the bias and aux pointers of the descriptor are set per call.
#pragma once
#include <compare>
#include <cstdint>
#include <map>
#include <memory>

#include "backend/cuda/cuda_handles.h"

namespace pptrain::cuda {

// What a GEMM's epilogue does after v = op(A)·op(B) + beta·D, per element (i, j) of D[m,n]
// (cublasLtEpilogue_t; bias and aux are of D's type, aux shaped like D with its own ld):
//   none           D = v
//   bias           D = v + bias[i]                              (CUBLASLT_EPILOGUE_BIAS)
//   gelu_aux_bias  aux = v + bias[i]; D = gelu(aux), tanh form  (CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
//   dgelu          D = v ∘ gelu'(aux)                           (CUBLASLT_EPILOGUE_DGELU)
//   bgradb         D = v; bias[j] = Σ_k op(B)[k,j], stored      (CUBLASLT_EPILOGUE_BGRADB)
// cuBLASLt's GELU is the tanh approximation (GPT-2's), the same function as kernels/gelu.cu.
enum class LtEpilogue : uint8_t { none, bias, gelu_aux_bias, dgelu, bgradb };

constexpr bool uses_bias(LtEpilogue e) {
  return e == LtEpilogue::bias || e == LtEpilogue::gelu_aux_bias || e == LtEpilogue::bgradb;
}
constexpr bool uses_aux(LtEpilogue e) { return e == LtEpilogue::gelu_aux_bias || e == LtEpilogue::dgelu; }

// cuBLASLt's rule for the GELU aux matrix's leading dimension: a multiple of 8 elements (and
// at least the rows of D). Callers fall back to the unfused ops where it does not hold.
constexpr bool aux_ld_ok(int64_t ld) { return ld % 8 == 0; }

// One GEMM as cuBLASLt sees it, column-major: D[m,n] = op(A)[m,k]·op(B)[k,n] + beta·D, then
// the epilogue. lda/ldb/ldd/aux_ld are column strides in elements. Compute and scale type
// are fp32 (CUBLAS_COMPUTE_32F: fp32 accumulation, no TF32).
struct LtShape {
  bool transa = false, transb = false;
  int m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldd = 0;
  cudaDataType ab_type = CUDA_R_32F;  // A and B
  cudaDataType d_type = CUDA_R_32F;   // C = D, the bias and the aux matrix
  LtEpilogue epilogue = LtEpilogue::none;
  int64_t aux_ld = 0;  // with gelu_aux_bias / dgelu
  auto operator<=>(const LtShape&) const = default;
};

class LtGemm {
 public:
  // Upper bound on the workspace an algorithm may use (32 MiB, what the cuBLAS docs
  // recommend for Hopper; the heuristic result says how much is actually reserved).
  static constexpr uint64_t kMaxWorkspaceBytes = uint64_t(32) << 20;

  explicit LtGemm(cudaStream_t stream) : stream_(stream) {}
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // Queues D = epilogue(op(A)·op(B) + beta·C) on the stream, C = D unless `c` is given (a
  // matrix of D's shape, type and leading dimension, read only: D = A·B + C without first
  // copying C into D). `bias` is the bias (input) or the bias gradient (output, bgradb);
  // `aux` the GELU input matrix (output of gelu_aux_bias, input of dgelu); each null where
  // the epilogue does not use it. `what` names the calling op in errors ("cublasLtMatmul
  // (linear forward, M=.. N=.. K=..) failed on rank R, device D: ...").
  void run(const char* what, const LtShape& shape, const void* a, const void* b, const void* bias,
           float beta, void* d, const void* aux = nullptr, const void* c = nullptr);
  // The same for a problem the library may not run (an epilogue it supports only for some
  // types or layouts): returns false, queuing nothing, where the heuristic finds no
  // algorithm (CUBLAS_STATUS_NOT_SUPPORTED); the answer is cached like a plan.
  bool run_if_supported(const char* what, const LtShape& shape, const void* a, const void* b, const void* bias,
                        float beta, void* d, const void* aux = nullptr, const void* c = nullptr);

  long long heuristic_calls() const { return heuristic_calls_; }  // plans built so far
  size_t workspace_bytes() const { return workspace_.capacity(); }  // the workspace held now
  size_t plans() const { return plans_.size(); }  // including the cached "not supported" answers

 private:
  // A plan is valid for operands at least as aligned as those it was built for: the
  // heuristic is told the alignments (and sees the bias and aux pointers), and may pick an
  // algorithm that relies on them.
  struct Key {
    LtShape shape;
    uint32_t align_a, align_b, align_c, align_d, align_bias, align_aux;
    auto operator<=>(const Key&) const = default;
  };
  struct Plan {
    LtMatmulDesc desc;
    LtMatrixLayout a, b, d;  // C and D share the layout
    cublasLtMatmulAlgo_t algo;
    size_t workspace_bytes = 0;
  };
  // The cached plan; built on first use. Null for an `optional` problem the library does not
  // run; a required one fails instead.
  Plan* plan(const char* what, const Key& key, const void* bias, const void* aux, bool optional);
  bool launch(const char* what, const LtShape& shape, const void* a, const void* b, const void* bias, float beta,
              void* d, const void* aux, const void* c, bool optional);

  cudaStream_t stream_;
  CublasLtHandle handle_;
  Workspace workspace_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  long long heuristic_calls_ = 0;
};

}  // namespace pptrain::cuda
