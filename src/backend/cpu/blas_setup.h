// OpenBLAS's kernel choice, checked against the CPU, and the one start-up line that says
// what the cpu backend runs on.
//
// OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels once, when the library
// loads, from the CPU's family and model numbers. A CPU newer than the library is not in
// its tables, and it then falls back to its oldest kernels (Prescott, SSE3: seen 4-8x
// slower SGEMM on an AVX-512 Xeon). The features the CPU reports (AVX2, AVX-512) say
// which kernels it runs, whatever its model number. Since the choice is made before main()
// and only OPENBLAS_CORETYPE changes it, ensure_blas_core() re-executes the process with
// OPENBLAS_CORETYPE set when the detected core is below what the features allow (or, on
// Zen 4, AVX-512 kernels where AVX2 ones run faster); a user's own OPENBLAS_CORETYPE is left
// as it is.
#pragma once
#include <string>
#include <string_view>

#include "backend/cpu/cpu_isa.h"

namespace pptrain::cpu {

// What /proc/cpuinfo, sysfs and CPUID say of this CPU (read on the first call).
struct CpuInfo {
  std::string model_name;  // "AMD EPYC 9654", "Intel(R) Xeon(R) Processor"
  bool amd = false;
  int family = 0;          // CPUID's display family (0x19: AMD Zen 3/4)
  int model = 0;           // and display model (Intel 0x8F: Sapphire Rapids)
  bool avx2_fma = false;
  bool avx512 = false;     // F, BW, DQ, VL and CD, with the OS saving their registers
  bool avx512_bf16 = false;
  double ghz = 0;          // the highest clock sysfs gives, else /proc/cpuinfo's; 0: unknown
};
const CpuInfo& read_cpu_info();

// ISA level of an OpenBLAS core name: 3 AVX-512 kernels (SkylakeX, Cooperlake,
// SapphireRapids), 2 AVX2 (Haswell, Zen), 1 anything older or unknown (Prescott, ...).
int blas_core_level(std::string_view core);
// AVX-512 executed as two 256-bit halves (AMD family 0x19 with AVX-512: Zen 4).
bool avx512_on_256bit_pipes(const CpuInfo& cpu);
// The core to run on this CPU: Cooperlake (AVX-512 with BF16), SkylakeX (AVX-512), Zen or
// Haswell (AVX2 and FMA, AMD or Intel; Haswell also on Zen 4, see avx512_on_256bit_pipes);
// "" below AVX2.
std::string best_blas_core(const CpuInfo& cpu);
// The fp32 FLOPs per cycle and core of the CPU's widest FMA units: 2 FMA pipes x lanes x 2
// (Intel AVX-512: 64; AMD family 0x19 with AVX-512, Zen 4, runs 512-bit FMAs on 256-bit
// pipes: 32; AVX2: 32; SSE: 8).
int fp32_flops_per_cycle(const CpuInfo& cpu);
// The FLOPs per cycle and core of this CPU's peak estimate: fp32_flops_per_cycle's, unless one
// thread's FMA rate on the CPU's widest vectors (cpu_isa.h: fma_gflops; a build without a copy
// for them, or whose copy has no FMA instruction, keeps the table) over its clock
// (cpu_clock.h) comes out below 0.6 of it, then half: one FMA pipe of those vectors (Xeons
// with one AVX-512 unit; Zen and Zen+, whose 256-bit FMAs take both 128-bit halves). 0.6
// sits between the two: a core with both pipes measures 0.7 to 1.0 of the table (an Intel
// core's clock under heavy AVX-512 work drops by up to 30% against the integer chains' clock),
// one with a single pipe 0.35 to 0.5. Measured once (~10 ms); the table where nothing can be
// measured. The planted fault fma_rate:FACTOR scales the measured rate (a test's stand-in).
int peak_flops_per_cycle();
// One thread's clock (cpu_clock.h: integer add chains of 200,000 x 8) and FMA rate on the copy
// `isa`'s vectors (300,000 x 10 FMAs), ~0.5 ms each at 3 GHz, timed in alternation: `pairs`
// pairs, each run the best of `reps`, and the pair whose rate-over-clock ratio is the median.
// Timed apart (the best of several clocks, then of several rates), a stretch of another
// process's time could slow every run of one and none of the other: 0.725 of a Zen 3's
// table rate (1.45 FMAs a cycle of its 2) while its test suite ran beside it. A pair shares
// its stretch, and the median leaves out the pairs that straddle one. A clock of 0 (not
// measurable) counts as ratio 0.
struct FmaProbe {
  double ghz = 0, gflops = 0;
};
FmaProbe probe_fma(Isa isa, int pairs, int reps);
// Its decision: `table` unless the probe ran on the table's vectors and measured a rate
// (`gflops`, one thread) under 0.6 x table x `ghz`, then table / 2.
int flops_per_cycle_from_probe(int table, bool probe_has_table_vectors, double ghz, double gflops);

// What ensure_blas_core found and did; kept for the start-up line.
struct BlasChoice {
  std::string detected;  // the core OpenBLAS took on its own (or the stand-in's)
  std::string running;   // openblas_get_corename() now
  std::string how;       // "as detected", "chosen by the CPU's features ...", "OPENBLAS_CORETYPE ..."
  bool below_cpu = false;  // runs a core below what the CPU's features allow
  bool off_cpu = false;    // runs a core of another level than best_blas_core() (below or, on Zen 4, above)
};

// What OpenBLAS runs in this process and how it came to (worked out once, changes nothing).
const BlasChoice& blas_choice();
// Before MPI or any BLAS call, on every rank: when OpenBLAS detected a core of another
// level than best_blas_core() and neither the user nor an earlier pass set OPENBLAS_CORETYPE,
// re-executes this process (/proc/self/exe, the same command line and pid) with it set, and does not
// return. The planted fault blas_detected:CORE (PPTRAIN_FAULTS) stands in for what
// OpenBLAS detected, for the tests. Returns what it found otherwise.
const BlasChoice& ensure_blas_core(char** argv);

// "OpenBLAS 0.3.21", from the library's configuration string.
std::string blas_version();
// The clock of the peak estimate: measured_clock_ghz(threads) (cpu_clock.h: the cores' clock
// under load, boost included) where it can be measured (x86-64), else cpu.ghz; 0: unknown.
double peak_clock_ghz(const CpuInfo& cpu, int threads);
// cores x peak_clock_ghz x peak_flops_per_cycle, GFLOP/s, the cores being those `threads`
// threads keep busy (cpu_topology.h: two threads on one core's SMT siblings count once);
// 0 when the clock is unknown.
double peak_gflops_estimate(const CpuInfo& cpu, int threads);

// One line on what the cpu backend runs on, e.g.
//   cpu: AMD EPYC, 1 thread, AVX2 | loops avx2 | OpenBLAS 0.3.21 Zen (as detected) |
//   sgemm 512^3 93 GFLOP/s, 0.89 of the peak estimate 104 (1 x 3.2 GHz measured x 32
//   FLOP/cycle)
// (cores, not threads, before the clock: "cpu: ..., 2 threads on 1 core (SMT), ..." where
// the threads share a core's FMA units.) The clock is measured (peak_clock_ghz); where it
// cannot be, sysfs's maximum or /proc/cpuinfo's ("reported"; a VM's nominal clock there,
// which boost exceeds, can let a good kernel pass 1.0).
// A fallback kernel shows as a small fraction either way. The SGEMM is 1024^3, 512^3 on one
// thread. measure = false leaves it out (for --version).
std::string cpu_summary_line(bool measure);

// Best of `reps` timed n x n x n SGEMMs (after one untimed) of the process's GEMM library
// (gemm_library.h) on the threads OpenMP gives it, in GFLOP/s.
double measure_sgemm_gflops(int n, int reps);

}  // namespace pptrain::cpu
