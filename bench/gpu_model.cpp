// gpu_model CONFIG [section.key=value ...] --device h100|h200|a100 [--gemm-fraction F]
//           [--small-gemm-fraction F] [--flash-fraction F] [--hbm-fraction F]
//           [--calibration FILE] [--measured PROFILE] [--fit PROFILE --write-calibration OUT]
//           [--write-profile OUT [--link-gbs G]]
//
// Predicts one training step of CONFIG's model (GPT-2 or the Llama family) on one GPU
// (bench/perf_model: the step's op calls, each at its roofline) and its memory. Prints the
// assumptions ('#' lines), one table line per op role, the memory breakdown, and last one
// JSON line:
//   {"device", "attention", "precision", "step_ms", "tokens_per_s", "mfu", "flops_per_token",
//    "memory": {...bytes...}, "fits"[, "vs_profile": {...}]}
// --calibration FILE: each op an efficiency measured before (the file --fit writes) in place
// of the stated fractions. --measured PROFILE (logging.op_profile_file's JSON of a run of
// CONFIG): the prediction beside it op by op, each op of >= 1% of the step within 15%, the
// step within 10% ("vs_profile" in the JSON line). --fit PROFILE: the efficiencies of that
// run's ops, written to --write-calibration OUT. --write-profile OUT: the prediction as the
// cost profile `pptrain profile` would measure (perf_model.h, predicted_cost_profile), for
// `pptrain plan CONFIG --ranks N --profile OUT` and parallel.profile; --link-gbs: the GB/s
// its transfers and all-reduces assume between GPUs (default 100, stated, not measured).
// Host-only: runs anywhere (scripts/gpu_check.sh prints it beside the measurement).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "core/json.h"
#include "perf_model/perf_model.h"

using namespace pptrain;
using namespace pptrain::bench;

namespace {

struct Args {
  std::string config, device, calibration, measured, fit, write_calibration, write_profile;
  LinkSpec link;
  std::vector<std::string> overrides;
  Fractions fractions;
};

double parse_fraction(const std::string& flag, const char* text) {
  char* end = nullptr;
  const double x = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(x > 0 && x <= 1)) fail(flag, ": expected a fraction in (0, 1], got '", text, "'");
  return x;
}

double parse_positive(const std::string& flag, const char* text) {
  char* end = nullptr;
  const double x = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(x > 0 && x < 1e9)) fail(flag, ": expected a number > 0, got '", text, "'");
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
    else if (s == "--calibration") a.calibration = argv[++i];
    else if (s == "--measured") a.measured = argv[++i];
    else if (s == "--fit") a.fit = argv[++i];
    else if (s == "--write-calibration") a.write_calibration = argv[++i];
    else if (s == "--write-profile") a.write_profile = argv[++i];
    else if (s == "--link-gbs") a.link.gbytes_per_s = parse_positive(s, argv[++i]);
    else if (s.rfind("--", 0) == 0) fail("unknown option '", s, "'");
    else if (a.config.empty()) a.config = s;
    else a.overrides.push_back(s);
  }
  if (a.config.empty()) fail("no CONFIG given");
  if (a.device.empty()) fail("--device h100|h200|a100 is required");
  if (a.fit.empty() != a.write_calibration.empty()) fail("--fit PROFILE and --write-calibration OUT go together");
  return a;
}

double gib(double bytes) { return bytes / double(1 << 30); }

