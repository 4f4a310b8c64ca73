// OpenBLAS's core against the CPU's features, and the start-up line (blas_setup.h).
// Compiled once, for the baseline ISA.
#include "backend/cpu/blas_setup.h"

#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cpu/cpu_clock.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/cpu_topology.h"
#include "backend/cpu/gemm_library.h"
#include "backend/cpu/packed_weights.h"
#include "core/error.h"
#include "core/faults.h"

namespace pptrain::cpu {

namespace {

// Set beside OPENBLAS_CORETYPE by the re-execution, as "CORE:DETECTED", so the new process
// knows the variable is ours (not the user's) and what OpenBLAS had detected.
constexpr const char* kChosenVar = "PPTRAIN_BLAS_CHOSEN";

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// The value of the first "key : value" line of /proc/cpuinfo, "" if none.
std::string cpuinfo_value(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (colon != std::string::npos && trim(line.substr(0, colon)) == key) return trim(line.substr(colon + 1));
  }
  return "";
}

double max_clock_ghz() {
  std::ifstream sys("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");  // kHz
  double khz = 0;
  if (sys >> khz && khz > 0) return khz / 1e6;
  const std::string mhz = cpuinfo_value("cpu MHz");  // a VM's nominal clock
  return mhz.empty() ? 0 : std::atof(mhz.c_str()) / 1e3;
}

std::string running_core() {
  const char* name = openblas_get_corename();
  return name ? trim(name) : "";
}

bool dynamic_arch() {
  const char* config = openblas_get_config();
  return config && std::strstr(config, "DYNAMIC_ARCH");
}

BlasChoice decide() {
  BlasChoice c;
  c.running = running_core();
  const CpuInfo cpu = read_cpu_info();
  const std::string best = best_blas_core(cpu);
  const char* user = std::getenv("OPENBLAS_CORETYPE");
  const char* chosen = std::getenv(kChosenVar);
  c.below_cpu = blas_core_level(c.running) < blas_core_level(best);
  c.off_cpu = blas_core_level(c.running) != blas_core_level(best);

  // A pass that re-executed set both variables: this process runs what it chose.
  if (user && chosen && std::string(chosen).rfind(std::string(user) + ":", 0) == 0) {
    c.detected = std::string(chosen).substr(std::strlen(user) + 1);
    c.how = cat("chosen by the CPU's features; OpenBLAS detected ", c.detected);
    if (lower(c.running) != lower(user))
      c.how += cat(", and OPENBLAS_CORETYPE=", user, " did not take");
    return c;
  }
  if (user && *user) {
    c.detected = c.running;
    c.how = cat("OPENBLAS_CORETYPE=", user);
    if (c.below_cpu) c.how += cat(", below this CPU's ", best);
    return c;
  }
  const std::optional<std::string> stand_in = Faults::stand_in_from_env("blas_detected");
  c.detected = stand_in ? *stand_in : c.running;
  if (stand_in) {
    c.below_cpu = blas_core_level(c.detected) < blas_core_level(best);
    c.off_cpu = blas_core_level(c.detected) != blas_core_level(best);
  }
  c.how = "as detected";
  if (c.off_cpu && !c.below_cpu)
    c.how = dynamic_arch() ? cat("as detected, not this CPU's ", best)
                           : cat("as built: this OpenBLAS has no DYNAMIC_ARCH to run ", best);
  if (c.below_cpu)
    c.how = dynamic_arch() ? cat("as detected, below this CPU's ", best)
                           : cat("as built: this OpenBLAS has no DYNAMIC_ARCH to run ", best);
  return c;
}

// The command line the process was started with, from /proc/self/cmdline; argv where that
// cannot be read. Not simply argv: started through the dynamic loader
// (`/lib64/ld-linux-x86-64.so.2 [--library-path DIR] pptrain train ...`, as some module and
// conda set-ups do), /proc/self/exe is the loader and main's argv has lost the loader's
// arguments, so re-executing /proc/self/exe with argv would ask the loader to run `train`.
std::vector<std::string> original_command_line(char** argv) {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  for (std::string arg; std::getline(in, arg, '\0');) args.push_back(arg);
  if (args.empty())
    for (char** a = argv; *a; ++a) args.emplace_back(*a);
  return args;
}

}  // namespace

const CpuInfo& read_cpu_info() {
  // Read once: the start-up choice, the start-up line and the benchmark all ask.
  static const CpuInfo info = [] {
    CpuInfo cpu;
    cpu.model_name = cpuinfo_value("model name");
    cpu.amd = cpuinfo_value("vendor_id") == "AuthenticAMD";
    cpu.family = std::atoi(cpuinfo_value("cpu family").c_str());
    cpu.model = std::atoi(cpuinfo_value("model").c_str());
#if defined(__x86_64__)
    // Not on other CPUs: there cpu_runs says the one copy runs, not that the CPU has AVX2 (no
    // OpenBLAS x86 core to choose, no x86 FLOPs per cycle).
    cpu.avx2_fma = cpu_runs(Isa::avx2);
    cpu.avx512 = cpu_runs(Isa::avx512);
    cpu.avx512_bf16 = cpu.avx512 && __builtin_cpu_supports("avx512bf16");
#endif
    cpu.ghz = max_clock_ghz();
    return cpu;
  }();
  return info;
}

