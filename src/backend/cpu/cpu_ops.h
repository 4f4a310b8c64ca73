// The cpu backend: fp32, OpenBLAS sgemm for every matmul, OpenMP for the rest.
// Each op family lives in its own file of this directory; this header is the class.
//
// Threading: a big sgemm outside a parallel region uses all OpenMP threads; inside
// `omp parallel` (attention, per (batch, head)) the OpenMP build of OpenBLAS runs
// single-threaded, which is what we want there. Reductions are split over channels or
// over fixed-size blocks (never over threads, never with float atomics), so results
// are bit-identical from run to run.
//
// One host thread drives a CpuOps object at a time (like a CUDA stream): the per-thread
// scratch below is owned by the object and reused across calls.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <vector>

#include "backend/ops.h"

namespace pptrain::cpu {

// RAII float array, 64-byte aligned, grown on demand and never shrunk.
class ScratchArray {
 public:
  float* reserve(size_t n);  // at least n floats; contents unspecified
 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float[], Free> data_;
  size_t capacity_ = 0;
};

class CpuOps final : public Ops {
 public:
  std::string name() const override { return "cpu"; }

  // memory.cpp
  void* allocate(size_t bytes) override;
  void release(void* p) override;
  void copy_to_device(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* p, size_t bytes) override;
  void synchronize() override {}

  // linear.cpp
  void linear_forward(float* y, const float* x, const float* w, const float* b, int n, int in,
                      int out) override;
  void linear_backward_input(float* dx, const float* dy, const float* w, int n, int in, int out,
                             bool accumulate) override;
  void linear_backward_weight(float* dw, float* db, const float* dy, const float* x, int n, int in,
                              int out) override;

  // layernorm.cpp
  void layernorm_forward(float* y, float* mean, float* rstd, const float* x, const float* g,
                         const float* b, int n, int c) override;
  void layernorm_backward_input(float* dx, const float* dy, const float* x, const float* mean,
                                const float* rstd, const float* g, int n, int c,
                                bool accumulate) override;
  void layernorm_backward_weight(float* dg, float* db, const float* dy, const float* x,
                                 const float* mean, const float* rstd, int n, int c) override;

  // elementwise.cpp
  void gelu_forward(float* y, const float* x, size_t n) override;
  void gelu_backward(float* dx, const float* dy, const float* x, size_t n) override;
  void add(float* y, const float* a, const float* b, size_t n) override;
  void accumulate(float* y, const float* x, size_t n) override;
  void scale(float* y, float s, size_t n) override;
  void add_bias(float* y, const float* b, int n, int c) override;

  // embedding.cpp
  void embedding_forward(float* y, const int32_t* tokens, const float* wte, const float* wpe, int n,
                         int t, int c, int v0, int vl) override;
  void embedding_backward_weight(float* dwte, float* dwpe, const float* dy, const int32_t* tokens,
                                 int n, int t, int c, int v0, int vl) override;

  // attention.cpp
  void attention_forward(float* out, float* probs, const float* qkv, int b, int t, int nh,
                         int hd) override;
  void attention_backward_input(float* dqkv, const float* dout, const float* qkv,
                                const float* probs, int b, int t, int nh, int hd) override;

  // cross_entropy.cpp
  void ce_row_max(float* rmax, const float* logits, int n, int vl, int valid) override;
  void ce_sumexp_target(float* sumexp, float* target_logit, const float* logits, const float* rmax,
                        const int32_t* targets, int n, int vl, int valid, int v0) override;
  double ce_loss_sum(const float* rmax, const float* sumexp, const float* target_logit,
                     int n) override;
  void ce_backward(float* dlogits, const float* logits, const float* rmax, const float* sumexp,
                   const int32_t* targets, int n, int vl, int valid, int v0, float scale) override;

  // adamw.cpp
  void adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float b1, float b2,
             float eps, float wd, int t) override;
  double sum_squares(const float* x, size_t n) override;

 private:
  // One scratch array per OpenMP thread (attention backward's dP/dS tile), sized
  // before the parallel region so no thread allocates inside it.
  std::vector<ScratchArray> thread_scratch_;
  std::vector<double> block_sums_;  // sum_squares' per-block partial sums
  void reserve_thread_scratch(size_t floats_per_thread);
};

// Elementwise loops run serially below this many elements: forking threads costs more
// than the work (bias vectors, small parameter tensors).
constexpr size_t kParallelMinElements = size_t(1) << 15;

}  // namespace pptrain::cpu
