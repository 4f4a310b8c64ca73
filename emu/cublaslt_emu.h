// The slice of the cuBLASLt API the cuda backend uses, for the emulated build only. Names,
// enum values and signatures follow cublasLt.h. The matmul runs the emulated GEMM of
// gemm_emu.h (bf16 widened to fp32, OpenBLAS, one rounding to D's type) and then the
// epilogue. Like the real library it checks what it is given: an attribute it does not
// know or a buffer of the wrong size is CUBLAS_STATUS_INVALID_VALUE; layouts that do not
// form a product, a leading dimension below the rows, a too small workspace or an operand
// less aligned than the heuristic was told are CUBLAS_STATUS_INVALID_VALUE; type
// combinations, epilogues, compute or scale types it does not run are
// CUBLAS_STATUS_NOT_SUPPORTED. The heuristic returns one algorithm, which records what it
// was chosen for (workspace, alignments) so that cublasLtMatmul can hold a call to it.
#pragma once
#include <cstddef>
#include <cstdint>

#include "emu/cublas_emu.h"

struct cublasLtContext;
using cublasLtHandle_t = cublasLtContext*;
struct cublasLtMatmulDescEmu;
using cublasLtMatmulDesc_t = cublasLtMatmulDescEmu*;
struct cublasLtMatrixLayoutEmu;
using cublasLtMatrixLayout_t = cublasLtMatrixLayoutEmu*;
struct cublasLtMatmulPreferenceEmu;
using cublasLtMatmulPreference_t = cublasLtMatmulPreferenceEmu*;

struct cublasLtMatmulAlgo_t {
  uint64_t data[8];
};

struct cublasLtMatmulHeuristicResult_t {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
};

enum cublasLtMatmulDescAttributes_t {
  CUBLASLT_MATMUL_DESC_TRANSA = 3,        // int32_t (cublasOperation_t)
  CUBLASLT_MATMUL_DESC_TRANSB = 4,        // int32_t (cublasOperation_t)
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,      // uint32_t (cublasLtEpilogue_t)
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,  // const void* (bias) / void* (bias gradient)
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,  // void* (GELU_AUX_BIAS) / const void* (DGELU)
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,       // int64_t, default 0
};

// The epilogues the emulation runs (gemm_emu.h, Epilogue, says what each computes); any other
// value is CUBLAS_STATUS_NOT_SUPPORTED. Rules encoded from cublasLt.h's documentation of the
// epilogues and of CUBLASLT_MATMUL_DESC_BIAS_POINTER / EPILOGUE_AUX_POINTER / EPILOGUE_AUX_LD:
//  - BIAS, GELU_AUX_BIAS: a bias vector of D's type, length = rows of D, packed.
//  - GELU_AUX_BIAS, DGELU: an aux matrix (the GELU input) of D's type (the AUX_DATA_TYPE
//    default; that attribute is not emulated), shaped like D, whose leading dimension "must be
//    divisible by 8 and be no less than the number of rows in the output matrix"; a missing aux
//    pointer or a bad aux ld is CUBLAS_STATUS_INVALID_VALUE.
//  - BGRADB: the bias gradient Σ_k op(B)[k, j], length = columns of D, of D's type ("the same
//    type as the output elements"), stored (the library does not accumulate into it).
//  - The heuristic reads the bias and aux pointers' alignment; the matmul rejects operands less
//    aligned than that, as for A/B/C/D.
enum cublasLtEpilogue_t {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_BIAS = 4,  // D += bias[row], bias of D's type, length = rows of D
  CUBLASLT_EPILOGUE_GELU = 32,
  CUBLASLT_EPILOGUE_GELU_AUX = (CUBLASLT_EPILOGUE_GELU | 128),
  CUBLASLT_EPILOGUE_GELU_AUX_BIAS = (CUBLASLT_EPILOGUE_GELU_AUX | CUBLASLT_EPILOGUE_BIAS),
  CUBLASLT_EPILOGUE_DGELU = 64 | 128,
  CUBLASLT_EPILOGUE_BGRADB = 512,
};

enum cublasLtMatmulPreferenceAttributes_t {
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,    // uint64_t, default 0
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,  // uint32_t, default 256
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
};

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle);

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t sizeInBytes);

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout);

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t sizeInBytes);

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t Adesc,
                                              cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc,
                                              cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference,
                                              int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount);

// D = epilogue(alpha·op(A)·op(B) + beta·C); alpha and beta are host floats.
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                              cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                              cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream);

namespace pptrain::emu {
// Calls of cublasLtMatmulAlgoGetHeuristic in this process (tests: the plan cache).
long long cublaslt_heuristic_calls();
}  // namespace pptrain::emu
