// Benchmark: the cpu backend's causal attention core, alone, on the threads OpenMP gives it:
// the plain path (probs [B,NH,T,T] kept for the backward) and the flash path (lse only),
// forward and backward, best of REPS calls each after one warm-up. FLOPs are the causal
// products' (the T(T+1)/2 scores a head has, not T²): forward 2 products (Q·Kᵀ, P·V), backward
// 4 (dP, dQ, dK, dV; the flash backward's recomputed Q·Kᵀ is not counted), each
// 2·T(T+1)/2·HD per head. One JSON line per shape and path, with the fraction of the CPU's
// peak estimate (blas_setup.h). The data stays in cache between calls, so this is the
// kernels' own speed; a training step's op profile (`logging.op_profile`) also pays for
// fetching q, k, v and probs from memory.
//   bench_attention [REPS=20] [B,T,NH,HD ...]   default shapes: 2,128,8,32 (the pp 2 model
//   of scripts/bench_pp_vs_torch.sh), 4,256,12,64 and 1,1024,12,64 (GPT-2 124M)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/blas_setup.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/ops.h"

using namespace pptrain;
using Clock = std::chrono::steady_clock;

namespace {

struct Shape {
  int b, t, nh, hd;
};

// Best time of reps calls of f (one call first, untimed), ms.
template <typename F>
double best_ms(int reps, F&& f) {
  f();
  double best = INFINITY;
  for (int rep = 0; rep < reps; ++rep) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return best;
}

bool parse_shape(const char* text, Shape& s) {
  return std::sscanf(text, "%d,%d,%d,%d", &s.b, &s.t, &s.nh, &s.hd) == 4 && s.b > 0 && s.t > 0 && s.nh > 0 &&
         s.hd > 0;
}

}  // namespace

int main(int argc, char** argv) {
  cpu::ensure_blas_core(argv);  // as pptrain starts: may re-execute with a better BLAS core
  const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
  std::vector<Shape> shapes;
  for (int i = 2; i < argc; ++i) {
    Shape s{};
    if (!parse_shape(argv[i], s)) {
      std::fprintf(stderr, "bench_attention: shape '%s': expected B,T,NH,HD (positive integers)\n", argv[i]);
      return 2;
    }
    shapes.push_back(s);
  }
  if (reps < 1) {
    std::fprintf(stderr, "usage: bench_attention [REPS >= 1] [B,T,NH,HD ...]\n");
    return 2;
  }
  if (shapes.empty()) shapes = {{2, 128, 8, 32}, {4, 256, 12, 64}, {1, 1024, 12, 64}};

  auto ops = make_cpu_ops();
  const int threads = omp_get_max_threads();
  const double peak = cpu::peak_gflops_estimate(cpu::read_cpu_info(), threads);
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-1.5f, 1.5f);
  for (const Shape& s : shapes) {
    const size_t c = size_t(s.nh) * s.hd, rows = size_t(s.b) * s.t;
    std::vector<float> qkv(rows * 3 * c), dout(rows * c), out(rows * c), dqkv(qkv.size());
    std::vector<float> probs(size_t(s.b) * s.nh * s.t * s.t), lse(size_t(s.b) * s.nh * s.t), delta(lse.size());
    for (auto& x : qkv) x = u(gen);
    for (auto& x : dout) x = u(gen);
    // One causal product of a head: T(T+1)/2 scores × HD multiply-adds.
    const double product_gflop = 2.0 * s.b * s.nh * (double(s.t) * (s.t + 1) / 2) * s.hd / 1e9;
    for (const bool flash : {false, true}) {
      const double fwd = best_ms(reps, [&] {
        if (flash)
          ops->flash_attention_forward(out.data(), lse.data(), qkv.data(), s.b, s.t, s.nh, s.hd);
        else
          ops->attention_forward(out.data(), probs.data(), qkv.data(), s.b, s.t, s.nh, s.hd);
      });
      const double bwd = best_ms(reps, [&] {
        if (flash)
          ops->flash_attention_backward_input(dqkv.data(), delta.data(), dout.data(), qkv.data(), out.data(),
                                              lse.data(), s.b, s.t, s.nh, s.hd);
        else
          ops->attention_backward_input(dqkv.data(), dout.data(), qkv.data(), probs.data(), s.b, s.t, s.nh, s.hd);
      });
      const double fwd_rate = 2 * product_gflop / (fwd / 1e3), bwd_rate = 4 * product_gflop / (bwd / 1e3);
      std::printf(
          "{\"bench\": \"attention\", \"path\": \"%s\", \"b\": %d, \"t\": %d, \"nh\": %d, \"hd\": %d, "
          "\"threads\": %d, \"forward_ms\": %.3f, \"backward_ms\": %.3f, \"forward_gflops\": %.1f, "
          "\"backward_gflops\": %.1f, \"peak_gflops_estimate\": %.1f, \"forward_peak_fraction\": %.3f, "
          "\"backward_peak_fraction\": %.3f, \"cpu_isa\": \"%s\"}\n",
          flash ? "flash" : "naive", s.b, s.t, s.nh, s.hd, threads, fwd, bwd, fwd_rate, bwd_rate, peak,
          peak > 0 ? fwd_rate / peak : 0.0, peak > 0 ? bwd_rate / peak : 0.0, cpu::isa_name(cpu::process_isa()));
    }
  }
  return 0;
}
