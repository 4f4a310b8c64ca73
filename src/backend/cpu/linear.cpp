// Linear layer Y = X Wᵀ + b: each pass is one product over the whole microbatch, spread over
// all threads. Inside a window of constant weights (Ops::hold_weights) the two products with
// a weight (forward X·Wᵀ, dgrad dY·W) run on oneDNN's matmul and the weight's packed copy
// where this CPU has it (packed_weights.h) and the window runs enough rows; with fewer, the
// dgrad runs on oneDNN's sgemm there. Everything else runs on the GEMM library (OpenBLAS
// unless PPTRAIN_CPU_GEMM says otherwise: gemm_library.h). Row-major throughout: X[N,I],
// W[O,I], Y[N,O].
#include <algorithm>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/gemm_library.h"
#include "backend/cpu/isa_begin.h"  // last: see there

namespace pptrain::cpu::PPTRAIN_CPU_ISA {

// Sums the rows of dy[N,O] into db[O] (+=). Threads own disjoint column ranges and
// walk the rows in order, so every column's sum order is fixed whatever the thread
// count, and the inner loop is a contiguous vector add.
static void add_column_sums(float* db, const float* dy, int n, int out) {
  constexpr int kChunk = 64;  // columns per task: 4 cache lines, no false sharing
  int chunks = (out + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (size_t(n) * out >= kParallelMinElements)
  for (int chunk = 0; chunk < chunks; ++chunk) {
    int c0 = chunk * kChunk, width = std::min(kChunk, out - c0);
    float sum[kChunk];
    for (int j = 0; j < width; ++j) sum[j] = db[c0 + j];
    for (int row = 0; row < n; ++row) {
      const float* dy_row = dy + size_t(row) * out + c0;
#pragma omp simd
      for (int j = 0; j < width; ++j) sum[j] += dy_row[j];
    }
    for (int j = 0; j < width; ++j) db[c0 + j] = sum[j];
  }
}

void CpuOps::hold_weights(int microbatches) {
  // make() decides once per process; where the path does not run it is null every time.
  if (microbatches > 0 && !packed_) packed_ = PackedWeights::make();
  held_microbatches_ = microbatches;
  if (packed_) packed_->hold(microbatches > 0);
}

bool CpuOps::packs(int n) const {
  return packed_ && packed_->held() && size_t(n) * held_microbatches_ >= PackedWeights::kMinRows;
}

bool CpuOps::prepare_linear_weight(ConstView wv, int rows, int in, int out, bool dgrad) {
  if (wv.dtype != DType::f32 || !packs(rows)) return false;  // the op will not pack it either
  const float* w = static_cast<const float*>(wv.data);
  // As weight_product below takes it: forward w [out, in] read as wᵀ (k = in), dgrad as w (k = out).
  if (dgrad) packed_->prepare(PackedWeights::Use::dgrad, w, rows, out, in);
  else packed_->prepare(PackedWeights::Use::forward, w, rows, in, out);
  return true;
}

void CpuOps::weight_product(PackedWeights::Use use, float* c, const float* a, const float* w, const float* b, int n,
                            int k, int cols, bool accumulate) {
  const bool held = packed_ && packed_->held();
  if (packs(n)) return packed_->run(use, c, a, w, b, n, k, cols, accumulate);
  // With a bias, c starts as b broadcast over rows and the product is added (beta = 1): one
  // pass over c instead of a second pass after the product.
  float beta = accumulate ? 1.0f : 0.0f;
  if (b) {
    PPTRAIN_CHECK(!accumulate, "weight_product: a bias and accumulate");
#pragma omp parallel for schedule(static) if (size_t(n) * cols >= kParallelMinElements)
    for (int row = 0; row < n; ++row) std::copy(b, b + cols, c + size_t(row) * cols);
    beta = 1.0f;
  }
  const bool forward = use == PackedWeights::Use::forward;
  // forward: c[N,O] = a[N,I] · w[O,I]ᵀ;  dgrad: c[N,I] = a[N,O] · w[O,I]
  const Gemm g{false, forward, n, cols, k, 1.0f, a, k, w, forward ? k : cols, beta, c, cols};
  // The dgrad in a window of too few rows to pack, on a CPU where the packed path runs:
  // oneDNN's own sgemm, which packs per call as OpenBLAS does, beat OpenBLAS's Haswell kernels
  // there (a Zen 4 VM, GPT-2 124M's products at 256 rows, 2 threads, warm: 128-134 ms against
  // 152-154 for the dgrads; a step at B = 4, T = 256, alternated: 3.84-3.87 s against
  // 4.02-4.03). Its forward ran even with OpenBLAS's (142-143 ms both), which keeps it.
  if (held && !forward) run_gemm(GemmLibrary::onednn, g);
  else sgemm(g);
}

void CpuOps::linear_forward(View yv, ConstView xv, ConstView wv, ConstView bv, int n, int in,
                            int out) {
  float *y; const float *x, *w, *b;
  std::tie(y, x, w, b) = fp32("linear_forward", yv, xv, wv, bv);
  // y[N,O] = x[N,I] · w[O,I]ᵀ + b
  weight_product(PackedWeights::Use::forward, y, x, w, b, n, in, out, false);
}

void CpuOps::linear_forward_residual(View y, ConstView x, ConstView w, ConstView b, ConstView residual, int n,
                                     int in, int out) {
  if (residual.data == y.data) {  // the residual in place: the product added onto it
    float* yp;
    const float *xp, *wp, *rp;
    std::tie(yp, xp, wp, rp) = fp32("linear_forward_residual", y, x, w, residual);
    weight_product(PackedWeights::Use::forward, yp, xp, wp, nullptr, n, in, out, true);
    if (b.data) add_bias(y, b, n, out);
    return;
  }
  // The unfused ops in their order: the same bits as a layer calling them one by one.
  linear_forward(y, x, w, nullptr, n, in, out);
  if (b.data) add_bias(y, b, n, out);
  add(y, y, residual, size_t(n) * out);
}

void CpuOps::linear_backward_input(View dxv, ConstView dyv, ConstView wv, int n, int in, int out,
                                   bool accumulate) {
  float *dx; const float *dy, *w;
  std::tie(dx, dy, w) = fp32("linear_backward_input", dxv, dyv, wv);
  // dx[N,I] (+)= dy[N,O] · w[O,I]
  weight_product(PackedWeights::Use::dgrad, dx, dy, w, nullptr, n, out, in, accumulate);
}

void CpuOps::linear_backward_weight(float* dw, float* db, ConstView dyv, ConstView xv, int n,
                                    int in, int out) {
  const float *dy, *x;
  std::tie(dy, x) = fp32("linear_backward_weight", dyv, xv);
  // dw[O,I] += dy[N,O]ᵀ · x[N,I]
  sgemm({true, false, out, in, n, 1.0f, dy, out, x, in, 1.0f, dw, in});
  if (db) add_column_sums(db, dy, n, out);
}

// The fused ops' reference: the unfused sequence, so that a model run on the cpu backend
// gives the same bits whether its layers call the fused or the separate ops.
void CpuOps::linear_gelu_forward(View y, View pre, ConstView x, ConstView w, ConstView b, int n,
                                 int in, int out) {
  fp32("linear_gelu_forward", y, pre, x, w, b);  // a bf16 view fails naming this op
  // pre[N,O] = x[N,I] · w[O,I]ᵀ + b[O];  y[N,O] = gelu(pre)
  linear_forward(pre, x, w, b, n, in, out);
  gelu_forward(y, pre, size_t(n) * out);
}

void CpuOps::linear_backward_input_dgelu(View dpre, ConstView dy, ConstView w, ConstView pre,
                                         int n, int in, int out) {
  fp32("linear_backward_input_dgelu", dpre, dy, w, pre);
  // dpre[N,I] = dy[N,O] · w[O,I], then ∘ gelu'(pre[N,I]) in place
  linear_backward_input(dpre, dy, w, n, in, out, false);
  gelu_backward(dpre, dpre, pre, size_t(n) * in);
}

}  // namespace pptrain::cpu::PPTRAIN_CPU_ISA
