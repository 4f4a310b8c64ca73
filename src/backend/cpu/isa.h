// The instruction sets the cpu backend's own loops are compiled for, from one portable
// binary. Every op file of this folder is compiled twice (Makefile): as it is, for the
// build's baseline (x86-64-v3: AVX2 and FMA; named avx2, though under ARCH=native it is
// the build machine's own ISA), and with PPTRAIN_CPU_AVX512 defined, for AVX-512. Each compilation puts its code in a namespace of its own (cpu::avx2 or
// cpu::avx512, inline, so the files still say cpu::CpuOps), so the two copies never share a
// symbol, and cpu_isa.cpp picks one at run time (PPTRAIN_CPU_ISA, or the CPU's features).
// OpenBLAS's GEMMs choose their kernels at run time on their own (blas_setup.h).
#pragma once

#if defined(PPTRAIN_CPU_AVX512)
#define PPTRAIN_CPU_ISA avx512
#else
#define PPTRAIN_CPU_ISA avx2
#endif
