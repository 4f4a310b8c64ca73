// Benchmark: the GEMM libraries a Debian machine can have, side by side on the linear
// layers' products of a model: OpenBLAS's cblas_sgemm (what pptrain links), oneDNN's
// dnnl_sgemm (libdnnl2) and BLIS's bli_sgemm (libblis4-*), the last two loaded with dlopen
// where installed (none is a build dependency; backend/cpu/gemm_library.h, which also runs
// them under the linear layers with PPTRAIN_CPU_GEMM), each on the threads OpenMP gives this
// process. This measures whether another library may pay on this CPU before a training run
// tries it: OpenBLAS's kernels depend on the CPU's model, and on a CPU newer than the library
// (or one whose FMA units it does not model) another may be much faster.
//
// The products of one linear layer y[N,O] = x[N,I]·w[O,I]ᵀ and its backward (row-major, as
// backend/cpu/linear.cpp calls them): forward NT, dgrad dx[N,I] = dy·w (NN), wgrad
// dw[O,I] += dyᵀ·x (TN, β = 1). The layers: a GPT-2 block's qkv (D -> 3D), proj (D -> D),
// fc (D -> 4D), fc2 (4D -> D), and the head (D -> V) when V > 0; N tokens.
//
// Each library's result is checked first (β = 0) on 97 entries of C against a double
// product: |C − ref| <= 2·K·u·Σ|a·b| (u = 2⁻²⁴: a length-K float sum's rounding bound,
// doubled for blocked orders), so a library that computes something else fails (exit 1)
// instead of winning. Then best of REPS calls after one warm-up, the operands in cache (a
// training step also pays for fetching them: `logging.op_profile` shows it).
// Prints one JSON line per library and product, then a table of the totals.
//   bench_blas [REPS=10] [D,V,N=768,50304,256]      (256,256,256: the pp 2 model's)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/blas_setup.h"
#include "backend/cpu/gemm_library.h"

using Clock = std::chrono::steady_clock;