void print_table(const StepPrediction& p) {
  std::printf("%-48s %-34s %7s %12s %12s %10s  %s\n", "op (per step)", "backend op", "count", "GFLOP", "MB", "ms",
              "bound");
  for (const OpLine& o : p.ops)
    std::printf("%-48s %-34s %7d %12.1f %12.1f %10.3f  %s\n", o.name.c_str(), o.op.c_str(), o.count, o.flops / 1e9,
                o.bytes / 1e6, o.ms, o.compute_bound ? "compute" : "memory");
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

// The comparison's table, and its JSON object.
std::string compare(const StepPrediction& p, const MeasuredProfile& m) {
  const ProfileComparison c = compare_with_profile(p, m);
  std::printf("against %s (%s): op, calls predicted/measured, ms predicted/measured, ratio, share of the step\n",
              m.source.c_str(), m.backend.c_str());
  std::string ops;
  for (const OpComparison& o : c.ops) {
    const double ratio = o.measured_ms > 0 ? o.predicted_ms / o.measured_ms : 0;
    std::printf("  %-36s %6.0f %6.0f %10.3f %10.3f %7.2f %6.1f%%  %s%s\n", o.op.c_str(), o.predicted_calls,
                o.measured_calls, o.predicted_ms, o.measured_ms, ratio, 100 * o.share,
                !o.checked ? "" : o.within ? "within 15%" : "OFF", o.work_agrees ? "" : " (other FLOPs/bytes)");
    ops += std::string(ops.empty() ? "" : ", ") + "{\"op\": " + json::quote(o.op) +
           ", \"predicted_ms\": " + json::number(o.predicted_ms) + ", \"measured_ms\": " + json::number(o.measured_ms) +
           ", \"share\": " + json::number(o.share) + ", \"checked\": " + (o.checked ? "true" : "false") +
           ", \"within\": " + (o.within ? "true" : "false") + ", \"work_agrees\": " +
           (o.work_agrees ? "true" : "false") + "}";
  }
  std::printf("  step: predicted %.3f ms, measured %.3f ms (ratio %.3f): %s; ops %s; calls %s; FLOPs and bytes %s\n",
              c.predicted_step_ms, c.measured_step_ms,
              c.measured_step_ms > 0 ? c.predicted_step_ms / c.measured_step_ms : 0.0,
              c.step_within ? "within 10%" : "OFF", c.ops_within ? "all within 15%" : "NOT all within 15%",
              c.calls_agree ? "agree" : "DIFFER (not the same program)", c.work_agrees ? "agree" : "DIFFER");
  return "{\"profile\": " + json::quote(m.source) + ", \"predicted_step_ms\": " + json::number(c.predicted_step_ms) +
         ", \"measured_step_ms\": " + json::number(c.measured_step_ms) +
         ", \"step_within\": " + (c.step_within ? "true" : "false") +
         ", \"ops_within\": " + (c.ops_within ? "true" : "false") +
         ", \"calls_agree\": " + (c.calls_agree ? "true" : "false") +
         ", \"work_agrees\": " + (c.work_agrees ? "true" : "false") + ", \"ops\": [" + ops + "]}";
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse_args(argc, argv);
    const Config cfg = load_config(a.config, a.overrides);
    const DeviceSpec dev = device_spec(a.device);
    std::optional<Calibration> cal;
    if (!a.calibration.empty()) cal = read_calibration(a.calibration);
    if (!a.fit.empty()) {
      // The efficiencies are the uncalibrated prediction's rooflines over the measured times.
      const Calibration fitted = fit_calibration(predict_step(cfg, dev, a.fractions), read_op_profile(a.fit),
                                                 a.fit + " (" + cfg.source + ", " + a.device + ")");
      const std::string json = calibration_json(fitted);
      std::ofstream out(a.write_calibration);
      out << json << "\n";
      if (!out.flush()) fail(a.write_calibration, ": cannot write the calibration");
      std::printf("%s\n", json.c_str());
      return 0;
    }
    std::optional<MeasuredProfile> measured;  // read before anything is printed: a bad file is one line
    if (!a.measured.empty()) measured = read_op_profile(a.measured);
    const Calibration* c = cal ? &*cal : nullptr;
    const StepPrediction p = predict_step(cfg, dev, a.fractions, c);
    if (!a.write_profile.empty()) {
      write_cost_profile(predicted_cost_profile(cfg, dev, a.fractions, c, a.link), a.write_profile);
      std::printf("# cost profile for the planner written to %s (%.0f GB/s between GPUs): pptrain plan %s "
                  "--ranks N --profile %s\n",
                  a.write_profile.c_str(), a.link.gbytes_per_s, cfg.source.c_str(), a.write_profile.c_str());
    }
    std::printf("# gpu_model: %s on %s, %s, attention %s\n", cfg.source.c_str(), dev.name.c_str(),
                cfg.training.precision.c_str(), cfg.model.attention.c_str());
    for (const std::string& line : assumptions(cfg, a.fractions, c)) std::printf("# %s\n", line.c_str());
    print_table(p);
    print_memory(p.memory, dev);
    const std::string vs_profile = !measured ? "" : ", \"vs_profile\": " + compare(p, *measured);
    const MemoryBreakdown& m = p.memory;
    std::printf("{\"device\": \"%s\", \"attention\": \"%s\", \"precision\": \"%s\", \"step_ms\": %.3f, "
                "\"tokens_per_s\": %.0f, \"mfu\": %.4f, \"flops_per_token\": %.0f, \"tokens_per_step\": %.0f, "
                "\"memory\": {\"params_fp32\": %.0f, \"grads_fp32\": %.0f, \"adam_moments\": %.0f, "
                "\"weights_bf16\": %.0f, \"activation_per_microbatch\": %.0f, \"block_activation\": %.0f, "
                "\"in_flight\": %.0f, \"activations\": %.0f, \"workspace\": %.0f, \"peak\": %.0f}, "
                "\"device_memory\": %.0f, \"fits\": %s%s}\n",
                a.device.c_str(), cfg.model.attention.c_str(), cfg.training.precision.c_str(), p.step_ms,
                p.tokens_per_s, p.mfu, p.flops_per_token, p.tokens_per_step, m.params_fp32, m.grads_fp32,
                m.adam_moments, m.weights_bf16, m.activation.per_microbatch, m.activation.block, m.in_flight,
                m.activations, m.workspace, m.peak, dev.memory_bytes, m.peak <= dev.memory_bytes ? "true" : "false",
                vs_profile.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_model: %s\n", e.what());
    return 1;
  }
  return 0;
}
