// bench_kernels: achieved memory bandwidth of the memory-bound kernels of kernels/ on the
// shapes of GPT-2 124M training (B = 16, T = 1024: N = 16384 rows, C = 768, hidden 4C,
// 12 heads, vocabulary 50304, 124,475,904 parameters), in bf16 and fp32 storage.
//
// Each kernel runs kWarmup times, then kLaunches times between two cudaEvents on the
// default stream; GB/s = (bytes one launch must move) / (mean time per launch). The bytes
// are the minimum traffic to DRAM: every input read once, every output written once
// (formula beside each kernel; s = sizeof(T)). A kernel that re-reads (layernorm reads its
// row twice, cross-entropy reads the logits twice) still counts them once, so
// fraction_of_peak says how close the kernel is to the floor its data sets.
// peak_GBps = 2 (DDR) · memory clock · bus width / 8, from cudaDevAttrMemoryClockRate and
// cudaDevAttrGlobalMemoryBusWidth.
//
// Prints one JSON line: {"bench": "kernels", "device", "peak_GBps", "kernels": [{"name",
// "dtype", "shape", "bytes", "us", "GBps", "fraction_of_peak"}, ...]}; on an error one line
// {"bench": "kernels", "error": "..."} naming the failed call, and exit status 1.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "../model_flops.h"
#include "adamw.cuh"
#include "attention.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "cast.cuh"
#include "core/error.h"
#include "cross_entropy.cuh"
#include "elementwise.cuh"
#include "embedding.cuh"
#include "gelu.cuh"
#include "layernorm.cuh"

namespace pptrain {
namespace {

using kernels::bf16;
using kernels::LaunchContext;

constexpr int kWarmup = 3;
constexpr int kLaunches = 20;
// GPT-2 124M, one microbatch of configs/gpt2_124m_gpu.yaml.
constexpr int kB = 16, kT = 1024, kC = 768, kHeads = 12, kVocab = 50304, kLayers = 12;
constexpr int kN = kB * kT;  // rows (tokens) of a microbatch

// ---- RAII for device memory and events -------------------------------------------------------

// n elements of T in device memory.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) { PPTRAIN_CUDA_CHECK(cudaMalloc(&data_, n * sizeof(T))); }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* data() const { return data_; }
  size_t size() const { return n_; }

