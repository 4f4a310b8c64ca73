// attention_check: the causal attention core of the cuda backend, run several ways on one
// GPU, against each other and against an fp64 host reference:
//   naive        attention_forward / attention_backward_input (cuBLAS GEMMs + softmax
//                kernels, the [B,NH,T,T] probabilities stored in bf16);
//   flash        flash_attention_forward / _backward_input, the handwritten fused kernels as
//                CudaOps runs them (wgmma on Hopper, mma.sync elsewhere);
//   flash-mma    the same with the kernels forced to the mma.sync ones,
//   flash-wgmma  and to Hopper's wgmma ones (a "skipped" line on other GPUs);
//   cudnn        the same two ops with model.attention: cudnn (cuDNN's fused SDPA).
// Random bf16 inputs (qkv and dout entries N(0,1), rounded to bf16), B=2, NH=4, T=200, HD=64
// and HD=128 with 4 key/value heads, and grouped-query: HD=64 with 2, HD=128 with 1;
// forward, then backward from the forward's own out (and lse or probs), as in
// training. Built only by the real CUDA build:
//   make CUDA=1 build/bench/attention_check && build/bench/attention_check [--device N]
//        [--impls naive,flash,flash-mma,flash-wgmma,cudnn] [--time | --time-only]
//        [--shape B,NH,NKV,T,HD] [--deadline S]   (impls: all but flash by default, the
//        handwritten kernels last; --time-only skips the checks, for a profiler; --shape
//        times that shape instead of the four below; --deadline: below)
// (scripts/gpu_check.sh runs it on a lent GPU). One JSON line per comparison:
//   {"check": "attention", "B": 2, "NH": 4, "T": 200, "HD": 64, "tensor": "dq", "a": "cudnn",
//    "b": "reference", "normwise": 1.2e-04, "bound": 1.6e-02, "pass": true}
// and {"check": "attention", ..., "impl": "flash", "error": "..."} for an implementation that
// failed to run (its comparisons are then left out). Exit status 0 iff every comparison
// passed and no implementation failed.
//
// Each implementation's check on one shape, and its timing on one shape, must end within
// --deadline seconds (default 60 on a GPU, where the longest takes about a second; none under
// the emulator, whose kernels run on the host): a kernel that never ends would otherwise hold
// a lent GPU until an outside timeout. Past it one line names the phase,
//   {"bench": "attention", "impl": "flash-wgmma", "phase": "check", "B": 2, ..., "error": "..."}
// and the program exits 3 at once (bench/cuda/deadline.h). The implementations run in the
// order given, the default's handwritten kernels last, so that a hang in one of them costs
// no other's figures.
//
// --time then times each implementation's forward and backward (the training shapes: GPT-2
// 124M's B=16 NH=12 T=1024 HD=64, the Llama 3.2 1B shape's B=1 NH=32 NKV=8 T=8192 HD=64, and
// HD=128 at T=1024 and 8192), one JSON line each:
//   {"bench": "attention", "impl", "B", "NH", "NKV", "T", "HD", "fwd_ms", "bwd_ms",
//    "fwd_tflops", "bwd_tflops", "fwd_bwd_tflops"}
// counting causal FLOPs as FlashAttention does: forward 2 GEMMs of 2·T·T·HD halved by the
// mask, 2·B·NH·T²·HD; backward 5 GEMMs (S recomputed, dP, dV, dQ, dK), 2.5x the forward.
// Median of 5 timed batches of 10 calls after 3 warm-ups, the host clock around a device
// synchronisation (a batch is milliseconds: the synchronisation is noise).
//
// The measure, each implementation's normwise error against an fp64 reference and the bound
// its bf16 rounding allows, is derived in bench/cuda/attention_reference.h.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "bench/cuda/attention_reference.h"
#include "bench/cuda/deadline.h"
#include "core/bf16.h"
#include "flash_attention.cuh"

