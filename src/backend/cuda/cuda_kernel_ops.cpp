// CudaOps: the ops that are kernel launches (layernorm, GELU, elementwise, embedding,
// cross-entropy), in fp32 and bf16. The launchers are templates over the storage type, so
// each overload is the same call with its own pointer types; bf16 pointers cross to
// kernels::bf16 through to_kernel().
#include "backend/cuda/cuda_ops.h"
#include "cross_entropy.cuh"
#include "elementwise.cuh"
#include "embedding.cuh"
#include "gelu.cuh"
#include "layernorm.cuh"

namespace pptrain::cuda {

using namespace pptrain::kernels;

// ---- layernorm -------------------------------------------------------------------------------

void CudaOps::layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* g,
                                const float* b, int n, int c) {
  launch_layernorm_forward(ctx(), y, mean, rstd, x, g, b, n, c);
}
void CudaOps::layernorm_forward(bfloat16* y, float* mean, float* rstd, const bfloat16* x, const bfloat16* g,
                                const bfloat16* b, int n, int c) {
  launch_layernorm_forward(ctx(), to_kernel(y), mean, rstd, to_kernel(x), to_kernel(g), to_kernel(b), n, c);
}

void CudaOps::layernorm_backward_input(float* dx, const float* dy, const float* x, const float* mean,
                                       const float* rstd, const float* g, int n, int c, bool accumulate) {
  launch_layernorm_backward_input(ctx(), dx, dy, x, mean, rstd, g, n, c, accumulate);
}
void CudaOps::layernorm_backward_input(bfloat16* dx, const bfloat16* dy, const bfloat16* x, const float* mean,
                                       const float* rstd, const bfloat16* g, int n, int c, bool accumulate) {
  launch_layernorm_backward_input(ctx(), to_kernel(dx), to_kernel(dy), to_kernel(x), mean, rstd, to_kernel(g), n,
                                  c, accumulate);
}

template <typename T>
void CudaOps::layernorm_backward_weight_impl(float* dg, float* db, const T* dy, const T* x, const float* mean,
                                             const float* rstd, int n, int c) {
  auto* ws = static_cast<float*>(column_workspace_.reserve(layernorm_backward_weight_workspace_bytes(n, c)));
  launch_layernorm_backward_weight(ctx(), dg, db, dy, x, mean, rstd, ws, n, c);
}
void CudaOps::layernorm_backward_weight(float* dg, float* db, const float* dy, const float* x,
                                        const float* mean, const float* rstd, int n, int c) {
  layernorm_backward_weight_impl(dg, db, dy, x, mean, rstd, n, c);
}
void CudaOps::layernorm_backward_weight(float* dg, float* db, const bfloat16* dy, const bfloat16* x,
                                        const float* mean, const float* rstd, int n, int c) {
  layernorm_backward_weight_impl(dg, db, to_kernel(dy), to_kernel(x), mean, rstd, n, c);
}

// ---- GELU and elementwise --------------------------------------------------------------------

void CudaOps::gelu_forward(float* y, const float* x, size_t n) { launch_gelu_forward(ctx(), y, x, n); }
void CudaOps::gelu_forward(bfloat16* y, const bfloat16* x, size_t n) {
  launch_gelu_forward(ctx(), to_kernel(y), to_kernel(x), n);
}
void CudaOps::gelu_backward(float* dx, const float* dy, const float* x, size_t n) {
  launch_gelu_backward(ctx(), dx, dy, x, n);
}
void CudaOps::gelu_backward(bfloat16* dx, const bfloat16* dy, const bfloat16* x, size_t n) {
  launch_gelu_backward(ctx(), to_kernel(dx), to_kernel(dy), to_kernel(x), n);
}

void CudaOps::add(float* y, const float* a, const float* b, size_t n) { launch_add(ctx(), y, a, b, n); }
void CudaOps::add(bfloat16* y, const bfloat16* a, const bfloat16* b, size_t n) {
  launch_add(ctx(), to_kernel(y), to_kernel(a), to_kernel(b), n);
}
void CudaOps::accumulate(float* y, const float* x, size_t n) { launch_accumulate(ctx(), y, x, n); }
void CudaOps::scale(float* y, float s, size_t n) { launch_scale(ctx(), y, s, n); }
void CudaOps::add_bias(float* y, const float* b, int n, int c) { launch_add_bias(ctx(), y, b, n, c); }
void CudaOps::add_bias(bfloat16* y, const bfloat16* b, int n, int c) {
  launch_add_bias(ctx(), to_kernel(y), to_kernel(b), n, c);
}

// ---- embedding -------------------------------------------------------------------------------

void CudaOps::embedding_forward(float* y, const int32_t* tokens, const float* wte, const float* wpe, int n, int t,
                                int c, int v0, int vl) {
  launch_embedding_forward(ctx(), y, tokens, wte, wpe, n, t, c, v0, vl);
}
void CudaOps::embedding_forward(bfloat16* y, const int32_t* tokens, const bfloat16* wte, const bfloat16* wpe,
                                int n, int t, int c, int v0, int vl) {
  launch_embedding_forward(ctx(), to_kernel(y), tokens, to_kernel(wte), to_kernel(wpe), n, t, c, v0, vl);
}
void CudaOps::embedding_backward_weight(float* dwte, float* dwpe, const float* dy, const int32_t* tokens, int n,
                                        int t, int c, int v0, int vl) {
  launch_embedding_backward_weight(ctx(), dwte, dwpe, dy, tokens, n, t, c, v0, vl);
}
void CudaOps::embedding_backward_weight(float* dwte, float* dwpe, const bfloat16* dy, const int32_t* tokens,
                                        int n, int t, int c, int v0, int vl) {
  launch_embedding_backward_weight(ctx(), dwte, dwpe, to_kernel(dy), tokens, n, t, c, v0, vl);
}

// ---- cross-entropy: per-row statistics (fp32) from logits of either storage type -------------

void CudaOps::ce_row_max(float* rmax, const float* logits, int n, int vl, int valid) {
  launch_ce_row_max(ctx(), rmax, logits, n, vl, valid);
}
void CudaOps::ce_row_max(float* rmax, const bfloat16* logits, int n, int vl, int valid) {
  launch_ce_row_max(ctx(), rmax, to_kernel(logits), n, vl, valid);
}
void CudaOps::ce_sumexp_target(float* sumexp, float* target_logit, const float* logits, const float* rmax,
                               const int32_t* targets, int n, int vl, int valid, int v0) {
  launch_ce_sumexp_target(ctx(), sumexp, target_logit, logits, rmax, targets, n, vl, valid, v0);
}
void CudaOps::ce_sumexp_target(float* sumexp, float* target_logit, const bfloat16* logits, const float* rmax,
                               const int32_t* targets, int n, int vl, int valid, int v0) {
  launch_ce_sumexp_target(ctx(), sumexp, target_logit, to_kernel(logits), rmax, targets, n, vl, valid, v0);
}
void CudaOps::ce_backward(float* dlogits, const float* logits, const float* rmax, const float* sumexp,
                          const int32_t* targets, int n, int vl, int valid, int v0, float scale) {
  launch_ce_backward(ctx(), dlogits, logits, rmax, sumexp, targets, n, vl, valid, v0, scale);
}
void CudaOps::ce_backward(bfloat16* dlogits, const bfloat16* logits, const float* rmax, const float* sumexp,
                          const int32_t* targets, int n, int vl, int valid, int v0, float scale) {
  launch_ce_backward(ctx(), to_kernel(dlogits), to_kernel(logits), rmax, sumexp, targets, n, vl, valid, v0, scale);
}

}  // namespace pptrain::cuda
