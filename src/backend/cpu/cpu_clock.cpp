// The CPU's clock from dependent instruction chains (cpu_clock.h). Compiled once, for the
// baseline ISA: the chains use integer instructions only.
#include "backend/cpu/cpu_clock.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <vector>

namespace pptrain::cpu {

namespace {

constexpr int kChainLength = 8;  // dependent instructions per loop iteration

// One run: iterations x 8 dependent instructions. The loop's own decrement and branch are
// independent of the chain and retire beside it, so the chain's latency sets the time.
template <ChainOp op>
void run_chain(long iterations) {
#if defined(__x86_64__)
  long x = 1, n = iterations;
  if constexpr (op == ChainOp::add) {
    // The addend is a register, not an immediate: Intel's Golden Cove cores (Sapphire and
    // Emerald Rapids) fold chains of `add $imm, reg` at register renaming, several a cycle,
    // and an immediate chain measured 10-12 GHz on a 2.9 GHz Emerald Rapids VM.
    const long one = 1;
    asm volatile(
        "1:\n\t"
        "add %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\t"
        "add %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\t"
        "dec %1\n\tjnz 1b"
        : "+r"(x), "+r"(n)
        : "r"(one)
        : "cc");
  } else {
    asm volatile(
        "1:\n\t"
        "imul $3, %0, %0\n\timul $3, %0, %0\n\timul $3, %0, %0\n\timul $3, %0, %0\n\t"
        "imul $3, %0, %0\n\timul $3, %0, %0\n\timul $3, %0, %0\n\timul $3, %0, %0\n\t"
        "dec %1\n\tjnz 1b"
        : "+r"(x), "+r"(n)
        :
        : "cc");
  }
#else
  (void)iterations;
#endif
}

int latency_cycles(ChainOp op) { return op == ChainOp::add ? 1 : 3; }

}  // namespace

double chain_clock_ghz(ChainOp op, long iterations, int reps) {
#if defined(__x86_64__)
  if (iterations <= 0 || reps <= 0) return 0;
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    if (op == ChainOp::add) run_chain<ChainOp::add>(iterations);
    else run_chain<ChainOp::imul>(iterations);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const double cycles = double(iterations) * kChainLength * latency_cycles(op);
  return cycles / best / 1e9;
#else
  (void)op, (void)iterations, (void)reps;
  return 0;
#endif
}

double measured_clock_ghz(int threads) {
  static std::mutex mutex;
  static int measured_threads = 0;
  static double ghz = 0;
  std::lock_guard<std::mutex> lock(mutex);
  threads = std::max(threads, 1);
  if (measured_threads == threads) return ghz;
  // 10^6 iterations: 8·10^6 cycles, ~3 ms at 3 GHz; the best of 3 leaves out a run that a
  // context switch or a clock ramping up from idle lengthened.
  constexpr long kIterations = 1000000;
  std::vector<double> per_thread(size_t(threads), 0.0);
#pragma omp parallel num_threads(threads)
  per_thread[size_t(omp_get_thread_num())] = chain_clock_ghz(ChainOp::add, kIterations, 3);
  double sum = 0;
  int ran = 0;  // OpenMP may give fewer threads than asked (nested regions, OMP_DYNAMIC)
  for (double g : per_thread)
    if (g > 0) sum += g, ++ran;
  ghz = ran ? sum / ran : 0;
  measured_threads = threads;
  return ghz;
}

}  // namespace pptrain::cpu