namespace pptrain {
namespace {

using namespace attention_check;

// Device memory from the ops object's allocator, released on scope exit.
class DeviceBuffer {
 public:
  DeviceBuffer(Ops& ops, size_t bytes) : ops_(ops), p_(ops.allocate(bytes)) {}
  ~DeviceBuffer() { ops_.release(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(p_); }

 private:
  Ops& ops_;
  void* p_;
};

std::vector<double> to_double(Ops& ops, const bfloat16* device, size_t n) {
  std::vector<bfloat16> host(n);
  ops.copy_to_host(host.data(), device, n * sizeof(bfloat16));
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = host[i].to_float();
  return out;
}

// The fused forward and backward of `impl` (flash, cudnn: through CudaOps; flash-mma,
// flash-wgmma: the bf16 kernel launchers with the kernels forced, on the backend's stream).
bool forced(const std::string& impl) { return impl == "flash-mma" || impl == "flash-wgmma"; }
kernels::FlashKernels kernels_of(const std::string& impl) {
  return impl == "flash-mma" ? kernels::FlashKernels::mma : kernels::FlashKernels::wgmma;
}
using KernelBf16 = kernels::bf16;

void flash_forward(cuda::CudaOps& ops, const std::string& impl, bfloat16* out, float* lse, const bfloat16* qkv, int b,
                   int t, int nh, int nkv, int hd) {
  if (!forced(impl)) return ops.gqa_flash_attention_forward(out, lse, qkv, b, t, nh, nkv, hd);
  kernels::launch_flash_attention_forward_bf16(kernels::LaunchContext{ops.compute_stream()},
                                               reinterpret_cast<KernelBf16*>(out), lse,
                                               reinterpret_cast<const KernelBf16*>(qkv), b, t, nh, nkv, hd,
                                               kernels_of(impl));
}

void flash_backward(cuda::CudaOps& ops, const std::string& impl, bfloat16* dqkv, float* delta, const bfloat16* dout,
                    const bfloat16* qkv, const bfloat16* out, const float* lse, int b, int t, int nh, int nkv,
                    int hd) {
  if (!forced(impl))
    return ops.gqa_flash_attention_backward_input(dqkv, delta, dout, qkv, out, lse, b, t, nh, nkv, hd);
  kernels::launch_flash_attention_backward_input_bf16(
      kernels::LaunchContext{ops.compute_stream()}, reinterpret_cast<KernelBf16*>(dqkv), delta,
      reinterpret_cast<const KernelBf16*>(dout), reinterpret_cast<const KernelBf16*>(qkv),
      reinterpret_cast<const KernelBf16*>(out), lse, b, t, nh, nkv, hd, kernels_of(impl));
}

// flash-wgmma is skipped (not failed) on a GPU that cannot run it: the check is the same
// program on every GPU. The emulated build runs it everywhere.
bool runs_here(const std::string& impl, int hd) {
#ifdef PPTRAIN_EMULATED
  (void)impl, (void)hd;
  return true;
#else
  return impl != "flash-wgmma" || kernels::flash_attention_uses_wgmma(hd);
#endif
}

// Forward then backward of one implementation, on its own CudaOps.
Result run(const std::string& impl, int device, const Shape& s, const std::vector<bfloat16>& qkv,
           const std::vector<bfloat16>& dout) {
  Result r;
  try {
    cuda::CudaOps ops(device, impl == "cudnn");
    const size_t n_qkv = s.tokens() * s.w(), n_out = s.tokens() * s.c(), n_lse = size_t(s.b) * s.nh * s.t;
    DeviceBuffer d_qkv(ops, n_qkv * 2), d_out(ops, n_out * 2), d_dout(ops, n_out * 2), d_dqkv(ops, n_qkv * 2),
        d_lse(ops, n_lse * 4), d_delta(ops, n_lse * 4), d_probs(ops, impl == "naive" ? n_lse * s.t * 2 : 0);
    ops.copy_to_device(d_qkv.as<void>(), qkv.data(), n_qkv * 2);
    ops.copy_to_device(d_dout.as<void>(), dout.data(), n_out * 2);
    auto* q = d_qkv.as<bfloat16>();
    auto *o = d_out.as<bfloat16>(), *dq = d_dqkv.as<bfloat16>(), *probs = d_probs.as<bfloat16>();
    if (impl == "naive") {
      ops.gqa_attention_forward(o, probs, q, s.b, s.t, s.nh, s.nkv, s.hd);
      ops.gqa_attention_backward_input(dq, d_dout.as<bfloat16>(), q, probs, s.b, s.t, s.nh, s.nkv, s.hd);
    } else {
      flash_forward(ops, impl, o, d_lse.as<float>(), q, s.b, s.t, s.nh, s.nkv, s.hd);
      flash_backward(ops, impl, dq, d_delta.as<float>(), d_dout.as<bfloat16>(), q, o, d_lse.as<float>(), s.b, s.t,
                     s.nh, s.nkv, s.hd);
      std::vector<float> lse(n_lse);
      ops.copy_to_host(lse.data(), d_lse.as<float>(), n_lse * 4);
      r.lse.assign(lse.begin(), lse.end());
    }
    ops.synchronize();
    r.out = to_double(ops, o, n_out);
    r.dqkv = to_double(ops, dq, n_qkv);
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

// ‖x − y‖₂ (y empty: ‖x‖₂) over the elements of qkv part `part` (0 q, 1 k, 2 v) of each row
// (part = -1: every element).
double norm(const std::vector<double>& x, const std::vector<double>& y, const Shape& s, int part) {
  double sum = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (part >= 0 && part_of(s, i % s.w()) != part) continue;
    const double diff = x[i] - (y.empty() ? 0.0 : y[i]);
    sum += diff * diff;
  }
  return std::sqrt(sum);
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (char ch : text) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += (ch == '\n' || ch == '\t') ? ' ' : ch;
  }
  return out + "\"";
}

std::string head(const Shape& s) {
  std::ostringstream o;
  o << "{\"check\": \"attention\", \"B\": " << s.b << ", \"NH\": " << s.nh << ", \"NKV\": " << s.nkv
    << ", \"T\": " << s.t << ", \"HD\": " << s.hd;
  return o.str();
}

// Prints every comparison of `a` against `b` (names in `results`); false if one fails.
bool compare(const Shape& s, const Reference& ref, const std::map<std::string, Result>& results, const std::string& a,
             const std::string& b) {
  const Result &x = results.at(a), &y = results.at(b);
  bool ok = true;
  struct Part {
    const char* name;
    int part;
  };
  for (const Part& part : {Part{"out", -1}, Part{"lse", -1}, Part{"dq", 0}, Part{"dk", 1}, Part{"dv", 2}}) {
    const std::string t = part.name;
    if (t == "lse" && (x.lse.empty() || y.lse.empty())) continue;  // naive keeps probs, not lse
    auto pick = [&](const Result& res) -> const std::vector<double>& {
      return t == "out" ? res.out : t == "lse" ? res.lse : res.dqkv;
    };
    auto bound_norm = [&](const std::string& impl) {
      return impl == "reference" ? 0.0 : norm(pick(ref.bounds.at(kind(impl))), {}, s, part.part);
    };
    const double scale = norm(pick(ref.r), {}, s, part.part);
    const double value = norm(pick(x), pick(y), s, part.part) / scale;
    const double bound = (bound_norm(a) + bound_norm(b)) / scale;
    const bool pass = value <= bound;  // NaN fails
    ok = ok && pass;
    std::printf("%s, \"tensor\": \"%s\", \"a\": \"%s\", \"b\": \"%s\", \"normwise\": %.3e, \"bound\": %.3e, "
                "\"pass\": %s}\n",
                head(s).c_str(), t.c_str(), a.c_str(), b.c_str(), value, bound, pass ? "true" : "false");
  }
  return ok;
}

// The phase a deadline guards, as JSON members: the implementation, what it does, the shape.
std::string phase(const std::string& impl, const char* what, int b, int nh, int nkv, int t, int hd) {
  std::ostringstream o;
  o << "\"impl\": \"" << impl << "\", \"phase\": \"" << what << "\", \"B\": " << b << ", \"NH\": " << nh
    << ", \"NKV\": " << nkv << ", \"T\": " << t << ", \"HD\": " << hd;
  return o.str();
}

bool check(int device, const Shape& s, const std::vector<std::string>& impls, Deadline& deadline, double seconds) {
  std::mt19937_64 rng(20240601 + s.hd + 1000 * s.nkv);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<bfloat16> qkv(s.tokens() * s.w()), dout(s.tokens() * s.c());
  std::vector<double> qkv_d(qkv.size()), dout_d(dout.size());
  for (size_t i = 0; i < qkv.size(); ++i) qkv_d[i] = (qkv[i] = bfloat16::from_float(normal(rng))).to_float();
  for (size_t i = 0; i < dout.size(); ++i) dout_d[i] = (dout[i] = bfloat16::from_float(normal(rng))).to_float();

  const Reference ref = reference(s, qkv_d, dout_d);
  std::map<std::string, Result> results{{"reference", ref.r}};
  bool ok = true;
  std::vector<std::string> ran;
  for (const std::string& impl : impls) {
    if (!runs_here(impl, s.hd)) {
      std::printf("%s, \"impl\": \"%s\", \"skipped\": \"the wgmma kernels need a Hopper GPU and a build for 90\"}\n",
                  head(s).c_str(), impl.c_str());
      continue;
    }
    deadline.arm(phase(impl, "check", s.b, s.nh, s.nkv, s.t, s.hd), seconds);
    Result r = run(impl, device, s, qkv, dout);
    deadline.disarm();
    if (!r.error.empty()) {
      std::printf("%s, \"impl\": \"%s\", \"error\": %s}\n", head(s).c_str(), impl.c_str(), json_string(r.error).c_str());
      ok = false;
      continue;
    }
    results.emplace(impl, std::move(r));
    ran.push_back(impl);
  }
  for (const std::string& a : ran) ok = compare(s, ref, results, a, "reference") && ok;
  for (size_t i = 0; i < ran.size(); ++i)
    for (size_t j = i + 1; j < ran.size(); ++j) ok = compare(s, ref, results, ran[j], ran[i]) && ok;
  return ok;
}

// --time: one implementation's forward and backward on one shape (NKV key/value heads).
struct TimeShape {
  int b, nh, nkv, t, hd;
};

void time_impl(const std::string& impl, int device, const TimeShape& s, Deadline& deadline, double seconds) {
  deadline.arm(phase(impl, "time", s.b, s.nh, s.nkv, s.t, s.hd), seconds);
  std::printf("{\"bench\": \"attention\", \"impl\": \"%s\", \"B\": %d, \"NH\": %d, \"NKV\": %d, \"T\": %d, "
              "\"HD\": %d, ",
              impl.c_str(), s.b, s.nh, s.nkv, s.t, s.hd);
  try {
    cuda::CudaOps ops(device, impl == "cudnn");
    const size_t width = size_t(s.nh + 2 * s.nkv) * s.hd, tokens = size_t(s.b) * s.t;
    const size_t n_qkv = tokens * width, n_out = tokens * s.nh * s.hd, n_lse = size_t(s.b) * s.nh * s.t;
    DeviceBuffer d_qkv(ops, n_qkv * 2), d_out(ops, n_out * 2), d_dout(ops, n_out * 2), d_dqkv(ops, n_qkv * 2),
        d_lse(ops, n_lse * 4), d_delta(ops, n_lse * 4), d_probs(ops, impl == "naive" ? n_lse * s.t * 2 : 0);
    // Random data, not zeros (zeros can run faster than real data): N(0,1) rounded to bf16.
    std::mt19937_64 rng(7 + s.t + s.hd);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<bfloat16> host(n_qkv);
    for (auto& x : host) x = bfloat16::from_float(normal(rng));
    ops.copy_to_device(d_qkv.as<void>(), host.data(), n_qkv * 2);
    ops.copy_to_device(d_dout.as<void>(), host.data(), n_out * 2);
    auto* q = d_qkv.as<bfloat16>();
    auto *o = d_out.as<bfloat16>(), *dq = d_dqkv.as<bfloat16>(), *probs = d_probs.as<bfloat16>();
    auto* dout = d_dout.as<bfloat16>();
    auto forward = [&] {
      if (impl == "naive") ops.gqa_attention_forward(o, probs, q, s.b, s.t, s.nh, s.nkv, s.hd);
      else flash_forward(ops, impl, o, d_lse.as<float>(), q, s.b, s.t, s.nh, s.nkv, s.hd);
    };
    auto backward = [&] {
      if (impl == "naive") ops.gqa_attention_backward_input(dq, dout, q, probs, s.b, s.t, s.nh, s.nkv, s.hd);
      else
        flash_backward(ops, impl, dq, d_delta.as<float>(), dout, q, o, d_lse.as<float>(), s.b, s.t, s.nh, s.nkv,
                       s.hd);
    };
    auto median_ms = [&](auto&& body) {
      for (int i = 0; i < 3; ++i) body();
      ops.synchronize();
      std::vector<double> ms;
      for (int rep = 0; rep < 5; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 10; ++i) body();
        ops.synchronize();
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 10);
      }
      std::sort(ms.begin(), ms.end());
      return ms[2];
    };
    forward();
    const double fwd = median_ms(forward), bwd = median_ms(backward);
    const double flops = 2.0 * s.b * s.nh * double(s.t) * s.t * s.hd;  // causal forward
    std::printf("\"fwd_ms\": %.4f, \"bwd_ms\": %.4f, \"fwd_tflops\": %.1f, \"bwd_tflops\": %.1f, "
                "\"fwd_bwd_tflops\": %.1f}\n",
                fwd, bwd, flops / fwd * 1e-9, 2.5 * flops / bwd * 1e-9, 3.5 * flops / (fwd + bwd) * 1e-9);
  } catch (const std::exception& e) {
    std::printf("\"error\": %s}\n", json_string(e.what()).c_str());
  }
  std::fflush(stdout);
  deadline.disarm();
}

}  // namespace
}  // namespace pptrain