int blas_core_level(std::string_view core) {
  const std::string c = lower(core);
  if (c == "skylakex" || c == "cooperlake" || c == "sapphirerapids") return 3;
  if (c == "haswell" || c == "zen") return 2;
  return 1;
}

bool avx512_on_256bit_pipes(const CpuInfo& cpu) { return cpu.avx512 && cpu.amd && cpu.family == 0x19; }

std::string best_blas_core(const CpuInfo& cpu) {
  // Zen 4 splits each 512-bit FMA over its two 256-bit pipes: the AVX-512 kernels get no
  // more FMAs a cycle than the AVX2 ones, and OpenBLAS 0.3.21's Haswell kernels ran faster
  // there than the SkylakeX/Cooperlake ones it detects (docs/PERFORMANCE.md, the Zen 4 VM:
  // 7% less time on the pp 2 model's linear shapes, 3-4% a GPT-2 124M step).
  if (cpu.avx512 && !avx512_on_256bit_pipes(cpu)) return cpu.avx512_bf16 ? "Cooperlake" : "SkylakeX";
  if (cpu.avx2_fma) return cpu.amd && !cpu.avx512 ? "Zen" : "Haswell";
  return "";
}

int fp32_flops_per_cycle(const CpuInfo& cpu) {
  if (cpu.avx512) return avx512_on_256bit_pipes(cpu) ? 32 : 64;
  if (cpu.avx2_fma) return 32;
  return 8;
}

FmaProbe probe_fma(Isa isa, int pairs, int reps) {
  std::vector<FmaProbe> runs(size_t(std::max(pairs, 1)));
  for (FmaProbe& r : runs) {
    r.ghz = chain_clock_ghz(ChainOp::add, 200000, reps);
    r.gflops = fma_gflops(isa, 300000, reps);
  }
  auto ratio = [](const FmaProbe& r) { return r.ghz > 0 ? r.gflops / r.ghz : 0.0; };
  const auto median = runs.begin() + runs.size() / 2;
  std::nth_element(runs.begin(), median, runs.end(),
                   [&](const FmaProbe& a, const FmaProbe& b) { return ratio(a) < ratio(b); });
  return *median;
}

int flops_per_cycle_from_probe(int table, bool probe_has_table_vectors, double ghz, double gflops) {
  if (!probe_has_table_vectors || ghz <= 0 || gflops <= 0) return table;
  return gflops / ghz < 0.6 * table ? table / 2 : table;
}

int peak_flops_per_cycle() {
  static const int per_cycle = [] {
    const CpuInfo& cpu = read_cpu_info();
    const int table = fp32_flops_per_cycle(cpu);
    if (!cpu.avx2_fma) return table;  // no copy of the loops has vectors to measure with
    // The widest copy this binary holds and this CPU runs. A narrower one than the CPU's
    // widest vectors (a build without the AVX-512 copy on an AVX-512 CPU) measures two
    // 256-bit pipes where a Xeon has one or two 512-bit ones: it cannot tell, and the table stands.
    const Isa probed = choose_isa(nullptr);
    const bool table_vectors = !cpu.avx512 || probed == Isa::avx512;
    double ghz = 0, gflops = 0;  // not measured where they could not change the table
    if (table_vectors) {
      // Five pairs of single runs (~5 ms in all, every start-up).
      const FmaProbe probe = probe_fma(probed, 5, 1);
      ghz = probe.ghz;
      gflops = probe.gflops;
      if (const std::optional<std::string> factor = Faults::stand_in_from_env("fma_rate")) {
        try {
          gflops *= std::stod(*factor);
        } catch (const std::exception&) {  // not a number: the stand-in acts nowhere
        }
      }
    }
    return flops_per_cycle_from_probe(table, table_vectors, ghz, gflops);
  }();
  return per_cycle;
}

const BlasChoice& blas_choice() {
  static const BlasChoice choice = decide();
  return choice;
}

const BlasChoice& ensure_blas_core(char** argv) {
  const BlasChoice& choice = blas_choice();
  const bool ours_already = std::getenv(kChosenVar) != nullptr;
  if (choice.off_cpu && choice.how.rfind("as detected", 0) == 0 && !ours_already && dynamic_arch()) {
    const std::string best = best_blas_core(read_cpu_info());
    setenv("OPENBLAS_CORETYPE", best.c_str(), 1);
    setenv(kChosenVar, cat(best, ":", choice.detected).c_str(), 1);
    std::vector<std::string> args = original_command_line(argv);
    std::vector<char*> exec_argv;
    for (std::string& a : args) exec_argv.push_back(a.data());
    exec_argv.push_back(nullptr);
    std::fflush(nullptr);
    execv("/proc/self/exe", exec_argv.data());
    // Only on failure: go on with what OpenBLAS took, and say so.
    std::fprintf(stderr, "pptrain: warning: cannot re-execute with OPENBLAS_CORETYPE=%s (%s); running %s\n",
                 best.c_str(), std::strerror(errno), choice.running.c_str());
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv(kChosenVar);
  }
  return choice;
}

