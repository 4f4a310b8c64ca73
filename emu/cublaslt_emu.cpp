// The emulated cuBLASLt (see cublaslt_emu.h): descriptors are plain host structs, the
// heuristic validates the problem and returns one algorithm, the matmul runs the emulated
// GEMM of gemm_emu.h with the epilogue (bias, GELU + aux, DGELU, BGRADB).
#include <atomic>
#include <climits>
#include <new>

#include "emu/cublaslt_emu.h"
#include "emu/gemm_emu.h"

struct cublasLtContext {};
struct cublasLtMatmulDescEmu {
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  const void* aux = nullptr;
  int64_t aux_ld = 0;
};
struct cublasLtMatrixLayoutEmu {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
};
struct cublasLtMatmulPreferenceEmu {
  uint64_t max_workspace = 0;
  uint32_t min_alignment[4] = {256, 256, 256, 256};  // A, B, C, D
};

namespace {

std::atomic<long long> heuristic_calls{0};

// The workspace the emulated algorithm asks for (when the preference allows it), so that
// callers exercise the workspace path as on a GPU.
constexpr uint64_t kAlgoWorkspace = 4096;
constexpr uint64_t kAlgoMagic = 0x70707472'656d754cull;  // marks an algo from the emulated heuristic

// The largest power of two (at most 256) dividing the address.
uint32_t alignment(const void* p) {
  uintptr_t u = reinterpret_cast<uintptr_t>(p);
  if (u == 0) return 256;
  uintptr_t low = u & (~u + 1);
  return low > 256 ? 256 : uint32_t(low);
}

template <typename V>
cublasStatus_t set(V& field, const void* buf, size_t size) {
  if (!buf || size != sizeof(V)) return CUBLAS_STATUS_INVALID_VALUE;
  field = *static_cast<const V*>(buf);
  return CUBLAS_STATUS_SUCCESS;
}

bool known_epilogue(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_BGRADB;
}
// The epilogues that read (BIAS, GELU_AUX_BIAS) or write (BGRADB) the bias pointer.
bool uses_bias(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_BGRADB;
}
// The epilogues that write (GELU_AUX_BIAS) or read (DGELU) the aux matrix.
bool uses_aux(uint32_t e) { return e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU; }

// What cublasLtMatmul and its heuristic check: D[m,n] = op(A)[m,k]·op(B)[k,n] + C[m,n].
cublasStatus_t check_problem(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                             cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d) {
  if (!desc || !a || !b || !c || !d) return CUBLAS_STATUS_INVALID_VALUE;
  if ((desc->transa != CUBLAS_OP_N && desc->transa != CUBLAS_OP_T) ||
      (desc->transb != CUBLAS_OP_N && desc->transb != CUBLAS_OP_T))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (c->type != d->type || !pptrain::emu::supported_types(a->type, b->type, d->type))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!known_epilogue(desc->epilogue)) return CUBLAS_STATUS_NOT_SUPPORTED;
  const uint64_t m = d->rows, n = d->cols;
  const uint64_t a_rows = desc->transa ? a->cols : a->rows, k = desc->transa ? a->rows : a->cols;
  const uint64_t b_rows = desc->transb ? b->cols : b->rows, b_cols = desc->transb ? b->rows : b->cols;
  if (a_rows != m || b_rows != k || b_cols != n || c->rows != m || c->cols != n)
    return CUBLAS_STATUS_INVALID_VALUE;
  for (cublasLtMatrixLayout_t x : {a, b, c, d}) {
    if (x->rows > uint64_t(INT_MAX) || x->cols > uint64_t(INT_MAX)) return CUBLAS_STATUS_INVALID_VALUE;
    if (x->ld < int64_t(x->rows > 1 ? x->rows : 1)) return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (uses_bias(desc->epilogue) && !desc->bias) return CUBLAS_STATUS_INVALID_VALUE;
  // The GELU input matrix: present, ld a multiple of 8 and at least the rows of D.
  if (uses_aux(desc->epilogue) && (!desc->aux || desc->aux_ld % 8 != 0 || desc->aux_ld < int64_t(m)))
    return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

// The descriptor's epilogue as the emulated GEMM takes it (check_problem has accepted it).
pptrain::emu::Epilogue epilogue(cublasLtMatmulDesc_t desc) {
  using Kind = pptrain::emu::Epilogue::Kind;
  Kind kind = Kind::none;
  switch (desc->epilogue) {
    case CUBLASLT_EPILOGUE_BIAS: kind = Kind::bias; break;
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: kind = Kind::gelu_aux_bias; break;
    case CUBLASLT_EPILOGUE_DGELU: kind = Kind::dgelu; break;
    case CUBLASLT_EPILOGUE_BGRADB: kind = Kind::bgradb; break;
    default: break;
  }
  return {kind, uses_bias(desc->epilogue) ? desc->bias : nullptr,
          uses_aux(desc->epilogue) ? const_cast<void*>(desc->aux) : nullptr, desc->aux_ld};
}

}  // namespace

long long pptrain::emu::cublaslt_heuristic_calls() { return heuristic_calls.load(); }

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = new (std::nothrow) cublasLtContext();
  return *handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  *desc = nullptr;
  if (computeType != CUBLAS_COMPUTE_32F || scaleType != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  *desc = new (std::nothrow) cublasLtMatmulDescEmu();
  return *desc ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return set(desc->transa, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSB: return set(desc->transb, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return set(desc->epilogue, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return set(desc->bias, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return set(desc->aux, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return set(desc->aux_ld, buf, size);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  *layout = new (std::nothrow) cublasLtMatrixLayoutEmu{type, rows, cols, ld};
  return *layout ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = new (std::nothrow) cublasLtMatmulPreferenceEmu();
  return *pref ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return set(pref->max_workspace, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return set(pref->min_alignment[0], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return set(pref->min_alignment[1], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return set(pref->min_alignment[2], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return set(pref->min_alignment[3], buf, size);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

// algo.data: [0] kAlgoMagic, [1] workspace bytes, [2..5] alignment of A, B, C, D it assumes,
// [6] alignment of the bias it assumes (from the descriptor's bias pointer), [7] that of the
// aux matrix (from the aux pointer).
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount) {
  ++heuristic_calls;
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (requestedAlgoCount <= 0 || !preference || !heuristicResultsArray || !returnAlgoCount)
    return CUBLAS_STATUS_INVALID_VALUE;
  *returnAlgoCount = 0;
  cublasStatus_t status = check_problem(desc, Adesc, Bdesc, Cdesc, Ddesc);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  cublasLtMatmulHeuristicResult_t& r = heuristicResultsArray[0];
  r = cublasLtMatmulHeuristicResult_t{};
  const uint64_t workspace = preference->max_workspace < kAlgoWorkspace ? preference->max_workspace : kAlgoWorkspace;
  r.algo.data[0] = kAlgoMagic;
  r.algo.data[1] = workspace;
  for (int i = 0; i < 4; ++i) r.algo.data[2 + i] = preference->min_alignment[i];
  r.algo.data[6] = uses_bias(desc->epilogue) ? alignment(desc->bias) : 1;
  r.algo.data[7] = uses_aux(desc->epilogue) ? alignment(desc->aux) : 1;
  r.workspaceSize = workspace;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                              cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                              cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                              const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspaceSizeInBytes,
                              cudaStream_t stream) {
  using pptrain::emu::Matrix;
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  cublasStatus_t status = check_problem(desc, Adesc, Bdesc, Cdesc, Ddesc);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  if (!alpha || !beta || !algo || algo->data[0] != kAlgoMagic) return CUBLAS_STATUS_INVALID_VALUE;
  if (workspaceSizeInBytes < algo->data[1] || (algo->data[1] && !workspace)) return CUBLAS_STATUS_INVALID_VALUE;
  const void* operands[4] = {A, B, C, D};
  for (int i = 0; i < 4; ++i)
    if (alignment(operands[i]) < algo->data[2 + i]) return CUBLAS_STATUS_INVALID_VALUE;
  if (uses_bias(desc->epilogue) && alignment(desc->bias) < algo->data[6]) return CUBLAS_STATUS_INVALID_VALUE;
  if (uses_aux(desc->epilogue) && alignment(desc->aux) < algo->data[7]) return CUBLAS_STATUS_INVALID_VALUE;
  const int64_t m = Ddesc->rows, n = Ddesc->cols, k = desc->transa ? Adesc->rows : Adesc->cols;
  auto matrix = [](const void* p, cublasLtMatrixLayout_t l) {
    return Matrix{p, l->type, int64_t(l->rows), int64_t(l->cols), l->ld};
  };
  // Everything the GEMM needs by value (the descriptors may be destroyed before it runs).
  const bool ta = desc->transa == CUBLAS_OP_T, tb = desc->transb == CUBLAS_OP_T;
  const float alpha_f = *static_cast<const float*>(alpha), beta_f = *static_cast<const float*>(beta);
  const Matrix a = matrix(A, Adesc), b = matrix(B, Bdesc), c = matrix(C, Cdesc);
  const cudaDataType d_type = Ddesc->type;
  const int64_t d_ld = Ddesc->ld;
  const pptrain::emu::Epilogue ep = epilogue(desc);
  pptrain::cuda_emu::enqueue_op(stream, {pptrain::cupti_emu::Op::kernel, "cublaslt_matmul_emulated", 0},
                                [=] {
    pptrain::emu::gemm(ta, tb, m, n, k, alpha_f, a, b, beta_f, c, D, d_type, d_ld, ep);
  });
  return CUBLAS_STATUS_SUCCESS;
}
