// Benchmark: training throughput of the cpu backend on a GPT-2-small-shaped model, against
// the machine: as a fraction of a large cblas_sgemm measured in the same run with the
// OpenBLAS core the start-up chose (the machine is shared and noisy; a ratio taken in one
// run is what compares across commits), and of the CPU's peak estimate (threads x clock x
// FLOPs per cycle of its widest FMA units), which a slow BLAS kernel cannot hide: a
// fallback core lowers both the step and the SGEMM, so only the peak fraction shows it.
// FLOPs per token: training_flops_per_token of model_flops.h. Prints one JSON line naming
// the BLAS, its core and the cpu backend's instruction set.
//   bench_model [STEPS=3] [SEQ=256] [BATCH=4] [MICROBATCHES=1] (BATCH sequences each; with two
//   or more the linear layers pack their weights once a step where they can: packed_weights.h)
#include <cblas.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/blas_setup.h"
#include "backend/cpu/gemm_library.h"
#include "backend/cpu/packed_weights.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/ops.h"
#include "core/communicator.h"
#include "model/stage.h"
#include "model_flops.h"
#include "train/adamw.h"

using namespace pptrain;
using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Best-of-3 rate of one large square sgemm on all threads, GFLOP/s.
static double sgemm_gflops(int n) {
  std::vector<float> a(size_t(n) * n), b(size_t(n) * n), c(size_t(n) * n);
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& x : a) x = u(gen);
  for (auto& x : b) x = u(gen);
  double best = 0;
  for (int rep = 0; rep < 4; ++rep) {
    auto t0 = Clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    double s = seconds_since(t0);
    if (rep > 0) best = std::max(best, 2.0 * n * n * double(n) / s / 1e9);
  }
  return best;
}

int main(int argc, char** argv) {
  const cpu::BlasChoice& blas = cpu::ensure_blas_core(argv);  // may re-execute with a better core
  int steps = argc > 1 ? std::atoi(argv[1]) : 3;
  ModelConfig m;
  m.n_layer = 12; m.n_head = 12; m.d_model = 768; m.vocab_size = 50304;
  m.seq_len = argc > 2 ? std::atoi(argv[2]) : 256;
  const int batch = argc > 3 ? std::atoi(argv[3]) : 4, microbatches = argc > 4 ? std::atoi(argv[4]) : 1;
  if (steps < 1 || m.seq_len < 1 || batch < 1 || microbatches < 1) {
    std::fprintf(stderr, "usage: bench_model [STEPS >= 1] [SEQ >= 1] [BATCH >= 1] [MICROBATCHES >= 1]\n");
    return 2;
  }
  auto ops = make_cpu_ops();
  LocalComm alone;
  ModelDims dims = ModelDims::from(m, batch, 1, 0);
  ParamStore params(*ops, 1, 0, 1337);
  auto model_stage = make_stage(params, dims, StageSpec{0, 0, m.n_layer, true, true}, alone);
  Stage& model = *model_stage;
  TrainingConfig tc;
  AdamW adamw(params, tc);
  model.set_loss_scale(1.0f / (batch * m.seq_len * microbatches));

  std::mt19937 gen(2);
  std::vector<int32_t> tok(dims.rows()), tgt(dims.rows());
  Buffer<int32_t> tokens(*ops, dims.rows()), targets(*ops, dims.rows());

  size_t n_matmul = 0, n_total = 0;
  for (auto& [name, p] : params.all()) {
    n_total += p->numel();
    if (name != "wpe.weight") n_matmul += p->numel();
  }
  const double tokens_per_step = double(batch) * m.seq_len * microbatches;
  const double flops_per_token = bench::training_flops_per_token(double(n_matmul), m.n_layer, m.seq_len, bench::attention_width(m));

  double sgemm_before = sgemm_gflops(2048);
  double best_s = 1e30, total_s = 0, loss = 0;
  for (int step = 0; step <= steps; ++step) {  // step 0 warms up (page faults, pools)
    auto t0 = Clock::now();
    params.zero_grads();
    {
      WeightsHeld held(*ops, microbatches);  // as a training step holds them: constant until the update
      for (int mb = 0; mb < microbatches; ++mb) {
        for (auto& x : tok) x = int32_t(gen() % m.vocab_size);
        for (auto& x : tgt) x = int32_t(gen() % m.vocab_size);
        tokens.upload(tok.data());
        targets.upload(tgt.data());
        model.forward(mb, {tokens.data(), targets.data()});
        loss = model.loss_sum(mb) / tokens_per_step;
        model.backward_input(mb);
        model.backward_weight(mb);
      }
    }
    adamw.step(1e-4, step + 1);
    double s = seconds_since(t0);
    if (step > 0) { total_s += s; best_s = std::min(best_s, s); }
  }
  double sgemm_after = sgemm_gflops(2048);
  double sgemm = std::max(sgemm_before, sgemm_after);
  double mean_s = total_s / steps;
  double achieved = flops_per_token * tokens_per_step / mean_s / 1e9;
  const cpu::CpuInfo cpu_info = cpu::read_cpu_info();
  // What the products with a weight ran on (cpu/linear.cpp): packed from kMinRows rows a step,
  // below that the dgrad on oneDNN's sgemm, wherever the packed path runs.
  const size_t rows = size_t(batch) * m.seq_len * microbatches;
  const std::string linear_weights =
      !cpu::PackedWeights::why_not().empty() ? "plain: " + cpu::PackedWeights::why_not()
      : rows >= cpu::PackedWeights::kMinRows
          ? "packed: " + cpu::PackedWeights::description()
          : "plain: " + std::to_string(rows) + " rows a step, below " + std::to_string(cpu::PackedWeights::kMinRows) +
                " (dgrad on oneDNN's sgemm)";
  const double peak = cpu::peak_gflops_estimate(cpu_info, omp_get_max_threads());
  std::printf(
      "{\"bench\": \"train_gpt2_small_cpu\", \"threads\": %d, \"seq\": %d, \"batch\": %d, \"params\": %zu, "
      "\"tokens_per_step\": %.0f, \"gflop_per_step\": %.2f, \"steps\": %d, \"step_s_mean\": %.3f, "
      "\"step_s_best\": %.3f, "
      "\"tokens_per_s\": %.1f, \"achieved_gflops\": %.2f, \"sgemm_gflops\": %.2f, \"sgemm_fraction\": %.3f, "
      "\"sgemm_fraction_best_step\": %.3f, \"peak_gflops_estimate\": %.1f, \"peak_fraction\": %.3f, "
      "\"sgemm_peak_fraction\": %.3f, \"blas\": \"%s\", \"blas_core\": \"%s\", \"blas_core_how\": \"%s\", "
      "\"gemm_library\": \"%s\", \"linear_weights\": \"%s\", \"cpu_isa\": \"%s\", \"cpu\": \"%s\", "
      "\"loss\": %.4f}\n",
      omp_get_max_threads(), m.seq_len, batch, n_total, tokens_per_step, flops_per_token * tokens_per_step / 1e9,
      steps, mean_s, best_s,
      tokens_per_step / mean_s, achieved, sgemm, achieved / sgemm,
      flops_per_token * tokens_per_step / best_s / 1e9 / sgemm, peak, peak > 0 ? achieved / peak : 0.0,
      peak > 0 ? sgemm / peak : 0.0, cpu::blas_version().c_str(), blas.running.c_str(), blas.how.c_str(),
      cpu::gemm_library_version(cpu::process_gemm_library()).c_str(), linear_weights.c_str(), cpu::isa_name(cpu::process_isa()), cpu_info.model_name.c_str(), loss);
  return 0;
}