namespace {

using pptrain::cpu::Gemm;
using pptrain::cpu::GemmLibrary;

// The libraries present (backend/cpu/gemm_library.h): OpenBLAS always, oneDNN and BLIS
// where their shared library loads.
std::vector<GemmLibrary> libraries() {
  std::vector<GemmLibrary> found;
  for (GemmLibrary lib : pptrain::cpu::kGemmLibraries)
    if (pptrain::cpu::gemm_library_available(lib)) found.push_back(lib);
  return found;
}

struct Product {
  std::string layer, pass;
  int in, out;  // the layer's I and O
};

// The three products of a layer over n tokens on buffers x[N,I], w[O,I], y[N,O] (dy),
// dx[N,I], dw[O,I].
Gemm gemm_of(const std::string& pass, int n, int in, int out, const float* x, const float* w, float* y,
             float* dx, float* dw, float beta) {
  if (pass == "forward") return {false, true, n, out, in, 1.0f, x, in, w, in, beta, y, out};
  if (pass == "dgrad") return {false, false, n, in, out, 1.0f, y, out, w, in, beta, dx, in};
  return {true, false, out, in, n, 1.0f, y, out, x, in, beta, dw, in};  // wgrad
}

// Largest |C − ref| / bound over 97 entries spread over C (> 1 fails).
double worst_error(const Gemm& g) {
  double worst = 0;
  const long entries = long(g.m) * g.n;
  for (int s = 0; s < 97; ++s) {
    const long at = (entries - 1) * s / 96;
    const int i = int(at / g.n), j = int(at % g.n);
    double ref = 0, magnitude = 0;
    for (int p = 0; p < g.k; ++p) {
      const double a = g.a_t ? g.a[long(p) * g.lda + i] : g.a[long(i) * g.lda + p];
      const double b = g.b_t ? g.b[long(j) * g.ldb + p] : g.b[long(p) * g.ldb + j];
      ref += a * b;
      magnitude += std::fabs(a * b);
    }
    const double bound = 2.0 * g.k * std::ldexp(1.0, -24) * magnitude + 1e-30;
    worst = std::max(worst, std::fabs(g.c[long(i) * g.ldc + j] - ref) / bound);
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  pptrain::cpu::ensure_blas_core(argv);  // OpenBLAS's kernels as pptrain would run them
  const int reps = argc > 1 ? std::atoi(argv[1]) : 10;
  int d = 768, vocab = 50304, n = 256;
  const bool shape_ok =
      argc <= 2 || (std::sscanf(argv[2], "%d,%d,%d", &d, &vocab, &n) == 3 && d >= 1 && vocab >= 0 && n >= 1);
  if (reps < 1 || !shape_ok) {
    std::fprintf(stderr, "bench_blas: usage: bench_blas [REPS >= 1] [D,V,N] (V = 0: no head)\n");
    return 2;
  }
  std::vector<Product> products;
  auto layer = [&](const char* name, int in, int out) {
    for (const char* pass : {"forward", "dgrad", "wgrad"}) products.push_back({name, pass, in, out});
  };
  layer("qkv", d, 3 * d);
  layer("proj", d, d);
  layer("fc", d, 4 * d);
  layer("fc2", 4 * d, d);
  if (vocab > 0) layer("head", d, vocab);

  const int widest = std::max(4 * d, vocab);
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(size_t(n) * widest), w(size_t(widest) * std::max(d, 4 * d)), y(size_t(n) * widest),
      dx(size_t(n) * widest), dw(size_t(widest) * 4 * d);
  for (auto* v : {&x, &w, &y})
    for (float& e : *v) e = u(gen);

  const std::vector<GemmLibrary> libs = libraries();
  const std::string& core = pptrain::cpu::blas_choice().running;
  std::vector<double> total_ms(libs.size(), 0.0);
  for (const Product& p : products)
    for (size_t l = 0; l < libs.size(); ++l) {
      const Gemm check = gemm_of(p.pass, n, p.in, p.out, x.data(), w.data(), y.data(), dx.data(), dw.data(), 0.0f);
      pptrain::cpu::run_gemm(libs[l], check);
      const double error = worst_error(check);
      if (!(error <= 1.0)) {
        std::fprintf(stderr, "bench_blas: %s %s %s: an entry is off by %.3g of its rounding bound\n",
                     pptrain::cpu::gemm_library_name(libs[l]), p.layer.c_str(), p.pass.c_str(), error);
        return 1;
      }
      const Gemm timed = gemm_of(p.pass, n, p.in, p.out, x.data(), w.data(), y.data(), dx.data(), dw.data(),
                                 p.pass == "wgrad" ? 1.0f : 0.0f);
      pptrain::cpu::run_gemm(libs[l], timed);  // warm-up
      double best = INFINITY;
      for (int r = 0; r < reps; ++r) {
        const auto t0 = Clock::now();
        pptrain::cpu::run_gemm(libs[l], timed);
        best = std::min(best, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
      total_ms[l] += best;
      const double gflop = 2.0 * n * double(p.in) * p.out / 1e9;
      std::printf("{\"bench\": \"blas\", \"library\": \"%s\", \"layer\": \"%s\", \"pass\": \"%s\", \"m\": %d, "
                  "\"n\": %d, \"k\": %d, \"threads\": %d, \"ms\": %.4f, \"gflops\": %.1f, "
                  "\"error_of_bound\": %.3g%s}\n",
                  pptrain::cpu::gemm_library_name(libs[l]), p.layer.c_str(), p.pass.c_str(), timed.m, timed.n, timed.k,
                  omp_get_max_threads(), best, gflop / (best / 1e3), error,
                  l == 0 ? (", \"openblas_core\": \"" + core + "\"").c_str() : "");
    }
  double total_gflop = 0;
  for (const Product& p : products) total_gflop += 2.0 * n * double(p.in) * p.out / 1e9;
  std::printf("library     products  total ms   GFLOP/s   vs openblas   (D %d, V %d, N %d, %d threads, best of %d)\n",
              d, vocab, n, omp_get_max_threads(), reps);
  for (size_t l = 0; l < libs.size(); ++l)
    std::printf("%-10s  %8zu  %8.3f  %8.1f  %11.3f\n", pptrain::cpu::gemm_library_name(libs[l]), products.size(), total_ms[l],
                total_gflop / (total_ms[l] / 1e3), total_ms[0] / total_ms[l]);
  if (libs.size() == 1) std::printf("(oneDNN: apt-get install libdnnl2; BLIS: apt-get install libblis4-openmp)\n");
  return 0;
}
