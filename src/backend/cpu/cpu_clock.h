// The CPU's clock under load, measured, for the peak estimate of the start-up line and the
// benchmarks (blas_setup.h). A VM's /proc/cpuinfo gives its nominal clock ("cpu MHz") and no
// sysfs maximum, while its cores run at their boost clock: a peak estimated from the nominal
// clock was exceeded by OpenBLAS's SGEMM (1.18 of it on an AMD EPYC VM), so the fraction
// meant nothing. A chain of dependent instructions of a known latency measures the clock
// the cores really run at. Some Intel cores lower their clock under heavy AVX-512 work,
// which integer chains do not show: there the estimate stays an upper bound.
#pragma once

namespace pptrain::cpu {

// The instructions of a dependent chain: each one reads the previous one's result.
//   add:  64-bit integer add of a register, latency 1 cycle on every x86-64 core;
//   imul: 64-bit integer multiply, latency 3 cycles (Intel since Nehalem, AMD since Zen).
enum class ChainOp { add, imul };

// The clock one thread measures, in GHz: the best of `reps` runs of `iterations` × 8
// dependent `op`s, cycles (iterations × 8 × latency) over seconds. 0 on a CPU other than
// x86-64 (no chain is written for it).
double chain_clock_ghz(ChainOp op, long iterations, int reps);

// The clock of `threads` cores at once (the all-core clock the SGEMM and the training run
// at): each OpenMP thread times its own add chain at the same time, best of 3 runs of about
// 3 ms each; the mean over threads. Measured on the first call and kept for later calls
// with the same count (another count measures again, and is kept instead); 0 where
// chain_clock_ghz is. Called outside parallel regions: inside one, OpenMP gives one thread.
double measured_clock_ghz(int threads);

}  // namespace pptrain::cpu
