// The FMA throughput of one thread on this copy's vectors (cpu_isa.h: fma_gflops), for the
// peak estimate's FLOPs per cycle (blas_setup.h). Which FMA units a core has is not in
// CPUID: Xeons of the same model number come with one AVX-512 FMA unit (Skylake and Cascade
// Lake Bronze, Silver and most Gold 5xxx) or two, and Zen and Zen+ execute 256-bit FMAs on
// 128-bit halves. A table of two full-width units, per instruction set, put those at twice
// their peak; this measures instead.
//
// kChains independent accumulators, each updated by one FMA per iteration: enough to cover
// the FMA latency (4 to 5 cycles) on two pipes (8 to 10 in flight), and with the two
// operands 12 registers, under AVX2's 16. acc = acc * a + b with a just below 1 stays finite
// and normal (it tends to b / (1 - a)), so no denormal slows a lane.
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>

#include "backend/cpu/isa.h"
#include "backend/cpu/vector_math.h"
#include "backend/cpu/isa_begin.h"  // last: see there
#include "backend/cpu/simd.h"  // after it: its vectors are this file's ISA's

namespace pptrain::cpu::PPTRAIN_CPU_ISA {

namespace {
constexpr int kChains = 10;
}

double fma_gflops(long iterations, int reps) {
#if !defined(__FMA__)
  // simd::fma is then a multiply and an add or a library call: no FMA unit to measure.
  (void)iterations, (void)reps;
  return 0;
#else
  using namespace simd;
  const Vec a = splat(0.99999994f), b = splat(1.0e-7f);
  Vec acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = splat(1.0f + 0.001f * float(c));
  double best = 1e300;
  for (int r = 0; r < std::max(reps, 1); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < iterations; ++i)
      for (int c = 0; c < kChains; ++c) acc[c] = fma(acc[c], a, b);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  // The accumulators are results: summed and kept, the loop cannot be dropped.
  float out[kWidth];
  Vec sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = fma(acc[c], splat(1.0f), sum);
  store(out, sum);
  volatile float sink = out[0];
  (void)sink;
  const double flops = 2.0 * kWidth * kChains * double(iterations);
  return flops / best / 1e9;
#endif
}

}  // namespace pptrain::cpu::PPTRAIN_CPU_ISA
