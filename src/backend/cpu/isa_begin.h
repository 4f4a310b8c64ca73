// Switches the rest of this translation unit to the AVX-512 code generation of its
// compilation with PPTRAIN_CPU_AVX512 (isa.h); the baseline compilation is unchanged.
// Include it LAST, after every other header: what a header defines after this line
// would be compiled for AVX-512 too, and an inline function or template of the standard
// library emitted that way could be the one copy the linker keeps for the whole program,
// which an AVX2-only CPU cannot run. The functions of this file's own namespace
// (cpu::avx512), OpenMP's outlined regions among them, are the only ones it should reach;
// test_cpu_isa checks the linked binary for AVX-512 code anywhere else.
//
// prefer-vector-width=512: full 512-bit vectors in the `omp simd` loops (some tunings of
// AVX-512 CPUs would otherwise keep 256-bit ones). arch stays the build's, so the inline
// helpers compiled before this line still inline into these functions.
// No include guard: one inclusion per .cpp, at the end of its includes.
#if defined(PPTRAIN_CPU_AVX512)
#if !defined(__x86_64__)
#error "PPTRAIN_CPU_AVX512 is for x86-64 builds only"
#endif
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512cd,prefer-vector-width=512")
#endif
