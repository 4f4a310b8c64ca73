// Benchmark: the GEMM libraries a Debian machine can have, side by side on the linear
// layers' products of a model: OpenBLAS's cblas_sgemm (what pptrain links), oneDNN's
// dnnl_sgemm (libdnnl2) and BLIS's bli_sgemm (libblis4-*), the last two loaded with dlopen
// where installed (none is a build dependency), each on the threads OpenMP gives this
// process. This measures whether another library would pay on this CPU before anyone wires
// one in: OpenBLAS's kernels depend on the CPU's model, and on a CPU newer than the library
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
#include <dlfcn.h>
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

#include <cblas.h>

#include "backend/cpu/blas_setup.h"

using Clock = std::chrono::steady_clock;

namespace {

// C[m,n] = α·op(A)·op(B) + β·C, row-major; op(X) = Xᵀ when its flag is set.
struct Gemm {
  bool a_t, b_t;
  int m, n, k;
  const float *a, *b;
  int lda, ldb;
  float beta;
  float* c;
  int ldc;
};

// One library: its name and how it runs a Gemm (null where it is not installed).
struct Library {
  std::string name;
  void (*run)(const Gemm&) = nullptr;
};

void openblas_run(const Gemm& g) {
  cblas_sgemm(CblasRowMajor, g.a_t ? CblasTrans : CblasNoTrans, g.b_t ? CblasTrans : CblasNoTrans, g.m, g.n, g.k,
              1.0f, g.a, g.lda, g.b, g.ldb, g.beta, g.c, g.ldc);
}

// oneDNN: dnnl_sgemm(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), row-major.
using DnnlSgemm = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                          int64_t, float, float*, int64_t);
DnnlSgemm dnnl_sgemm_fn = nullptr;
void onednn_run(const Gemm& g) {
  const int status = dnnl_sgemm_fn(g.a_t ? 'T' : 'N', g.b_t ? 'T' : 'N', g.m, g.n, g.k, 1.0f, g.a, g.lda, g.b, g.ldb,
                                   g.beta, g.c, g.ldc);
  if (status != 0) {
    std::fprintf(stderr, "bench_blas: dnnl_sgemm returned status %d\n", status);
    std::exit(1);
  }
}

// BLIS's typed API with general strides: a transposed operand is the same matrix read with
// its row and column strides swapped, so both transposition flags stay BLIS_NO_TRANSPOSE (0)
// and no enum of BLIS's headers is needed.
using BliSgemm = void (*)(int, int, int64_t, int64_t, int64_t, const float*, const float*, int64_t, int64_t,
                          const float*, int64_t, int64_t, const float*, float*, int64_t, int64_t);
BliSgemm bli_sgemm_fn = nullptr;
void blis_run(const Gemm& g) {
  const float one = 1.0f;
  const int64_t rsa = g.a_t ? 1 : g.lda, csa = g.a_t ? g.lda : 1;
  const int64_t rsb = g.b_t ? 1 : g.ldb, csb = g.b_t ? g.ldb : 1;
  bli_sgemm_fn(0, 0, g.m, g.n, g.k, &one, g.a, rsa, csa, g.b, rsb, csb, &g.beta, g.c, g.ldc, 1);
}

// The libraries present: OpenBLAS always, the others where their shared library loads.
std::vector<Library> libraries() {
  std::vector<Library> found = {{"openblas", openblas_run}};
  if (void* h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL)) {
    dnnl_sgemm_fn = reinterpret_cast<DnnlSgemm>(dlsym(h, "dnnl_sgemm"));
    if (dnnl_sgemm_fn) found.push_back({"onednn", onednn_run});
  }
  if (void* h = dlopen("libblis.so.4", RTLD_NOW | RTLD_LOCAL)) {
    bli_sgemm_fn = reinterpret_cast<BliSgemm>(dlsym(h, "bli_sgemm"));
    // BLIS takes its thread count from BLIS_NUM_THREADS, not OpenMP's: the same as the others.
    using SetThreads = void (*)(int64_t);
    if (auto set = reinterpret_cast<SetThreads>(dlsym(h, "bli_thread_set_num_threads"))) set(omp_get_max_threads());
    if (bli_sgemm_fn) found.push_back({"blis", blis_run});
  }
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
  if (pass == "forward") return {false, true, n, out, in, x, w, in, in, beta, y, out};
  if (pass == "dgrad") return {false, false, n, in, out, y, w, out, in, beta, dx, in};
  return {true, false, out, in, n, y, x, out, in, beta, dw, in};  // wgrad
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

  const std::vector<Library> libs = libraries();
  const std::string& core = pptrain::cpu::blas_choice().running;
  std::vector<double> total_ms(libs.size(), 0.0);
  for (const Product& p : products)
    for (size_t l = 0; l < libs.size(); ++l) {
      const Gemm check = gemm_of(p.pass, n, p.in, p.out, x.data(), w.data(), y.data(), dx.data(), dw.data(), 0.0f);
      libs[l].run(check);
      const double error = worst_error(check);
      if (!(error <= 1.0)) {
        std::fprintf(stderr, "bench_blas: %s %s %s: an entry is off by %.3g of its rounding bound\n",
                     libs[l].name.c_str(), p.layer.c_str(), p.pass.c_str(), error);
        return 1;
      }
      const Gemm timed = gemm_of(p.pass, n, p.in, p.out, x.data(), w.data(), y.data(), dx.data(), dw.data(),
                                 p.pass == "wgrad" ? 1.0f : 0.0f);
      libs[l].run(timed);  // warm-up
      double best = INFINITY;
      for (int r = 0; r < reps; ++r) {
        const auto t0 = Clock::now();
        libs[l].run(timed);
        best = std::min(best, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
      total_ms[l] += best;
      const double gflop = 2.0 * n * double(p.in) * p.out / 1e9;
      std::printf("{\"bench\": \"blas\", \"library\": \"%s\", \"layer\": \"%s\", \"pass\": \"%s\", \"m\": %d, "
                  "\"n\": %d, \"k\": %d, \"threads\": %d, \"ms\": %.4f, \"gflops\": %.1f, "
                  "\"error_of_bound\": %.3g%s}\n",
                  libs[l].name.c_str(), p.layer.c_str(), p.pass.c_str(), timed.m, timed.n, timed.k,
                  omp_get_max_threads(), best, gflop / (best / 1e3), error,
                  l == 0 ? (", \"openblas_core\": \"" + core + "\"").c_str() : "");
    }
  double total_gflop = 0;
  for (const Product& p : products) total_gflop += 2.0 * n * double(p.in) * p.out / 1e9;
  std::printf("library     products  total ms   GFLOP/s   vs openblas   (D %d, V %d, N %d, %d threads, best of %d)\n",
              d, vocab, n, omp_get_max_threads(), reps);
  for (size_t l = 0; l < libs.size(); ++l)
    std::printf("%-10s  %8zu  %8.3f  %8.1f  %11.3f\n", libs[l].name.c_str(), products.size(), total_ms[l],
                total_gflop / (total_ms[l] / 1e3), total_ms[0] / total_ms[l]);
  if (libs.size() == 1) std::printf("(oneDNN: apt-get install libdnnl2; BLIS: apt-get install libblis4-openmp)\n");
  return 0;
}
