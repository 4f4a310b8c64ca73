// Refuses, in one line, to run on a CPU that lacks what the build's code generation assumes.
// Every object is compiled for the build's -march (ARCH, default x86-64-v3: AVX2, FMA,
// BMI2, ...), so GCC may use those instructions anywhere, a standard-library inline or a
// static initialiser included; on an older CPU (or a VM whose CPU model hides AVX2) the
// process died of SIGILL at whatever ran first, with no word of why. This check runs as a
// constructor ahead of every C++ static initialiser of the binary (priority 101; the
// libraries' own initialisers, compiled by the distribution for the baseline ISA, run
// before it and are fine), and its function is compiled for plain x86-64, so it can itself
// run anywhere. Linked into every binary by the Makefile (-Wl,--undefined=pptrain_cpu_guard:
// nothing else refers to this object).
#include <unistd.h>

#include <cstddef>

// What the build assumes, read from the compiler's macros before the pragma below (which
// changes the code generation, and with it those macros, for the rest of this file).
#if defined(__x86_64__)
#if defined(__SSE4_2__) && defined(__POPCNT__)
#define PPTRAIN_NEEDS_V2 1
#endif
#if defined(__AVX2__) && defined(__FMA__) && defined(__BMI2__)
#define PPTRAIN_NEEDS_V3 1
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__) && \
    defined(__AVX512CD__)
#define PPTRAIN_NEEDS_V4 1
#endif
// AVX-512 extensions beyond x86-64-v4 that ARCH=native on a newer CPU turns on.
#if defined(__AVX512VNNI__)
#define PPTRAIN_NEEDS_AVX512VNNI 1
#endif
#if defined(__AVX512BF16__)
#define PPTRAIN_NEEDS_AVX512BF16 1
#endif
#if defined(__AVX512VBMI__)
#define PPTRAIN_NEEDS_AVX512VBMI 1
#endif
#if defined(__AVX512IFMA__)
#define PPTRAIN_NEEDS_AVX512IFMA 1
#endif
#if defined(__AVX512VBMI2__)
#define PPTRAIN_NEEDS_AVX512VBMI2 1
#endif
#if defined(__GFNI__)
#define PPTRAIN_NEEDS_GFNI 1
#endif
#if defined(__VAES__)
#define PPTRAIN_NEEDS_VAES 1
#endif
#if defined(__VPCLMULQDQ__)
#define PPTRAIN_NEEDS_VPCLMULQDQ 1
#endif
#if defined(__AVX512VPOPCNTDQ__)
#define PPTRAIN_NEEDS_AVX512VPOPCNTDQ 1
#endif
#if defined(__AVX512BITALG__)
#define PPTRAIN_NEEDS_AVX512BITALG 1
#endif
#endif

#ifndef PPTRAIN_BUILD_ARCH
#define PPTRAIN_BUILD_ARCH "the build's -march"
#endif

#if defined(__x86_64__)
#if !defined(__clang__)  // clang builds (the fuzzers) set no -march: baseline already
#pragma GCC push_options
#pragma GCC target("arch=x86-64")
#endif

namespace {

// Appends the C string `s` to buf[0..cap) at *len, silently cut at cap − 1.
void append(char* buf, size_t cap, size_t* len, const char* s) {
  for (; *s && *len + 1 < cap; ++s) buf[(*len)++] = *s;
  buf[*len] = '\0';
}

}  // namespace

extern "C" __attribute__((constructor(101), used)) void pptrain_cpu_guard() {
  __builtin_cpu_init();
  char missing[256] = "";
  size_t len = 0;
  // __builtin_cpu_supports takes its name as a literal: one line per feature.
#define PPTRAIN_REQUIRE(name) \
  if (!__builtin_cpu_supports(name)) append(missing, sizeof missing, &len, " " name)
#if defined(PPTRAIN_NEEDS_V2)
  PPTRAIN_REQUIRE("x86-64-v2");
#endif
#if defined(PPTRAIN_NEEDS_V3)
  // The level, and its best-known parts by name, so the line says what is missing.
  PPTRAIN_REQUIRE("avx2");
  PPTRAIN_REQUIRE("fma");
  PPTRAIN_REQUIRE("bmi2");
  PPTRAIN_REQUIRE("x86-64-v3");
#endif
#if defined(PPTRAIN_NEEDS_V4)
  PPTRAIN_REQUIRE("avx512f");
  PPTRAIN_REQUIRE("x86-64-v4");
#endif
#if defined(PPTRAIN_NEEDS_AVX512VNNI)
  PPTRAIN_REQUIRE("avx512vnni");
#endif
#if defined(PPTRAIN_NEEDS_AVX512BF16)
  PPTRAIN_REQUIRE("avx512bf16");
#endif
#if defined(PPTRAIN_NEEDS_AVX512VBMI)
  PPTRAIN_REQUIRE("avx512vbmi");
#endif
#if defined(PPTRAIN_NEEDS_AVX512IFMA)
  PPTRAIN_REQUIRE("avx512ifma");
#endif
#if defined(PPTRAIN_NEEDS_AVX512VBMI2)
  PPTRAIN_REQUIRE("avx512vbmi2");
#endif
#if defined(PPTRAIN_NEEDS_GFNI)
  PPTRAIN_REQUIRE("gfni");
#endif
#if defined(PPTRAIN_NEEDS_VAES)
  PPTRAIN_REQUIRE("vaes");
#endif
#if defined(PPTRAIN_NEEDS_VPCLMULQDQ)
  PPTRAIN_REQUIRE("vpclmulqdq");
#endif
#if defined(PPTRAIN_NEEDS_AVX512VPOPCNTDQ)
  PPTRAIN_REQUIRE("avx512vpopcntdq");
#endif
#if defined(PPTRAIN_NEEDS_AVX512BITALG)
  PPTRAIN_REQUIRE("avx512bitalg");
#endif
#undef PPTRAIN_REQUIRE
  if (len == 0) return;
  // Plain writes and _exit: nothing here may reach code built for the build's ISA.
  char line[512] = "";
  size_t n = 0;
  append(line, sizeof line, &n, "pptrain: this binary was built for " PPTRAIN_BUILD_ARCH " and this CPU lacks");
  append(line, sizeof line, &n, missing);
  append(line, sizeof line, &n,
         "; rebuild it with `make ARCH=native` on this machine, or with ARCH set to the -march of the oldest CPU "
         "it must run on\n");
  const ssize_t written = write(STDERR_FILENO, line, n);
  (void)written;
  _exit(1);
}

#if !defined(__clang__)
#pragma GCC pop_options
#endif
#else
// Other architectures: their builds' baselines are the distribution's; nothing to check.
extern "C" void pptrain_cpu_guard() {}
#endif