 private:
  T* data_ = nullptr;
  size_t n_;
};

class Event {
 public:
  Event() { PPTRAIN_CUDA_CHECK(cudaEventCreate(&event_)); }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// ---- inputs ----------------------------------------------------------------------------------

// a[0..n) uniform in [lo, hi): 2^20 random values uploaded once, then tiled on the device by
// doubling copies (a logits tensor has 8·10^8 elements; generating them on the host is slow,
// and the values only need to be finite and varied).
template <typename T>
void fill_uniform(DeviceArray<T>& a, float lo, float hi, uint32_t seed) {
  const size_t chunk = std::min<size_t>(a.size(), size_t(1) << 20);
  std::vector<float> host(chunk);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (float& x : host) x = u(gen);
  if constexpr (std::is_same_v<T, float>) {
    PPTRAIN_CUDA_CHECK(cudaMemcpy(a.data(), host.data(), chunk * sizeof(float), cudaMemcpyHostToDevice));
  } else {
    DeviceArray<float> staging(chunk);
    PPTRAIN_CUDA_CHECK(cudaMemcpy(staging.data(), host.data(), chunk * sizeof(float), cudaMemcpyHostToDevice));
    kernels::launch_cast(LaunchContext{}, a.data(), staging.data(), chunk);
    PPTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
  }
  for (size_t done = chunk; done < a.size(); done *= 2) {
    const size_t count = std::min(done, a.size() - done);
    PPTRAIN_CUDA_CHECK(cudaMemcpy(a.data() + done, a.data(), count * sizeof(T), cudaMemcpyDeviceToDevice));
  }
}

// n token ids uniform in [0, vocab), uploaded; `host` keeps them.
std::vector<int32_t> random_tokens(DeviceArray<int32_t>& a, uint32_t seed) {
  std::vector<int32_t> host(a.size());
  std::mt19937 gen(seed);
  for (int32_t& t : host) t = int32_t(gen() % kVocab);
  PPTRAIN_CUDA_CHECK(cudaMemcpy(a.data(), host.data(), host.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  return host;
}

// ---- timing and the report -------------------------------------------------------------------

struct Result {
  std::string name, dtype, shape;
  double bytes;  // minimum DRAM traffic of one launch
  double us;     // mean time of one launch
};

// Mean microseconds of one call of `launch_once` (kLaunches timed after kWarmup).
template <typename Launch>
double time_launch_us(Launch&& launch_once) {
  for (int i = 0; i < kWarmup; ++i) launch_once();
  Event start, stop;
  PPTRAIN_CUDA_CHECK(cudaEventRecord(start.get(), nullptr));
  for (int i = 0; i < kLaunches; ++i) launch_once();
  PPTRAIN_CUDA_CHECK(cudaEventRecord(stop.get(), nullptr));
  PPTRAIN_CUDA_CHECK(cudaEventSynchronize(stop.get()));
  float ms = 0;
  PPTRAIN_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return 1000.0 * ms / kLaunches;
}

template <typename T>
const char* dtype_name() {
  return std::is_same_v<T, float> ? "fp32" : "bf16";
}

std::string shape(std::initializer_list<size_t> dims) {
  std::string s;
  for (size_t d : dims) {
    if (!s.empty()) s += 'x';
    s += std::to_string(d);
  }
  return s;
}

// ---- the kernels, per storage type -------------------------------------------------------------

// Layernorm, GELU, residual add, bias add, embedding, cross-entropy and the attention softmax
// in storage type T. Buffers live only as long as their kernel's block needs them.
template <typename T>
void bench_activation_kernels(std::vector<Result>& out) {
  const LaunchContext ctx{};
  const char* dt = dtype_name<T>();
  const double s = sizeof(T);
  const double nc = double(kN) * kC, nh = double(kN) * 4 * kC;

  {  // layernorm on the residual stream x[N,C]
    DeviceArray<T> x(size_t(kN) * kC), y(size_t(kN) * kC), dy(size_t(kN) * kC), dx(size_t(kN) * kC);
    DeviceArray<T> g(kC), b(kC);
    DeviceArray<float> mean(kN), rstd(kN);
    fill_uniform(x, -2, 2, 1);
    fill_uniform(dy, -1, 1, 2);
    fill_uniform(dx, -1, 1, 3);
    fill_uniform(g, 0.5f, 1.5f, 4);
    fill_uniform(b, -0.1f, 0.1f, 5);
    // read x[N,C], g[C], b[C]; write y[N,C], mean[N], rstd[N] (fp32)
    double us = time_launch_us([&] {
      kernels::launch_layernorm_forward<T>(ctx, y.data(), mean.data(), rstd.data(), x.data(), g.data(), b.data(), kN, kC);
    });
    out.push_back({"layernorm_forward", dt, shape({kN, kC}), 2 * nc * s + 2 * kC * s + 2 * kN * 4.0, us});
    // The blocks' dgrad adds the residual gradient (here dx itself, in place):
    // read dy, x, residual [N,C], g[C], mean, rstd [N] (fp32); write dx[N,C]
    us = time_launch_us([&] {
      kernels::launch_layernorm_backward_input<T>(ctx, dx.data(), dy.data(), x.data(), mean.data(), rstd.data(),
                                                  g.data(), kN, kC, dx.data());
    });
    out.push_back({"layernorm_backward_input", dt, shape({kN, kC}), 4 * nc * s + kC * s + 2 * kN * 4.0, us});
  }
  {  // GELU on the MLP hidden h[N,4C]
    const size_t n = size_t(kN) * 4 * kC;
    DeviceArray<T> x(n), y(n), dy(n), dx(n);
    fill_uniform(x, -3, 3, 6);
    fill_uniform(dy, -1, 1, 7);
    // read x; write y
    double us = time_launch_us([&] { kernels::launch_gelu_forward<T>(ctx, y.data(), x.data(), n); });
    out.push_back({"gelu_forward", dt, shape({kN, 4 * kC}), 2 * nh * s, us});
    // read dy, x; write dx
    us = time_launch_us([&] { kernels::launch_gelu_backward<T>(ctx, dx.data(), dy.data(), x.data(), n); });
    out.push_back({"gelu_backward", dt, shape({kN, 4 * kC}), 3 * nh * s, us});
    // The fc bias y[N,4C] += b[4C]: read y, b; write y
    DeviceArray<T> bias(4 * kC);
    fill_uniform(bias, -0.1f, 0.1f, 8);
    us = time_launch_us([&] { kernels::launch_add_bias<T>(ctx, y.data(), bias.data(), kN, 4 * kC); });
    out.push_back({"add_bias", dt, shape({kN, 4 * kC}), 2 * nh * s + 4 * kC * s, us});
  }
  {  // residual add y = a + b on [N,C]: read a, b; write y
    const size_t n = size_t(kN) * kC;
    DeviceArray<T> a(n), b(n), y(n);
    fill_uniform(a, -1, 1, 9);
    fill_uniform(b, -1, 1, 10);
    double us = time_launch_us([&] { kernels::launch_add<T>(ctx, y.data(), a.data(), b.data(), n); });
    out.push_back({"add_residual", dt, shape({kN, kC}), 3 * nc * s, us});
  }
  {  // token + position embedding y[N,C] = wte[tok] + wpe[row mod T]
    DeviceArray<T> wte(size_t(kVocab) * kC), wpe(size_t(kT) * kC), y(size_t(kN) * kC);
    DeviceArray<int32_t> tokens(kN);
    fill_uniform(wte, -0.1f, 0.1f, 11);
    fill_uniform(wpe, -0.1f, 0.1f, 12);
    std::vector<int32_t> host = random_tokens(tokens, 13);
    const double distinct = double(std::set<int32_t>(host.begin(), host.end()).size());
    // read tokens[N] (int32), the distinct wte rows used (U·C), wpe[T,C]; write y[N,C]
    double us = time_launch_us([&] {
      kernels::launch_embedding_forward<T>(ctx, y.data(), tokens.data(), wte.data(), wpe.data(), kN, kT, kC, 0, kVocab);
    });
    out.push_back({"embedding_forward", dt, shape({kN, kC}),
                   4.0 * kN + distinct * kC * s + double(kT) * kC * s + nc * s, us});
  }
  {  // cross-entropy over logits[N,V]; statistics rmax, sumexp, target_logit [N] in fp32
    const size_t n = size_t(kN) * kVocab;
    const double nv = double(n);
    DeviceArray<T> logits(n), dlogits(n);
    DeviceArray<float> rmax(kN), sumexp(kN), target_logit(kN);
    DeviceArray<int32_t> targets(kN);
    fill_uniform(logits, -4, 4, 14);
    random_tokens(targets, 15);
    const float scale = 1.0f / kN;
    // read logits; write rmax
    double us = time_launch_us([&] { kernels::launch_ce_row_max<T>(ctx, rmax.data(), logits.data(), kN, kVocab, kVocab); });
    out.push_back({"ce_row_max", dt, shape({kN, kVocab}), nv * s + 4.0 * kN, us});
    // read logits, rmax, targets; write sumexp, target_logit
    us = time_launch_us([&] {
      kernels::launch_ce_sumexp_target<T>(ctx, sumexp.data(), target_logit.data(), logits.data(), rmax.data(),
                                          targets.data(), kN, kVocab, kVocab, 0);
    });
    out.push_back({"ce_sumexp_target", dt, shape({kN, kVocab}), nv * s + 4 * 4.0 * kN, us});
    // read logits, rmax, sumexp, targets; write dlogits
    us = time_launch_us([&] {
      kernels::launch_ce_backward<T>(ctx, dlogits.data(), logits.data(), rmax.data(), sumexp.data(), targets.data(),
                                     kN, kVocab, kVocab, 0, scale);
    });
    out.push_back({"ce_backward", dt, shape({kN, kVocab}), 2 * nv * s + 3 * 4.0 * kN, us});
    // the tp = 1 path: read logits, targets; write dlogits, rmax, sumexp, target_logit
    us = time_launch_us([&] {
      kernels::launch_ce_fused<T>(ctx, dlogits.data(), rmax.data(), sumexp.data(), target_logit.data(), logits.data(),
                                  targets.data(), kN, kVocab, kVocab, scale);
    });
    out.push_back({"ce_fused", dt, shape({kN, kVocab}), 2 * nv * s + 4 * 4.0 * kN, us});
  }
  {  // causal softmax over scores[B·NH,T,T]: only j ≤ i is read, every entry is written
    const int bh = kB * kHeads;
    const size_t n = size_t(bh) * kT * kT;
    const double lower = double(bh) * kT * (kT + 1) / 2, full = double(n);
    DeviceArray<T> scores(n), probs(n), dprobs(n), dscores(n);
    fill_uniform(scores, -4, 4, 16);
    fill_uniform(dprobs, -1, 1, 17);
    const float scale = 0.125f;  // 1/√64
    // read scores (lower triangle); write probs
    double us = time_launch_us([&] {
      kernels::launch_attention_softmax_forward<T>(ctx, probs.data(), scores.data(), bh, kT, scale);
    });
    out.push_back({"attention_softmax_forward", dt, shape({size_t(bh), kT, kT}), lower * s + full * s, us});
    // read probs, dprobs (lower triangles); write dscores
    us = time_launch_us([&] {
      kernels::launch_attention_softmax_backward<T>(ctx, dscores.data(), dprobs.data(), probs.data(), bh, kT, scale);
    });
    out.push_back({"attention_softmax_backward", dt, shape({size_t(bh), kT, kT}), 2 * lower * s + full * s, us});
  }
}

// The optimizer-side kernels over all parameters (fp32 master weights).
void bench_parameter_kernels(std::vector<Result>& out) {
  const LaunchContext ctx{};
  ModelConfig m;
  m.n_layer = kLayers; m.n_head = kHeads; m.d_model = kC; m.seq_len = kT; m.vocab_size = kVocab;
  const size_t n = bench::model_param_counts(m).total;  // 124,475,904
  const double p = double(n);
  DeviceArray<float> w(n), g(n), mom1(n), mom2(n);
  DeviceArray<bf16> w_bf16(n);
  fill_uniform(w, -0.1f, 0.1f, 18);
  fill_uniform(g, -0.01f, 0.01f, 19);
  PPTRAIN_CUDA_CHECK(cudaMemset(mom1.data(), 0, n * sizeof(float)));
  PPTRAIN_CUDA_CHECK(cudaMemset(mom2.data(), 0, n * sizeof(float)));
  // master weights to the bf16 working copy: read 4 bytes, write 2 per parameter
  double us = time_launch_us([&] { kernels::launch_cast(ctx, w_bf16.data(), w.data(), n); });
  out.push_back({"cast", "fp32->bf16", shape({n}), 6 * p, us});
  // AdamW: read p, g, m, v; write p, m, v (fp32): 28 bytes per parameter; the bf16 model
  // (dtype "bf16") also writes the bf16 copy: 30 bytes
  int t = 0;
  us = time_launch_us([&] {
    kernels::launch_adamw(ctx, w.data(), mom1.data(), mom2.data(), nullptr, w.data(), g.data(), mom1.data(),
                          mom2.data(), n, 1.0f, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++t);
  });
  out.push_back({"adamw", "fp32", shape({n}), 28 * p, us});
  us = time_launch_us([&] {
    kernels::launch_adamw(ctx, w.data(), mom1.data(), mom2.data(), w_bf16.data(), w.data(), g.data(), mom1.data(),
                          mom2.data(), n, 1.0f, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++t);
  });
  out.push_back({"adamw", "bf16", shape({n}), 30 * p, us});
}

// Peak DRAM bandwidth of the current device, GB/s: double data rate · clock · bus bytes.
double peak_gbps(int device) {
  int clock_khz = 0, bus_bits = 0;
  PPTRAIN_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device));
  PPTRAIN_CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
  return 2.0 * clock_khz * 1e3 * (bus_bits / 8.0) / 1e9;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += (c == '\n' || c == '\t') ? ' ' : c;
  }
  return out + "\"";
}

int run() {
  const int device = cuda::select_device();
  cudaDeviceProp prop{};
  PPTRAIN_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  const double peak = peak_gbps(device);
  std::vector<Result> results;
  bench_activation_kernels<bf16>(results);
  bench_activation_kernels<float>(results);
  bench_parameter_kernels(results);
  std::printf("{\"bench\": \"kernels\", \"device\": %s, \"peak_GBps\": %.1f, \"launches\": %d, \"kernels\": [",
              json_string(prop.name).c_str(), peak, kLaunches);
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    const double gbps = r.bytes / (r.us * 1e-6) / 1e9;
    std::printf("%s{\"name\": \"%s\", \"dtype\": \"%s\", \"shape\": \"%s\", \"bytes\": %.0f, \"us\": %.2f, "
                "\"GBps\": %.1f, \"fraction_of_peak\": %.3f}",
                i ? ", " : "", r.name.c_str(), r.dtype.c_str(), r.shape.c_str(), r.bytes, r.us, gbps, gbps / peak);
  }
  std::printf("]}\n");
  return 0;
}

}  // namespace
}  // namespace pptrain

int main() {
  try {
    return pptrain::run();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::printf("{\"bench\": \"kernels\", \"error\": %s}\n", pptrain::json_string(e.what()).c_str());
    std::fprintf(stderr, "bench_kernels: %s\n", e.what());
    return 1;
  }
}
