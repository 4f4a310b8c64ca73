// The run-time choice between the cpu backend's copies (isa.h). Compiled once, for the
// baseline: nothing here may use AVX-512.
#include "backend/cpu/cpu_isa.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace pptrain {
namespace cpu {
namespace avx2 {
std::unique_ptr<Ops> make_ops(const Faults& faults);  // memory.cpp, baseline compilation
double fma_gflops(long iterations, int reps);          // fma_rate.cpp, the same
}
#if defined(PPTRAIN_WITH_AVX512_COPY)
namespace avx512 {
std::unique_ptr<Ops> make_ops(const Faults& faults);  // memory.cpp, PPTRAIN_CPU_AVX512
double fma_gflops(long iterations, int reps);          // fma_rate.cpp, the same
}
#endif

const char* isa_name(Isa isa) { return isa == Isa::avx512 ? "avx512" : "avx2"; }

bool cpu_runs(Isa isa) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  // libgcc's answers include the operating system's support (XCR0 saves the zmm and
  // mask registers), not the CPUID bits alone.
  if (isa == Isa::avx2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512cd");
#else
  return isa == Isa::avx2;  // the one copy of a non-x86 build, whatever its name
#endif
}

bool baseline_copy_is_avx2() {
#if defined(__AVX2__) && defined(__FMA__)
  return true;
#else
  return false;  // a build for an older -march (ARCH=x86-64-v2) or another CPU family
#endif
}

std::vector<Isa> compiled_isas() {
#if defined(PPTRAIN_WITH_AVX512_COPY)
  return {Isa::avx2, Isa::avx512};
#else
  return {Isa::avx2};
#endif
}

Isa choose_isa(const char* requested) {
  const std::vector<Isa> compiled = compiled_isas();
  if (!requested || !*requested || std::strcmp(requested, "auto") == 0) {
    Isa best = Isa::avx2;
    for (Isa isa : compiled)
      if (cpu_runs(isa)) best = isa;
    return best;
  }
  for (Isa isa : {Isa::avx2, Isa::avx512}) {
    if (std::strcmp(requested, isa_name(isa)) != 0) continue;
    bool in_binary = false;
    for (Isa c : compiled) in_binary = in_binary || c == isa;
    if (!in_binary)
      fail("PPTRAIN_CPU_ISA=", requested, ": this binary holds no ", requested, " copy of the cpu backend");
    if (!cpu_runs(isa)) fail("PPTRAIN_CPU_ISA=", requested, ": this CPU does not run ", requested, " code");
    return isa;
  }
  fail("PPTRAIN_CPU_ISA=", requested, ": expected auto, avx2 or avx512");
}

Isa process_isa() {
  static const Isa isa = choose_isa(std::getenv("PPTRAIN_CPU_ISA"));
  return isa;
}

std::unique_ptr<Ops> make_ops(Isa isa, const Faults& faults) {
#if defined(PPTRAIN_WITH_AVX512_COPY)
  if (isa == Isa::avx512) return avx512::make_ops(faults);
#endif
  PPTRAIN_CHECK(isa == Isa::avx2, "cpu backend: no ", isa_name(isa), " copy in this binary");
  return avx2::make_ops(faults);
}

double fma_gflops(Isa isa, long iterations, int reps) {
#if defined(PPTRAIN_WITH_AVX512_COPY)
  if (isa == Isa::avx512) return avx512::fma_gflops(iterations, reps);
#endif
  PPTRAIN_CHECK(isa == Isa::avx2, "cpu backend: no ", isa_name(isa), " copy in this binary");
  return avx2::fma_gflops(iterations, reps);
}

}  // namespace cpu

std::unique_ptr<Ops> make_cpu_ops(const Faults& faults) { return cpu::make_ops(cpu::process_isa(), faults); }

}  // namespace pptrain
