// The GEMM library under the cpu backend's linear layers. OpenBLAS is linked and the default;
// oneDNN's dnnl_sgemm (Debian: libdnnl2) and BLIS's bli_sgemm (libblis4-openmp) are loaded
// with dlopen where installed, neither a build dependency. PPTRAIN_CPU_GEMM=openblas|onednn|blis
// chooses one for the process, as OPENBLAS_CORETYPE chooses OpenBLAS's kernels: which is
// fastest depends on the CPU (measured per shape by bench/bench_blas, per step by a training
// run), and a library's kernels fix the bits of every product, so the choice is the user's,
// never a start-up timing's (a resumed run would otherwise round differently).
//
// Every library runs on the threads OpenMP gives the process (oneDNN and OpenBLAS's OpenMP
// build read them; BLIS is told them when it loads). Compiled once, for the baseline ISA.
#pragma once
#include <string>

namespace pptrain::cpu {

enum class GemmLibrary { openblas, onednn, blis };
inline constexpr GemmLibrary kGemmLibraries[] = {GemmLibrary::openblas, GemmLibrary::onednn, GemmLibrary::blis};

// C[m,n] = α·op(A)·op(B) + β·C, row-major; op(X) = Xᵀ when its flag is set (then X is stored
// [k,m] resp. [n,k]); lda, ldb, ldc are the stored matrices' row strides.
struct Gemm {
  bool a_t, b_t;
  int m, n, k;
  float alpha;
  const float* a;
  int lda;
  const float* b;
  int ldb;
  float beta;
  float* c;
  int ldc;
};

// "openblas", "onednn", "blis": PPTRAIN_CPU_GEMM's values.
const char* gemm_library_name(GemmLibrary lib);
// Loads the library on the first call; false where it is not installed (or stood in for as
// missing by the planted fault gemm_missing:NAME). OpenBLAS: always true.
bool gemm_library_available(GemmLibrary lib);
// What to tell a user of `lib` where it is not available: why, as the dynamic loader said it
// ("/x/libdnnl.so.2: invalid ELF header", or that no such file was found) or the entry point
// it lacks (left out where a planted fault stood in for it), then the package to install:
// "WHY; install libdnnl2".
std::string gemm_library_missing_hint(GemmLibrary lib);
// The loaded library's dlopen handle, for more of its entry points (packed_weights.cpp finds
// oneDNN's matmul there); null where it is not available, and for OpenBLAS (linked).
void* gemm_library_handle(GemmLibrary lib);
// The shared library to install where one is missing: "libdnnl2", "libblis4-openmp".
const char* gemm_library_package(GemmLibrary lib);
// "OpenBLAS 0.3.21", "oneDNN 2.6.3", "BLIS 0.9.0" (the library must be available).
std::string gemm_library_version(GemmLibrary lib);
// Runs g on `lib`, which must be available; a status other than success from oneDNN fails in
// one line naming the shape.
void run_gemm(GemmLibrary lib, const Gemm& g);

// This process's library: PPTRAIN_CPU_GEMM read and loaded on the first call (unset or empty:
// OpenBLAS). A value other than the three, or a library that does not load, fails in one
// line naming the variable, what it expected and what to install.
GemmLibrary process_gemm_library();
// run_gemm on process_gemm_library(): what the linear layers call.
void sgemm(const Gemm& g);

}  // namespace pptrain::cpu
