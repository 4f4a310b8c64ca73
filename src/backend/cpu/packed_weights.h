// The linear layers' products with a weight operand on oneDNN's matmul, the weights packed
// once into its kernel's blocked layout and reused while they cannot change.
//
// Why: a GEMM library packs both operands on every call. A weight [O,I] is read by every
// microbatch's forward (X·Wᵀ) and dgrad (dY·W); OpenBLAS packs it anew each time, from memory
// that the activations in between have pushed out of the caches. oneDNN's matmul takes its
// weights in the blocked layout its brgemm kernel reads, so a weight reordered once into that
// layout serves every microbatch (measured on a Zen 4 core, the pp 2 model's eight linear
// shapes over 8 microbatches of 256 rows, reorders included: forward 62 ms against OpenBLAS's
// 70, dgrad 61-63 against 66-68). The weight gradient's product (dYᵀ·X) has no weight operand
// and stays on the GEMM library (oneDNN's matmul was 2% slower there).
//
// When: only between Ops::hold_weights(true) and (false), a window in which the caller
// promises every weight is constant from its first use on (a training step's or an
// evaluation's passes). Each window packs a weight again at its first use, so an update, a
// load or an all-gather between windows is always seen; outside a window nothing is packed and
// the linear layers run on the GEMM library. The copies are kept for the next window's
// repacking (a weight's two layouts: twice the bytes of the weights a rank holds, outside the
// backend's allocator, counted as its scratch: Ops::memory_stats, job/memory_estimate.h);
// those a window did not use serve a weight new to the next (one that moved) or are freed.
//
// Where: oneDNN 2.x is loaded with dlopen (libdnnl.so.2; the build reads its header from
// libdnnl-dev, and a build without that header leaves this out). The packed path is the
// default wherever oneDNN's matmul picks its brgemm kernel (AVX-512 CPUs); elsewhere it would
// run the same packing GEMM as dnnl_sgemm, no faster, so the linear layers stay on the GEMM
// library. PPTRAIN_CPU_GEMM set to a library runs everything on that library alone. (In a
// window of too few rows, the cpu backend's dgrad still runs on oneDNN, its sgemm: linear.cpp.)
//
// Compiled once, for the baseline ISA: oneDNN dispatches on the CPU itself.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace pptrain::cpu {

class PackedWeights {
 public:
  // A weight read as Wᵀ (forward: W [cols, k]) or as W (dgrad: W [k, cols]).
  enum class Use { forward, dgrad };

  // A weight is packed once a window and read by each microbatch's forward and dgrad, whose
  // products gain up to ~10% on the packed layout; packing costs a copy of the weight per
  // layout, and the packed copy is read from memory like the plain one. The gain grows with the
  // rows the window runs through the weight, the cost does not. Measured on a Zen 4 VM against
  // PPTRAIN_CPU_GEMM=openblas, alternated: the pp 2 model's stages (8 microbatches of 256 rows,
  // 1 thread) 443-446 ms a step packed against 450-454; GPT-2 124M (2 threads) with 1,024 rows
  // a step (B = 4, T = 256) 3.845 s packed against 3.783, with 256 rows 1.11 against 1.02. So
  // from 2,048 rows a window on (the linear ops ask: linear.cpp).
  static constexpr size_t kMinRows = 2048;

  // The packed path for this process, or null where it does not run (why_not() says why).
  static std::unique_ptr<PackedWeights> make();
  // Why make() returns null here, or "" where it does not.
  static const std::string& why_not();
  // "oneDNN 2.6.3 matmul, brg:avx512_core" (what the start-up line names), where make() runs.
  static const std::string& description();

  ~PackedWeights();
  PackedWeights(const PackedWeights&) = delete;
  PackedWeights& operator=(const PackedWeights&) = delete;

  // Opens (true) or closes (false) a window of constant weights (see above).
  void hold(bool held);
  bool held() const { return held_; }

  // c[n, cols] = a[n, k] · op(w) (+ b[cols]) (+ c when accumulate), op(w) = wᵀ or w by `use`;
  // only inside a window. Row-major and dense: a's row stride k, c's cols. A status other than
  // success from oneDNN fails in one line naming the shape.
  void run(Use use, float* c, const float* a, const float* w, const float* b, int n, int k, int cols, bool accumulate);

  // Makes w's copy for `use` in this window now, as run() of n rows would at the product, if
  // the window has not made it yet: work taken ahead into time its caller would otherwise
  // spend waiting (Ops::prepare_linear_weight). Only inside a window.
  void prepare(Use use, const float* w, int n, int k, int cols);
  // The copies made so far (each a weight packed in one layout for one window).
  uint64_t packings() const;

  // The bytes the packed copies hold now.
  size_t packed_bytes() const;

  struct State;  // oneDNN's engine, stream, primitives and the packed copies (packed_weights.cpp)

 private:
  explicit PackedWeights(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
  bool held_ = false;
};

}  // namespace pptrain::cpu
