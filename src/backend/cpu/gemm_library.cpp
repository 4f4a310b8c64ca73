// OpenBLAS, oneDNN or BLIS under the linear layers (gemm_library.h). The two optional
// libraries are declared here by the few entry points used, their C ABI, and loaded with
// dlopen: neither header is needed to build, and a machine without them runs OpenBLAS.
#include "backend/cpu/gemm_library.h"

#include <cblas.h>
#include <dlfcn.h>
#include <omp.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <mutex>
#include <optional>
#include <string>

#include "backend/cpu/blas_setup.h"
#include "core/error.h"
#include "core/faults.h"

namespace pptrain::cpu {

namespace {

// oneDNN: dnnl_sgemm(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), row-major,
// returns dnnl_status_t (0: success); dnnl_version() points at {major, minor, patch, ...}.
using DnnlSgemm = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                          int64_t, float, float*, int64_t);
struct DnnlVersion {
  int major, minor, patch;
};
using DnnlVersionFn = const DnnlVersion* (*)();

// BLIS's typed API with general strides: a transposed operand is the same matrix read with
// its row and column strides swapped, so both transposition flags stay BLIS_NO_TRANSPOSE (0)
// and no enum of BLIS's headers is needed.
using BliSgemm = void (*)(int, int, int64_t, int64_t, int64_t, const float*, const float*, int64_t, int64_t,
                          const float*, int64_t, int64_t, const float*, float*, int64_t, int64_t);
using BliSetThreads = void (*)(int64_t);
using BliVersion = const char* (*)();

struct Loaded {
  void* handle = nullptr;  // dlopen's, where the library's entry points were found
  DnnlSgemm dnnl_sgemm = nullptr;
  DnnlVersionFn dnnl_version = nullptr;
  BliSgemm bli_sgemm = nullptr;
  BliVersion bli_version = nullptr;
  std::string error;  // why it is not available: dlerror()'s text or the missing entry point
};

// Each library's PPTRAIN_CPU_GEMM value, Debian package and shared object, by GemmLibrary.
struct Facts {
  const char* name;
  const char* package;
  const char* soname;  // null: linked
};
constexpr Facts kFacts[] = {{"openblas", "libopenblas0-openmp", nullptr},
                            {"onednn", "libdnnl2", "libdnnl.so.2"},
                            {"blis", "libblis4-openmp", "libblis.so.4"}};
static_assert(std::size(kFacts) == std::size(kGemmLibraries));

// The handle stays open for the process's life: its functions are called until exit.
void open_library(GemmLibrary lib, Loaded& l) {
  const std::optional<std::string> missing = Faults::stand_in_from_env("gemm_missing");
  if (missing && *missing == gemm_library_name(lib)) return;
  void* handle = dlopen(kFacts[int(lib)].soname, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();  // the file the loader found and what is wrong with it, or that none was found
    l.error = why ? why : "";
    return;
  }
  l.handle = handle;
  if (lib == GemmLibrary::onednn) {
    l.dnnl_sgemm = reinterpret_cast<DnnlSgemm>(dlsym(handle, "dnnl_sgemm"));
    l.dnnl_version = reinterpret_cast<DnnlVersionFn>(dlsym(handle, "dnnl_version"));
  } else {
    l.bli_sgemm = reinterpret_cast<BliSgemm>(dlsym(handle, "bli_sgemm"));
    l.bli_version = reinterpret_cast<BliVersion>(dlsym(handle, "bli_info_get_version_str"));
    // BLIS takes its thread count from BLIS_NUM_THREADS, not OpenMP's: the others' count.
    if (auto set = reinterpret_cast<BliSetThreads>(dlsym(handle, "bli_thread_set_num_threads")))
      set(omp_get_max_threads());
  }
  if (!l.dnnl_sgemm && !l.bli_sgemm)
    l.error = cat(kFacts[int(lib)].soname, " has no ", lib == GemmLibrary::onednn ? "dnnl_sgemm" : "bli_sgemm");
}

// Opens `lib` on the first call (once, whichever threads ask; after that a flag's load).
const Loaded& load(GemmLibrary lib) {
  static Loaded loaded[std::size(kGemmLibraries)];
  static std::once_flag opened[std::size(kGemmLibraries)];
  Loaded& l = loaded[int(lib)];
  if (lib != GemmLibrary::openblas) std::call_once(opened[int(lib)], open_library, lib, std::ref(l));
  return l;
}

GemmLibrary choose(const char* requested) {
  const std::string value = requested ? requested : "";
  if (value.empty() || value == "openblas") return GemmLibrary::openblas;
  for (GemmLibrary lib : kGemmLibraries) {
    if (value != gemm_library_name(lib)) continue;
    if (!gemm_library_available(lib))
      fail("PPTRAIN_CPU_GEMM=", value, ": ", kFacts[int(lib)].soname, " does not load on this machine (",
           gemm_library_missing_hint(lib), ", or unset PPTRAIN_CPU_GEMM for OpenBLAS)");
    return lib;
  }
  fail("PPTRAIN_CPU_GEMM=", value, ": expected openblas, onednn or blis");
}

}  // namespace

