// GEMMs through cuBLASLt with a plan cache. cublasLtMatmul needs a matmul descriptor,
// four matrix layouts and an algorithm from cublasLtMatmulAlgoGetHeuristic; building
// them costs host time comparable to a small GEMM, and a training step repeats the same
// few shapes every microbatch. So each distinct problem (shape, transposes, types,
// epilogue, operand alignments) is planned once, on first use, and reused afterwards;
// only the bias pointer of the descriptor is set per call.
#pragma once
#include <compare>
#include <cstdint>
#include <map>
#include <memory>

#include "backend/cuda/cuda_handles.h"

namespace pptrain::cuda {

// One GEMM as cuBLASLt sees it, column-major: D[m,n] = op(A)[m,k]·op(B)[k,n] + beta·D, with
// bias[m] (D's type) added to every column when `bias` is set (CUBLASLT_EPILOGUE_BIAS).
// lda/ldb/ldd are column strides in elements. Compute and scale type are fp32
// (CUBLAS_COMPUTE_32F: fp32 accumulation, no TF32).
struct LtShape {
  bool transa = false, transb = false;
  int m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldd = 0;
  cudaDataType ab_type = CUDA_R_32F;  // A and B
  cudaDataType d_type = CUDA_R_32F;   // C = D, and the bias
  bool bias = false;
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

  // Queues D = op(A)·op(B) + beta·D (+ bias) on the stream. `what` names the calling op in
  // errors ("cublasLtMatmul (linear forward, M=.. N=.. K=..) failed on rank R, device D: ...").
  void run(const char* what, const LtShape& shape, const void* a, const void* b, const void* bias,
           float beta, void* d);

  long long heuristic_calls() const { return heuristic_calls_; }  // plans built so far
  size_t plans() const { return plans_.size(); }

 private:
  // A plan is valid for operands at least as aligned as those it was built for: the
  // heuristic is told the alignments (and sees the bias pointer), and may pick an
  // algorithm that relies on them.
  struct Key {
    LtShape shape;
    uint32_t align_a, align_b, align_d, align_bias;
    auto operator<=>(const Key&) const = default;
  };
  struct Plan {
    LtMatmulDesc desc;
    LtMatrixLayout a, b, d;  // C and D share the layout
    cublasLtMatmulAlgo_t algo;
    size_t workspace_bytes = 0;
  };
  Plan& plan(const char* what, const Key& key, const void* bias);

  cudaStream_t stream_;
  CublasLtHandle handle_;
  Workspace workspace_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  long long heuristic_calls_ = 0;
};

}  // namespace pptrain::cuda