std::string blas_version() {
  const char* config = openblas_get_config();
  if (!config) return "OpenBLAS";
  std::string s = config;
  const size_t space = s.find(' ', s.find(' ') + 1);
  return space == std::string::npos ? s : s.substr(0, space);
}

double peak_clock_ghz(const CpuInfo& cpu, int threads) {
  const double measured = measured_clock_ghz(threads);
  return measured > 0 ? measured : cpu.ghz;
}

double peak_gflops_estimate(const CpuInfo& cpu, int threads) {
  return cores_for_threads(threads) * peak_clock_ghz(cpu, threads) * peak_flops_per_cycle();
}

double measure_sgemm_gflops(int n, int reps) {
  std::vector<float> a(size_t(n) * n, 1.0f), b(size_t(n) * n, 0.5f), c(size_t(n) * n);
  auto run = [&] { sgemm({false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n}); };
  run();
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * n * n * double(n) / best / 1e9;
}

std::string cpu_summary_line(bool measure) {
  const BlasChoice& blas = blas_choice();
  const CpuInfo cpu = read_cpu_info();
  const int threads = omp_get_max_threads();
  const char* vectors = cpu.avx512 ? "AVX-512" : cpu.avx2_fma ? "AVX2" : "no AVX2";
  const char* isa_var = std::getenv("PPTRAIN_CPU_ISA");
  // The copy named avx2 is the build's baseline: on a CPU without AVX2 (a build for an older
  // -march, or cpu_guard.cpp would have stopped the process), or in a build for an -march
  // below AVX2 and FMA, it is that baseline's code.
  const char* loops = process_isa() == Isa::avx2 && (!cpu_runs(Isa::avx2) || !baseline_copy_is_avx2())
                          ? "baseline"
                          : isa_name(process_isa());
  const int cores = cores_for_threads(threads);
  // Threads on SMT siblings share their cores' FMA units: said, and the peak counts cores.
  const std::string smt = cores < threads ? cat(" on ", cores, cores == 1 ? " core" : " cores", " (SMT)") : "";
  std::string line = cat("cpu: ", cpu.model_name.empty() ? "unknown CPU" : cpu.model_name, ", ", threads,
                         threads == 1 ? " thread" : " threads", smt, ", ", vectors, " | loops ", loops,
                         isa_var && *isa_var ? cat(" (PPTRAIN_CPU_ISA=", isa_var, ")") : std::string(), " | ",
                         blas_version(), " ", blas.running, " (", blas.how, ")");
  // Another GEMM library under the linear layers (gemm_library.h): named, and the rate below is
  // its.
  const GemmLibrary gemm = process_gemm_library();
  if (gemm != GemmLibrary::openblas)
    line += cat(" | GEMM ", gemm_library_version(gemm), " (PPTRAIN_CPU_GEMM=", gemm_library_name(gemm), ")");
  // The linear layers' weights packed for oneDNN's matmul (packed_weights.h), or why not.
  line += PackedWeights::why_not().empty()
              ? cat(" | weights packed from ", PackedWeights::kMinRows, " rows a step: ", PackedWeights::description())
              : cat(" | weights not packed: ", PackedWeights::why_not());
  if (!measure) return line;
  char rate[160];
  // One thread reaches its SGEMM rate at 512^3 (the product's blocks fill one core's caches)
  // in an eighth of the time of 1024^3, which it needs to keep several threads busy: every
  // one-thread rank of a job (and each of the test suite's thousand runs) pays it once.
  const int n = threads == 1 ? 512 : 1024;
  const double gflops = measure_sgemm_gflops(n, 3);
  const int per_cycle = peak_flops_per_cycle();
  const double ghz = peak_clock_ghz(cpu, threads);
  if (ghz > 0) {
    // A measured clock is the one the cores run at, boost included, so a good kernel comes
    // close to 1.0 and a fallback one shows as a small fraction. A reported clock (where the
    // chains cannot run: sysfs's maximum, or a VM's nominal clock, which boost exceeds) may
    // let a good kernel pass 1.0.
    const double peak = peak_gflops_estimate(cpu, threads);
    std::snprintf(rate, sizeof rate,
                  " | sgemm %d^3 %.0f GFLOP/s, %.2f of the peak estimate %.0f"
                  " (%d x %.1f GHz %s x %d FLOP/cycle)",
                  n, gflops, gflops / peak, peak, cores, ghz,
                  measured_clock_ghz(threads) > 0 ? "measured" : "reported", per_cycle);
  } else {
    std::snprintf(rate, sizeof rate, " | sgemm %d^3 %.0f GFLOP/s (clock unknown: no peak estimate)", n, gflops);
  }
  return line + rate;
}

}  // namespace pptrain::cpu
