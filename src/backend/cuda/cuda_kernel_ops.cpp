// CudaOps: the ops that are kernel launches (layernorm, residual + layernorm, RMSNorm, rotary
// embedding, SwiGLU, GELU, elementwise, embedding, cross-entropy). The launchers are templates
// over the storage type T, so each op is one call at the T of its views (dispatch(), cuda_ops.h).
#include "backend/cuda/cuda_ops.h"
#include "cross_entropy.cuh"
#include "elementwise.cuh"
#include "embedding.cuh"
#include "gelu.cuh"
#include "layernorm.cuh"
#include "residual_layernorm.cuh"
#include "rmsnorm.cuh"
#include "rotary.cuh"
#include "swiglu.cuh"

namespace pptrain::cuda {

using namespace pptrain::kernels;

// The LAUNCHED ops of ops.h, generated: ret CudaOps::name(params) is the one call
// launch_name(ctx(), args...) with the views as T* / const T* (dispatch(), cuda_ops.h). A
// launcher that does not take the op's parameters in that order fails to compile here.
#define PPTRAIN_EXPAND(...) __VA_ARGS__
#define PPTRAIN_NO_BODY(ret, name, params, args)
#define PPTRAIN_LAUNCH_BODY(ret, name, params, args)                                   \
  ret CudaOps::name params {                                                           \
    auto launch_at_T = [&](auto... typed) { return launch_##name(ctx(), typed...); };  \
    return dispatch(#name, launch_at_T, PPTRAIN_EXPAND args);                          \
  }
PPTRAIN_OPS(PPTRAIN_NO_BODY, PPTRAIN_LAUNCH_BODY)
#undef PPTRAIN_LAUNCH_BODY
#undef PPTRAIN_NO_BODY
#undef PPTRAIN_EXPAND

// ---- the launchers that need a workspace ------------------------------------------------------

void CudaOps::layernorm_backward_weight(float* dg, float* db, ConstView dy, ConstView x, const float* mean,
                                        const float* rstd, int n, int c) {
  // dg[C] += Σ_rows dy · x̂;  db[C] += Σ_rows dy
  auto* ws = static_cast<float*>(column_workspace_.reserve(layernorm_backward_weight_workspace_bytes(n, c)));
  dispatch("layernorm_backward_weight",
           [&](auto dy, auto x) { launch_layernorm_backward_weight(ctx(), dg, db, dy, x, mean, rstd, ws, n, c); },
           dy, x);
}

void CudaOps::rmsnorm_backward_weight(float* dg, ConstView dy, ConstView x, const float* rstd, int n, int c) {
  // dg[C] += Σ_rows dy · x̂
  auto* ws = static_cast<float*>(column_workspace_.reserve(rmsnorm_backward_weight_workspace_bytes(n, c)));
  dispatch("rmsnorm_backward_weight",
           [&](auto dy, auto x) { launch_rmsnorm_backward_weight(ctx(), dg, dy, x, rstd, ws, n, c); }, dy, x);
}

void CudaOps::embedding_backward_weight(float* dwte, float* dwpe, ConstView dy, const int32_t* tokens, int n, int t,
                                        int c, int v0, int vl) {
  // dwte[tok - v0] += dy[row], dwpe[row mod T] += dy[row]; the workspace holds the rows
  // sorted by vocabulary slice
  auto* ws = static_cast<int32_t*>(column_workspace_.reserve(embedding_backward_weight_workspace_bytes(n, vl)));
  dispatch("embedding_backward_weight",
           [&](auto dy) { launch_embedding_backward_weight(ctx(), dwte, dwpe, dy, tokens, ws, n, t, c, v0, vl); }, dy);
}

void CudaOps::rotary_forward(View qkv, int b, int t, int nh, int nkv, int hd, const RotaryFrequencies& rope) {
  // qkv[B,T,(NH + 2·NKV)·HD] in place; the workspace takes the cos/sin table [2][T][HD/2]
  auto* table = static_cast<float*>(rotary_workspace_.reserve(rotary_table_bytes(t, hd)));
  dispatch("rotary_forward",
           [&](auto qkv) { launch_rotary_forward(ctx(), qkv, table, b, t, nh, nkv, hd, rope.inv_freq, rope.planes); },
           qkv);
}

void CudaOps::rotary_backward_input(View dqkv, int b, int t, int nh, int nkv, int hd,
                                    const RotaryFrequencies& rope) {
  auto* table = static_cast<float*>(rotary_workspace_.reserve(rotary_table_bytes(t, hd)));
  dispatch("rotary_backward_input",
           [&](auto dqkv) {
             launch_rotary_backward_input(ctx(), dqkv, table, b, t, nh, nkv, hd, rope.inv_freq, rope.planes);
           },
           dqkv);
}

}  // namespace pptrain::cuda