int main(int argc, char** argv) {
  int device = 0;
  bool time = false, check = true;
  std::vector<pptrain::TimeShape> time_shapes = {pptrain::TimeShape{16, 12, 12, 1024, 64},
                                                 pptrain::TimeShape{1, 32, 8, 8192, 64},
                                                 pptrain::TimeShape{8, 16, 16, 1024, 128},
                                                 pptrain::TimeShape{1, 16, 16, 8192, 128}};
  std::vector<std::string> impls = {"naive", "cudnn", "flash-mma", "flash-wgmma"};
#ifdef PPTRAIN_EMULATED
  double deadline_s = 0;  // the emulator runs kernels on the host: minutes are normal
#else
  double deadline_s = 60;
#endif
  const std::vector<std::string> known = {"naive", "flash", "flash-mma", "flash-wgmma", "cudnn"};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--device" && i + 1 < argc) {
      device = std::atoi(argv[++i]);
    } else if (arg == "--impls" && i + 1 < argc) {
      impls.clear();
      std::stringstream list(argv[++i]);
      for (std::string name; std::getline(list, name, ',');) {
        if (std::find(known.begin(), known.end(), name) == known.end()) {
          std::fprintf(stderr, "attention_check: --impls: expected naive, flash, flash-mma, flash-wgmma or cudnn, got '%s'\n",
                       name.c_str());
          return 2;
        }
        impls.push_back(name);
      }
    } else if (arg == "--time") {
      time = true;
    } else if (arg == "--deadline" && i + 1 < argc) {  // seconds a phase may take; 0: none
      char* end = nullptr;
      deadline_s = std::strtod(argv[++i], &end);
      if (end == argv[i] || *end || !(deadline_s >= 0)) {
        std::fprintf(stderr, "attention_check: --deadline: expected seconds >= 0, got '%s'\n", argv[i]);
        return 2;
      }
    } else if (arg == "--time-only") {  // no checks: a profiler sees the timed kernels alone
      time = true, check = false;
    } else if (arg == "--shape" && i + 1 < argc) {  // B,NH,NKV,T,HD: time this shape only
      pptrain::TimeShape t{};
      if (std::sscanf(argv[++i], "%d,%d,%d,%d,%d", &t.b, &t.nh, &t.nkv, &t.t, &t.hd) != 5 || t.b < 1 || t.nh < 1 ||
          t.nkv < 1 || t.nh % t.nkv != 0 || t.t < 1 || t.hd < 1) {
        std::fprintf(stderr, "attention_check: --shape: expected B,NH,NKV,T,HD (NKV dividing NH), got '%s'\n", argv[i]);
        return 2;
      }
      time_shapes = {t};
    } else {
      std::fprintf(stderr,
                   "usage: attention_check [--device N] [--impls naive,flash,flash-mma,flash-wgmma,cudnn] [--time | "
                   "--time-only] [--shape B,NH,NKV,T,HD] [--deadline S]\n");
      return 2;
    }
  }
  pptrain::Deadline deadline([](const std::string& what, double seconds) {
    std::ostringstream o;
    o << "{\"bench\": \"attention\", " << what << ", \"error\": \"not finished within " << seconds
      << " s (--deadline): a kernel that never ends? attention_check stopped here\"}";
    return o.str();
  });
  bool ok = true;
  // Multi-head at HD 64 and 128, grouped-query (2 and 1 key/value heads for 4 query heads).
  if (check)
    for (auto [hd, nkv] : {std::pair{64, 4}, std::pair{128, 4}, std::pair{64, 2}, std::pair{128, 1}})
      ok = pptrain::check(device, pptrain::attention_check::Shape{pptrain::attention_check::kB, pptrain::attention_check::kT,
                                                          pptrain::attention_check::kNH, hd, nkv}, impls, deadline,
                          deadline_s) &&
           ok;
  // Each implementation on every shape before the next one: a hang in the last (the
  // handwritten kernels by default) leaves the others' figures printed.
  if (time)
    for (const std::string& impl : impls)
      for (const pptrain::TimeShape& s : time_shapes)
        if ((impl != "naive" || s.t <= 1024) && pptrain::runs_here(impl, s.hd))  // naive's T² probs: short T only
          pptrain::time_impl(impl, device, s, deadline, deadline_s);
  return ok ? 0 : 1;
}
