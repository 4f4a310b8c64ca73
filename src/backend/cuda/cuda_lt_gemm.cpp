// LtGemm: planning (descriptors, layouts, heuristic) and running cuBLASLt GEMMs.
#include "backend/cuda/cuda_lt_gemm.h"

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace pptrain::cuda {
namespace {

// The largest power of two dividing the address, capped at 256 (the largest alignment a
// cuBLASLt preference asks about).
uint32_t alignment(const void* p) {
  const uintptr_t u = reinterpret_cast<uintptr_t>(p);
  if (u == 0) return 256;
  const uintptr_t low = u & (~u + 1);
  return low > 256 ? 256 : uint32_t(low);
}

// Fails with "<call> (<what>, M=.. N=.. K=..) failed on rank R, device D: <status name> (<text>)".
void check(cublasStatus_t status, const char* call, const char* what, const LtShape& s) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  fail(call, " (", what, ", M=", s.m, " N=", s.n, " K=", s.k, ") failed on ", where(), ": ",
       cublas_status(status));
}

template <typename V>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const V& value, const char* what,
              const LtShape& s) {
  check(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof value), "cublasLtMatmulDescSetAttribute", what, s);
}

template <typename V>
void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const V& value,
              const char* what, const LtShape& s) {
  check(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof value),
        "cublasLtMatmulPreferenceSetAttribute", what, s);
}

// The layout of a stored operand: op(X) is rows x cols, X itself is stored transposed if `trans`.
LtMatrixLayout make_layout(cudaDataType type, bool trans, int rows, int cols, int64_t ld, const char* what,
                           const LtShape& s) {
  cublasLtMatrixLayout_t layout = nullptr;
  check(cublasLtMatrixLayoutCreate(&layout, type, uint64_t(trans ? cols : rows), uint64_t(trans ? rows : cols), ld),
        "cublasLtMatrixLayoutCreate", what, s);
  return LtMatrixLayout(layout);
}

cublasLtEpilogue_t lt_epilogue(LtEpilogue e) {
  switch (e) {
    case LtEpilogue::none: return CUBLASLT_EPILOGUE_DEFAULT;
    case LtEpilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
    case LtEpilogue::gelu_aux_bias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case LtEpilogue::dgelu: return CUBLASLT_EPILOGUE_DGELU;
    case LtEpilogue::bgradb: return CUBLASLT_EPILOGUE_BGRADB;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// The per-call pointers of the descriptor: the bias (or bias gradient) and the aux matrix.
void set_pointers(cublasLtMatmulDesc_t desc, const LtShape& s, const void* bias, const void* aux, const char* what) {
  if (uses_bias(s.epilogue)) set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, what, s);
  if (uses_aux(s.epilogue)) set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux, what, s);
}

}  // namespace

LtGemm::Plan* LtGemm::plan(const char* what, const Key& key, const void* bias, const void* aux, bool optional) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();
  const LtShape& s = key.shape;
  auto p = std::make_unique<Plan>();

  cublasLtMatmulDesc_t desc = nullptr;
  check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate", what, s);
  p->desc = LtMatmulDesc(desc);
  const int32_t transa = s.transa ? CUBLAS_OP_T : CUBLAS_OP_N, transb = s.transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSA, transa, what, s);
  set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSB, transb, what, s);
  const uint32_t epilogue = lt_epilogue(s.epilogue);
  set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, what, s);
  if (uses_aux(s.epilogue)) set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, s.aux_ld, what, s);
  // The heuristic reads the bias and aux pointers' alignment (it does not dereference them).
  set_pointers(desc, s, bias, aux, what);

  p->a = make_layout(s.ab_type, s.transa, s.m, s.k, s.lda, what, s);
  p->b = make_layout(s.ab_type, s.transb, s.k, s.n, s.ldb, what, s);
  p->d = make_layout(s.d_type, false, s.m, s.n, s.ldd, what, s);

  cublasLtMatmulPreference_t pref_handle = nullptr;
  check(cublasLtMatmulPreferenceCreate(&pref_handle), "cublasLtMatmulPreferenceCreate", what, s);
  LtPreference pref(pref_handle);
  set_pref(pref_handle, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, kMaxWorkspaceBytes, what, s);
  set_pref(pref_handle, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a, what, s);
  set_pref(pref_handle, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b, what, s);
  set_pref(pref_handle, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c, what, s);
  set_pref(pref_handle, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d, what, s);

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  ++heuristic_calls_;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_.get(), desc, p->a.get(), p->b.get(),
                                                                p->d.get(), p->d.get(), pref_handle, 1, &result, &found);
  // An optional problem the library does not run is remembered as such (a null plan).
  if (optional && (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)))
    return plans_.emplace(key, nullptr).first->second.get();
  check(status, "cublasLtMatmulAlgoGetHeuristic", what, s);
  if (found == 0) check(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulAlgoGetHeuristic", what, s);
  check(result.state, "cublasLtMatmulAlgoGetHeuristic", what, s);
  p->algo = result.algo;
  p->workspace_bytes = result.workspaceSize;
  return plans_.emplace(key, std::move(p)).first->second.get();
}

void LtGemm::run(const char* what, const LtShape& s, const void* a, const void* b, const void* bias, float beta,
                 void* d, const void* aux, const void* c) {
  launch(what, s, a, b, bias, beta, d, aux, c, false);
}

bool LtGemm::run_if_supported(const char* what, const LtShape& s, const void* a, const void* b, const void* bias,
                              float beta, void* d, const void* aux, const void* c) {
  return launch(what, s, a, b, bias, beta, d, aux, c, true);
}

bool LtGemm::launch(const char* what, const LtShape& s, const void* a, const void* b, const void* bias, float beta,
                    void* d, const void* aux, const void* c, bool optional) {
  if (!c) c = d;
  if (s.m == 0 || s.n == 0) return true;
  if (s.k == 0 && beta == 1.0f && c == d && s.epilogue == LtEpilogue::none) return true;  // D += nothing
  const Key key{s, alignment(a), alignment(b), alignment(c), alignment(d),
                uses_bias(s.epilogue) ? alignment(bias) : 1u, uses_aux(s.epilogue) ? alignment(aux) : 1u};
  Plan* plan_or_null = plan(what, key, bias, aux, optional);
  if (!plan_or_null) return false;
  Plan& p = *plan_or_null;
  set_pointers(p.desc.get(), s, bias, aux, what);
  void* workspace = p.workspace_bytes ? workspace_.reserve(p.workspace_bytes) : nullptr;
  const float alpha = 1.0f;
  check(cublasLtMatmul(handle_.get(), p.desc.get(), &alpha, a, p.a.get(), b, p.b.get(), &beta, c, p.d.get(), d,
                       p.d.get(), &p.algo, workspace, p.workspace_bytes, stream_),
        "cublasLtMatmul", what, s);
  return true;
}

}  // namespace pptrain::cuda