const char* gemm_library_name(GemmLibrary lib) { return kFacts[int(lib)].name; }

const char* gemm_library_package(GemmLibrary lib) { return kFacts[int(lib)].package; }

bool gemm_library_available(GemmLibrary lib) {
  if (lib == GemmLibrary::openblas) return true;
  const Loaded& l = load(lib);
  return lib == GemmLibrary::onednn ? l.dnnl_sgemm != nullptr : l.bli_sgemm != nullptr;
}

std::string gemm_library_missing_hint(GemmLibrary lib) {
  const std::string why = lib == GemmLibrary::openblas ? "" : load(lib).error;
  return cat(why, why.empty() ? "" : "; ", "install ", gemm_library_package(lib));
}

void* gemm_library_handle(GemmLibrary lib) {
  return lib != GemmLibrary::openblas && gemm_library_available(lib) ? load(lib).handle : nullptr;
}

std::string gemm_library_version(GemmLibrary lib) {
  if (lib == GemmLibrary::openblas) return blas_version();
  const Loaded& l = load(lib);
  if (lib == GemmLibrary::onednn) {
    if (!l.dnnl_version) return "oneDNN";
    const DnnlVersion* v = l.dnnl_version();
    return cat("oneDNN ", v->major, ".", v->minor, ".", v->patch);
  }
  return l.bli_version ? cat("BLIS ", l.bli_version()) : "BLIS";
}

void run_gemm(GemmLibrary lib, const Gemm& g) {
  switch (lib) {
    case GemmLibrary::openblas:
      cblas_sgemm(CblasRowMajor, g.a_t ? CblasTrans : CblasNoTrans, g.b_t ? CblasTrans : CblasNoTrans, g.m, g.n,
                  g.k, g.alpha, g.a, g.lda, g.b, g.ldb, g.beta, g.c, g.ldc);
      return;
    case GemmLibrary::onednn: {
      const int status = load(lib).dnnl_sgemm(g.a_t ? 'T' : 'N', g.b_t ? 'T' : 'N', g.m, g.n, g.k, g.alpha, g.a,
                                              g.lda, g.b, g.ldb, g.beta, g.c, g.ldc);
      if (status != 0)
        fail("oneDNN's dnnl_sgemm returned status ", status, " for m=", g.m, " n=", g.n, " k=", g.k,
             " (PPTRAIN_CPU_GEMM=onednn)");
      return;
    }
    case GemmLibrary::blis: {
      const int64_t rsa = g.a_t ? 1 : g.lda, csa = g.a_t ? g.lda : 1;
      const int64_t rsb = g.b_t ? 1 : g.ldb, csb = g.b_t ? g.ldb : 1;
      load(lib).bli_sgemm(0, 0, g.m, g.n, g.k, &g.alpha, g.a, rsa, csa, g.b, rsb, csb, &g.beta, g.c, g.ldc, 1);
      return;
    }
  }
}

GemmLibrary process_gemm_library() {
  static const GemmLibrary lib = choose(std::getenv("PPTRAIN_CPU_GEMM"));
  return lib;
}

void sgemm(const Gemm& g) { run_gemm(process_gemm_library(), g); }

}  // namespace pptrain::cpu
