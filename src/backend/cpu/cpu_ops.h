// The cpu backend: fp32, OpenBLAS sgemm for every matmul, OpenMP for the rest.
// Each op family lives in its own file of this directory; this header is the class.
// Every body first turns its views into float pointers with fp32() below, which rejects
// any other dtype with one line.
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
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backend/cpu/host_arena.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/packed_weights.h"
#include "backend/ops.h"
#include "core/error.h"

namespace pptrain::cpu {
// cpu::avx2 or cpu::avx512: one copy of the backend per instruction set (isa.h).
inline namespace PPTRAIN_CPU_ISA {

// RAII float array, 64-byte aligned, grown on demand and never shrunk.
class ScratchArray {
 public:
  float* reserve(size_t n);  // at least n floats; contents unspecified
  size_t bytes() const { return capacity_ * sizeof(float); }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float[], Free> data_;
  size_t capacity_ = 0;
};

class CpuOps final : public Ops {
 public:
  explicit CpuOps(const Faults& faults = {}) : uncounted_release_(faults.find("uncounted_release") != nullptr) {}
  CpuOps(const CpuOps&) = delete;
  CpuOps& operator=(const CpuOps&) = delete;
  std::string name() const override { return "cpu"; }

  // memory.cpp
  void* allocate(size_t bytes) override;
  void release(void* p) override;
  void copy_to_device(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* p, size_t bytes) override;
  void synchronize() override {}
  // in_use and peak count the bytes asked of allocate(); reserved counts each live block
  // rounded up to the 64-byte alignment, what it really holds of the arena, and the
  // released blocks kept for reuse (memory.cpp). The rest of the arena's newest chunk and
  // the scratch arrays below are not counted.
  MemoryStats memory_stats() const override;
  void reset_peak_memory() override { peak_bytes_ = bytes_in_use_; }
  // Opens or closes a window of constant weights: inside one that runs enough rows through
  // a weight (linear.cpp), the linear layers' products with it run on its packed copy where
  // oneDNN's matmul can (packed_weights.h).
  void hold_weights(int microbatches) override;
  // Packs w now where the window would pack it at the op (linear.cpp).
  bool prepare_linear_weight(ConstView w, int rows, int in, int out, bool dgrad) override;

  // The ops, one file per family: linear.cpp, layernorm.cpp, rmsnorm.cpp, elementwise.cpp
  // (GELU too), swiglu.cpp, rotary.cpp, embedding.cpp, attention.cpp and attention_flash.cpp
  // (GQA too), cross_entropy.cpp, adamw.cpp; cast in memory.cpp.
  PPTRAIN_EACH_OP(PPTRAIN_OP_OVERRIDE)

 private:
  // One scratch array per OpenMP thread (attention's score and dP/dS tiles), sized
  // before the parallel region so no thread allocates inside it.
  std::vector<ScratchArray> thread_scratch_;
  std::vector<double> block_sums_;  // sum_squares' per-block partial sums
  ScratchArray rotary_table_;       // rotary's cos and sin [T, HD/2] each
  // Where allocate() takes new blocks from; it unmaps them all when the backend goes.
  HostArena arena_;
  // Every live block of allocate() -> the bytes asked for it, and the totals over them.
  std::unordered_map<void*, size_t> live_blocks_;
  size_t bytes_in_use_ = 0, peak_bytes_ = 0, bytes_reserved_ = 0;
  // Released blocks by rounded size, handed out again before the C library is asked.
  std::unordered_map<size_t, std::vector<void*>> cached_;
  size_t bytes_cached_ = 0;
  // The packed path, made at the first window (null where it does not run here).
  std::unique_ptr<PackedWeights> packed_;
  int held_microbatches_ = 0;  // of the open window, 0 outside one
  // c[n, cols] (+)= a[n, k] · op(w) (+ b) on the packed weights inside a window, else the
  // GEMM library (linear.cpp).
  void weight_product(PackedWeights::Use use, float* c, const float* a, const float* w, const float* b, int n, int k,
                      int cols, bool accumulate);
  // Whether this window's products of n rows run on packed weights.
  bool packs(int n) const;
  bool uncounted_release_;  // planted fault (tests of the tests): the next release is not subtracted
  void reserve_thread_scratch(size_t floats_per_thread);
};

// The float pointers of an op's views, in order (View -> float*, ConstView -> const
// float*); a view of another dtype fails with one line naming the op:
//   float* y; const float* x;
//   std::tie(y, x) = fp32("gelu_forward", yv, xv);
// into plain local pointers, not structured bindings: a binding names a member of a hidden
// tuple, which an OpenMP region shares by reference, and GCC then reloads the pointer in
// the loop and leaves `omp simd` loops scalar (measured: the elementwise ops and
// layernorm's dgrad reduction), which changes both speed and the reduction's rounding.
inline float* fp32_data(View v) { return static_cast<float*>(v.data); }
inline const float* fp32_data(ConstView v) { return static_cast<const float*>(v.data); }
template <typename... Views>
auto fp32(const char* op, Views... views) {
  for (const ConstView v : {ConstView(views)...})
    if (v.data && v.dtype != DType::f32)
      fail("backend 'cpu' has no ", dtype_name(v.dtype), " ", op,
           " (training.precision: bf16 needs device: cuda)");
  return std::tuple{fp32_data(views)...};
}

// Elementwise loops run serially below this many elements: forking threads costs more
// than the work (bias vectors, small parameter tensors).
constexpr size_t kParallelMinElements = size_t(1) << 15;

}  // namespace PPTRAIN_CPU_ISA
}  // namespace pptrain::cpu
