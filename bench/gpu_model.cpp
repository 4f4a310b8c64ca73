// gpu_model CONFIG [section.key=value ...] --device h100|h200|a100 [--gemm-fraction F]
//           [--small-gemm-fraction F] [--flash-fraction F] [--hbm-fraction F]
//
// Predicts one training step of CONFIG's model on one GPU (bench/perf_model: every GEMM and
// memory-bound kernel at its roofline) and its memory. Prints the assumptions ('#' lines),
// one table line per op kind, the memory breakdown, and last one JSON line:
//   {"device", "attention", "precision", "step_ms", "tokens_per_s", "mfu", "flops_per_token",
//    "memory": {...bytes...}, "fits"}
// Host-only: runs anywhere (scripts/gpu_check.sh prints it beside the measurement).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "perf_model/perf_model.h"

using namespace pptrain;
using namespace pptrain::bench;

namespace {

struct Args {
  std::string config, device;
  std::vector<std::string> overrides;
  Fractions fractions;
};

double parse_fraction(const std::string& flag, const char* text) {
  char* end = nullptr;
  const double x = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(x > 0 && x <= 1)) fail(flag, ": expected a fraction in (0, 1], got '", text, "'");
  return x;
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    const bool has_value = i + 1 < argc;
    if (s.rfind("--", 0) == 0 && !has_value) fail(s, ": expected a value after it");
    if (s == "--device") a.device = argv[++i];
    else if (s == "--gemm-fraction") a.fractions.gemm_large = parse_fraction(s, argv[++i]);
    else if (s == "--small-gemm-fraction") a.fractions.gemm_small = parse_fraction(s, argv[++i]);
    else if (s == "--flash-fraction") a.fractions.flash = parse_fraction(s, argv[++i]);
    else if (s == "--hbm-fraction") a.fractions.hbm = parse_fraction(s, argv[++i]);
    else if (s.rfind("--", 0) == 0) fail("unknown option '", s, "'");
    else if (a.config.empty()) a.config = s;
    else a.overrides.push_back(s);
  }
  if (a.config.empty()) fail("no CONFIG given");
  if (a.device.empty()) fail("--device h100|h200|a100 is required");
  return a;
}

double gib(double bytes) { return bytes / double(1 << 30); }

void print_table(const StepPrediction& p) {
  std::printf("%-48s %7s %12s %12s %10s  %s\n", "op (per step)", "count", "GFLOP", "MB", "ms", "bound");
  for (const OpCost& o : p.ops)
    std::printf("%-48s %7d %12.1f %12.1f %10.3f  %s\n", o.name.c_str(), o.count, o.flops / 1e9, o.bytes / 1e6,
                o.ms, o.compute_bound ? "compute" : "memory");
  std::printf("%-48s %7s %12s %12s %10.3f\n", "step", "", "", "", p.step_ms);
}

void print_memory(const MemoryBreakdown& m, const DeviceSpec& dev) {
  std::printf("memory (GiB): params fp32 %.2f, grads fp32 %.2f, adamw m+v %.2f, bf16 weights %.2f\n",
              gib(m.params_fp32), gib(m.grads_fp32), gib(m.adam_moments), gib(m.weights_bf16));
  std::printf("memory (GiB): activations per microbatch %.2f (block %.3f each, head %.3f, stage io %.3f)"
              " x %.0f in flight = %.2f; workspace %.2f\n",
              gib(m.activation.per_microbatch), gib(m.activation.block), gib(m.activation.head),
              gib(m.activation.stage_io), m.in_flight, gib(m.activations), gib(m.workspace));
  std::printf("memory (GiB): peak %.2f of %.2f (%s)\n", gib(m.peak), gib(dev.memory_bytes),
              m.peak <= dev.memory_bytes ? "fits" : "does NOT fit");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse_args(argc, argv);
    const Config cfg = load_config(a.config, a.overrides);
    const DeviceSpec dev = device_spec(a.device);
    const StepPrediction p = predict_step(cfg, dev, a.fractions);
    std::printf("# gpu_model: %s on %s, %s, attention %s\n", cfg.source.c_str(), dev.name.c_str(),
                cfg.training.precision.c_str(), cfg.model.attention.c_str());
    for (const std::string& line : assumptions(cfg, a.fractions)) std::printf("# %s\n", line.c_str());
    print_table(p);
    print_memory(p.memory, dev);
    const MemoryBreakdown& m = p.memory;
    std::printf("{\"device\": \"%s\", \"attention\": \"%s\", \"precision\": \"%s\", \"step_ms\": %.3f, "
                "\"tokens_per_s\": %.0f, \"mfu\": %.4f, \"flops_per_token\": %.0f, \"tokens_per_step\": %.0f, "
                "\"memory\": {\"params_fp32\": %.0f, \"grads_fp32\": %.0f, \"adam_moments\": %.0f, "
                "\"weights_bf16\": %.0f, \"activation_per_microbatch\": %.0f, \"block_activation\": %.0f, "
                "\"in_flight\": %.0f, \"activations\": %.0f, \"workspace\": %.0f, \"peak\": %.0f}, "
                "\"device_memory\": %.0f, \"fits\": %s}\n",
                a.device.c_str(), cfg.model.attention.c_str(), cfg.training.precision.c_str(), p.step_ms,
                p.tokens_per_s, p.mfu, p.flops_per_token, p.tokens_per_step, m.params_fp32, m.grads_fp32,
                m.adam_moments, m.weights_bf16, m.activation.per_microbatch, m.activation.block, m.in_flight,
                m.activations, m.workspace, m.peak, dev.memory_bytes, m.peak <= dev.memory_bytes ? "true" : "false");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_model: %s\n", e.what());
    return 1;
  }
  return 0;
}
