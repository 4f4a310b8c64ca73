// Which copy of the cpu backend's loops runs (isa.h): the widest instruction set the CPU
// has, unless PPTRAIN_CPU_ISA names one. Chosen once per process, before the first op.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/ops.h"

namespace pptrain::cpu {

enum class Isa { avx2, avx512 };

const char* isa_name(Isa isa);  // "avx2", "avx512"
// Whether this CPU, with its operating system's saved register state, runs `isa`'s code.
bool cpu_runs(Isa isa);
// Whether the baseline copy (the one named avx2) was compiled for AVX2 and FMA: false in a
// build for an older -march, whose baseline copy is plainer code.
bool baseline_copy_is_avx2();
// The copies this binary holds (avx512 is left out of builds for other compilers).
std::vector<Isa> compiled_isas();
// The copy `requested` names ("avx2", "avx512"; "auto", empty or null: the widest the CPU
// runs). Throws pptrain::Error in one line for another name, or for one this CPU or
// binary cannot run.
Isa choose_isa(const char* requested);
// choose_isa(PPTRAIN_CPU_ISA), worked out on the first call and the same after.
Isa process_isa();
// A backend of the copy `isa` (make_cpu_ops of ops.h: the process's).
std::unique_ptr<Ops> make_ops(Isa isa, const Faults& faults = {});
// One thread's FMA throughput on the copy `isa`'s vectors, GFLOP/s: the best of `reps` runs
// of `iterations` x 10 independent FMAs (fma_rate.cpp); 0 where the copy has no FMA instruction.
double fma_gflops(Isa isa, long iterations, int reps);

}  // namespace pptrain::cpu
