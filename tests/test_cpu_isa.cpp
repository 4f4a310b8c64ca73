// The cpu backend's copies per instruction set (backend/cpu/isa.h) and OpenBLAS's core
// (backend/cpu/blas_setup.h): which copy and core a process takes; the copies give the
// same bits where they do the same arithmetic, and every cpu op test passes on each copy;
// no AVX-512 code sits outside the AVX-512 copy; a fallback core is replaced by the one the
// CPU's features allow, and a user's OPENBLAS_CORETYPE is kept; the peak estimate's clock is
// measured in cycles; ranks that share CPUs divide them among their OpenMP threads unless
// the user set OMP_NUM_THREADS.
#include <elf.h>
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/blas_setup.h"
#include "backend/cpu/cpu_topology.h"
#include "backend/cpu/cpu_clock.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/ops.h"
#include "parallel/mpi_session.h"
#include "support/cpu_ops_util.h"
#include "support/error_of.h"
#include "support/markov_model.h"
#include "support/test_util.h"

namespace pptrain {
namespace {

using cpu::Isa;
using testing::error_of;
using testing::random_floats;
using testing::run_command;

bool both_copies_run() {
  return cpu::compiled_isas().size() == 2 && cpu::cpu_runs(Isa::avx512);
}

TEST(CpuIsa, AutoTakesTheWidestCopyTheCpuRuns) {
  const Isa expected = both_copies_run() ? Isa::avx512 : Isa::avx2;
  EXPECT_EQ(cpu::choose_isa(nullptr), expected);
  EXPECT_EQ(cpu::choose_isa(""), expected);
  EXPECT_EQ(cpu::choose_isa("auto"), expected);
  EXPECT_EQ(cpu::choose_isa("avx2"), Isa::avx2);  // every x86-64-v3 CPU runs the baseline
  if (both_copies_run()) {
    EXPECT_EQ(cpu::choose_isa("avx512"), Isa::avx512);
  }
}

TEST(CpuIsa, UnknownOrUnrunnableNamesFailInOneLine) {
  EXPECT_EQ(error_of([] { cpu::choose_isa("sse4"); }), "PPTRAIN_CPU_ISA=sse4: expected auto, avx2 or avx512");
  if (!cpu::cpu_runs(Isa::avx512)) {
    EXPECT_EQ(error_of([] { cpu::choose_isa("avx512"); }),
              "PPTRAIN_CPU_ISA=avx512: this CPU does not run avx512 code");
  }
}

// The pairs of outputs the same call of both copies wrote.
struct Outputs {
  std::vector<std::vector<float>> per_copy[2];
};

// Runs `call` (which fills its output vectors) on each copy.
Outputs on_each_copy(const std::function<std::vector<std::vector<float>>(Ops&)>& call) {
  Outputs out;
  int i = 0;
  for (Isa isa : {Isa::avx2, Isa::avx512}) {
    std::unique_ptr<Ops> ops = cpu::make_ops(isa);
    out.per_copy[i++] = call(*ops);
  }
  return out;
}

// Bitwise equality, counting the differing elements.
size_t differing(const Outputs& o) {
  size_t n = 0;
  for (size_t t = 0; t < o.per_copy[0].size(); ++t)
    for (size_t i = 0; i < o.per_copy[0][t].size(); ++i)
      n += std::memcmp(&o.per_copy[0][t][i], &o.per_copy[1][t][i], sizeof(float)) != 0;
  return n;
}

// The elementwise ops do the same operations on each element, in the same order, whatever
// the vector width (GCC contracts a·b + c into one FMA alike for scalars, 256- and 512-bit
// vectors), so their results must agree bit for bit. 1000 + 7 elements: the remainder
// after the vectors is covered too.
TEST(CpuIsa, ElementwiseOpsAgreeBitForBitBetweenCopies) {
  if (!both_copies_run()) GTEST_SKIP() << "this CPU or build has one copy only";
  constexpr size_t n = 1007;
  const std::vector<float> x = random_floats(n, 1, -6.0f, 6.0f), y = random_floats(n, 2), z = random_floats(n, 3);
  Outputs o = on_each_copy([&](Ops& ops) {
    std::vector<float> g(n), dg(n), s(n), dgate(n), dup(n), sum(n), sc = y, ab = y;
    ops.gelu_forward(g.data(), x.data(), n);
    ops.gelu_backward(dg.data(), y.data(), x.data(), n);
    ops.swiglu_forward(s.data(), x.data(), y.data(), n);
    ops.swiglu_backward_input(dgate.data(), dup.data(), z.data(), x.data(), y.data(), n);
    ops.add(sum.data(), x.data(), y.data(), n);
    ops.scale(sc.data(), 0.37f, n);
    ops.add_bias(ab.data(), z.data(), 19, 53);  // 19 x 53 = 1007
    std::vector<float> p = x, m = y, v(n), p_out(n), m_out(n), v_out(n);
    for (size_t i = 0; i < n; ++i) v[i] = z[i] * z[i];
    ops.adamw(p_out.data(), m_out.data(), v_out.data(), nullptr, p.data(), y.data(), m.data(), v.data(), n, 0.8f,
              1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 7);
    return std::vector<std::vector<float>>{g, dg, s, dgate, dup, sum, sc, ab, p_out, m_out, v_out};
  });
  EXPECT_EQ(differing(o), 0u);
}

// The gradient norm's sum of squares puts element i of a block in lane i mod 16 at either
// width and adds the lanes in order, so both copies give the same bits. The size covers
// groups of 4 blocks of 2^14, blocks left after the groups, a short last block and a
// remainder after the last 16 lanes.
TEST(CpuIsa, SumSquaresAgreesBitForBitBetweenCopies) {
  if (!both_copies_run()) GTEST_SKIP() << "this CPU or build has one copy only";
  const std::vector<float> x = random_floats(size_t(4 * 3 + 2) * (1 << 14) + 1007, 4, -3.0f, 3.0f);
  double sums[2];
  int i = 0;
  for (Isa isa : {Isa::avx2, Isa::avx512}) sums[i++] = cpu::make_ops(isa)->sum_squares(x.data(), x.size());
  EXPECT_EQ(std::memcmp(&sums[0], &sums[1], sizeof(double)), 0) << sums[0] << " vs " << sums[1];
}

// Every cpu op test (fp64 references, derived bounds, finite differences, planted bugs)
// passes on the copy this process does not take by default too.
TEST(CpuIsa, EveryCpuOpTestPassesOnTheOtherCopy) {
  if (!both_copies_run()) GTEST_SKIP() << "this CPU or build has one copy only";
  const std::string dir = testing::pptrain_bin().substr(0, testing::pptrain_bin().rfind('/')) + "/tests/";
  for (const char* test : {"test_cpu_ops", "test_cpu_ops_elementwise", "test_cpu_ops_adamw", "test_cpu_ops_llama",
                           "test_cpu_flash_attention"}) {
    auto r = run_command("PPTRAIN_CPU_ISA=avx2 " + dir + test + " --gtest_brief=1", 600);
    EXPECT_EQ(r.exit_code, 0) << test << " on the avx2 copy:\n" << r.output;
  }
}

// The functions of an object or binary with AVX-512 instructions, by (mangled) symbol,
// from objdump's disassembly: an instruction whose first byte is 0x62, the EVEX prefix
// that every AVX-512 instruction and no other carries in 64-bit code (a line with no
// mnemonic continues the previous instruction's bytes).
std::vector<std::string> functions_with_avx512(const std::string& file) {
  auto r = run_command("objdump -d " + file +
                           " | awk -F'\\t' '/^[0-9a-f]+ <.*>:$/ {f = $0; sub(/^[0-9a-f]+ /, \"\", f)} "
                           "$3 != \"\" && $2 ~ /^62 / {if (!(f in seen)) {seen[f]; print f}}'",
                       300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> names;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) names.push_back(line);
  return names;
}

// Per function of an object: how many of its instructions match the awk regular expression
// `pattern`, from objdump's disassembly with demangled names.
std::map<std::string, int> instruction_uses(const std::string& object, const std::string& pattern) {
  auto r = run_command("objdump -d --no-show-raw-insn -C " + object +
                           " | awk '/^[0-9a-f]+ <.*>:$/ {f = $0; sub(/^[0-9a-f]+ /, \"\", f)} /" + pattern +
                           "/ {c[f]++} END {for (k in c) print c[k] \"\\t\" k}'",
                       300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::map<std::string, int> uses;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);)
    if (const size_t tab = line.find('\t'); tab != std::string::npos) uses[line.substr(tab + 1)] = std::stoi(line);
  return uses;
}

// How many of each function's instructions use a `reg` register ("ymm", "zmm").
std::map<std::string, int> vector_register_uses(const std::string& object, const std::string& reg) {
  return instruction_uses(object, "%" + reg);
}

// The exp-based loops (GELU, SwiGLU, the cross-entropy's softmax, attention's softmax) run
// on full vectors in each copy: 8 floats a ymm register in the AVX2 copy, 16 a zmm in the
// AVX-512 one. They are written branch-free for that, but GCC vectorises them only when it
// may evaluate the float selects speculatively (-fno-trapping-math, the Makefile's
// FP_FLAGS); without it each copy ran them one element at a time (GELU 7 ns an element)
// and the copies' tests still passed. A loop counts as vectorised when its function uses
// the copy's vector registers in at least 8 instructions (scalar code uses none).
TEST(CpuIsa, TheExpLoopsRunOnFullVectorsInEachCopy) {
  const std::string bin = testing::pptrain_bin(), cpu = bin.substr(0, bin.rfind('/')) + "/obj/src/backend/cpu/";
  const std::vector<std::pair<std::string, std::string>> loops = {
      {"elementwise", "gelu_forward"}, {"elementwise", "gelu_backward"}, {"swiglu", "swiglu_forward"},
      {"cross_entropy", "ce_sumexp_target"}, {"cross_entropy", "ce_backward"}, {"cross_entropy", "ce_fused"},
      {"attention", "::gqa_attention_forward"}};
  std::vector<std::pair<std::string, std::string>> copies = {{"", "ymm"}};
  if (cpu::compiled_isas().size() == 2) copies.push_back({".avx512", "zmm"});
  for (const auto& [suffix, reg] : copies)
    for (const auto& [file, function] : loops) {
      int most = 0;
      for (const auto& [name, count] : vector_register_uses(cpu + file + suffix + ".o", reg))
        if (name.find(function + "(") != std::string::npos) most = std::max(most, count);
      EXPECT_GE(most, 8) << function << " in " << file << suffix << ".o uses %" << reg << " in " << most
                         << " instructions: not vectorised (built without -fno-trapping-math?)";
    }
}

// AdamW's loop (a square root and a division a parameter) runs on full vectors in each copy:
// packed square roots (vsqrtps on ymm or zmm registers). With errno semantics for math
// functions GCC keeps std::sqrt scalar (vsqrtss, and a call to sqrtf for a negative input),
// so the loop ran one parameter at a time at a third of the memory bandwidth; the Makefile's
// FP_FLAGS (-fno-math-errno) lets it vectorise. Counted in the functions of adamw.o named
// CpuOps::adamw (its OpenMP region included).
TEST(CpuIsa, AdamwRunsOnFullVectorsInEachCopy) {
  const std::string bin = testing::pptrain_bin(), cpu = bin.substr(0, bin.rfind('/')) + "/obj/src/backend/cpu/";
  std::vector<std::pair<std::string, std::string>> copies = {{"", "ymm"}};
  if (cpu::compiled_isas().size() == 2) copies.push_back({".avx512", "zmm"});
  for (const auto& [suffix, reg] : copies) {
    int packed = 0;
    for (const auto& [name, count] : instruction_uses(cpu + "adamw" + suffix + ".o", "vsqrtps.*%" + reg))
      if (name.find("CpuOps::adamw(") != std::string::npos) packed += count;
    EXPECT_GE(packed, 1) << "CpuOps::adamw in adamw" << suffix << ".o has no vsqrtps on %" << reg
                         << ": its loop is scalar (built without -fno-math-errno?)";
  }
}

// The AVX-512 code is its copy's and nowhere else: a function outside cpu::avx512 with
// AVX-512 instructions could run on every CPU and stop an AVX2-only one with SIGILL. The
// danger is an inline function or template that a copy's file emits for AVX-512 (a header
// included after isa_begin.h): the linker keeps one copy of it for the whole program, and
// which one depends on the link order, so the objects are checked as well as the binary.
// Allowed: cpu::avx512 ("6avx512" in the mangled name, OpenMP's outlined regions
// included) and the AVX-512 variants of `omp declare simd` functions (_ZGVe..., called only
// from AVX-512 loops). And the copy really is AVX-512: its GELU has AVX-512 instructions.
TEST(CpuIsa, NoAvx512CodeOutsideTheAvx512Copy) {
  if (cpu::compiled_isas().size() != 2) GTEST_SKIP() << "this build has no AVX-512 copy";
#if defined(__AVX512F__)
  GTEST_SKIP() << "the build's baseline has AVX-512 itself (ARCH=native on an AVX-512 machine?)";
#endif
  const std::string bin = testing::pptrain_bin(), build = bin.substr(0, bin.rfind('/'));
  for (const std::string& file : {bin, build + "/obj/src/backend/cpu/*.avx512.o"}) {
    bool copy_gelu = false;
    std::string outside;
    for (const std::string& f : functions_with_avx512(file)) {
      const bool in_copy = f.find("6avx512") != std::string::npos, simd_clone = f.rfind("<_ZGVe", 0) == 0;
      if (!in_copy && !simd_clone) outside += f + "\n";
      copy_gelu = copy_gelu || (in_copy && f.find("gelu_forward") != std::string::npos);
    }
    EXPECT_EQ(outside, "") << "AVX-512 outside cpu::avx512 in " << file;
    EXPECT_TRUE(copy_gelu) << "the avx512 copy's gelu_forward has no AVX-512 instruction in " << file
                           << ": compiled for AVX2?";
  }
}

// --- OpenBLAS's core --------------------------------------------------------------------

TEST(BlasCore, LevelsAndTheBestCoreFollowTheFeatures) {
  EXPECT_EQ(cpu::blas_core_level("Prescott"), 1);
  EXPECT_EQ(cpu::blas_core_level("Sandybridge"), 1);
  EXPECT_EQ(cpu::blas_core_level("Haswell"), 2);
  EXPECT_EQ(cpu::blas_core_level("ZEN"), 2);
  EXPECT_EQ(cpu::blas_core_level("SkylakeX"), 3);
  EXPECT_EQ(cpu::blas_core_level("Cooperlake"), 3);
  cpu::CpuInfo c;
  EXPECT_EQ(cpu::best_blas_core(c), "");
  c.avx2_fma = true;
  EXPECT_EQ(cpu::best_blas_core(c), "Haswell");
  c.amd = true;
  EXPECT_EQ(cpu::best_blas_core(c), "Zen");
  c.avx512 = true;
  EXPECT_EQ(cpu::best_blas_core(c), "SkylakeX");
  c.avx512_bf16 = true;
  EXPECT_EQ(cpu::best_blas_core(c), "Cooperlake");
  EXPECT_EQ(cpu::fp32_flops_per_cycle(c), 64);
  c.family = 0x1A;  // Zen 5: full-width AVX-512
  EXPECT_EQ(cpu::fp32_flops_per_cycle(c), 64);
  EXPECT_EQ(cpu::best_blas_core(c), "Cooperlake");
  c.family = 0x19;  // Zen 4: 512-bit FMAs on 256-bit pipes, and OpenBLAS's AVX2 kernels
  EXPECT_EQ(cpu::fp32_flops_per_cycle(c), 32);
  EXPECT_EQ(cpu::best_blas_core(c), "Haswell");
  c.avx512 = c.avx512_bf16 = false;  // Zen 3
  EXPECT_EQ(cpu::best_blas_core(c), "Zen");
  c.avx512 = true;
  c.amd = false;  // an Intel CPU of display family 0x19 does not exist; the vendor decides
  EXPECT_EQ(cpu::fp32_flops_per_cycle(c), 64);
  EXPECT_EQ(cpu::best_blas_core(c), "SkylakeX");
}

std::string version_cpu_line(const std::string& env) {
  auto r = run_command(env + " " + testing::pptrain_bin() + " --version 2>&1", 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const size_t at = r.output.find("cpu: ");
  return at == std::string::npos ? r.output : r.output.substr(at, r.output.find('\n', at) - at);
}

// Whether the start-up line's OpenBLAS field ("OpenBLAS 0.3.21 SkylakeX (as detected)") names
// a core of `best`'s level, as detected.
bool same_level_as_detected(const std::string& line, const std::string& best) {
  const size_t at = line.find("OpenBLAS ");
  if (at == std::string::npos) return false;
  std::istringstream field(line.substr(at));
  std::string name, version, core, how;
  field >> name >> version >> core >> how;
  return how == "(as" && line.find(core + " (as detected)") != std::string::npos &&
         cpu::blas_core_level(core) == cpu::blas_core_level(best);
}

// With a stand-in for the detected core (planted fault blas_detected:Prescott, as OpenBLAS
// on a CPU newer than its tables), the start-up re-executes with the core the CPU's
// features allow, and the one line says so; a user's OPENBLAS_CORETYPE wins, even below.
TEST(BlasCore, AFallbackCoreIsReplacedByTheFeaturesChoiceAndTheUsersIsKept) {
  const std::string best = cpu::best_blas_core(cpu::read_cpu_info());
  if (best.empty()) GTEST_SKIP() << "a CPU without AVX2";
  const std::string chosen = version_cpu_line("PPTRAIN_FAULTS=blas_detected:Prescott");
  EXPECT_NE(chosen.find(" " + best + " (chosen by the CPU's features; OpenBLAS detected Prescott)"),
            std::string::npos)
      << chosen;
  const std::string user = version_cpu_line("OPENBLAS_CORETYPE=Prescott");
  EXPECT_NE(user.find(" Prescott (OPENBLAS_CORETYPE=Prescott, below this CPU's " + best + ")"), std::string::npos)
      << user;
  // A core above the CPU's choice (OpenBLAS's AVX-512 kernels on a Zen 4, whose 256-bit pipes
  // run the AVX2 ones faster) is replaced too. Checkable where the choice is an AVX2 core.
  if (cpu::blas_core_level(best) == 2) {
    const std::string above = version_cpu_line("PPTRAIN_FAULTS=blas_detected:SkylakeX");
    EXPECT_NE(above.find(" " + best + " (chosen by the CPU's features; OpenBLAS detected SkylakeX)"),
              std::string::npos)
        << above;
  }
  // Without either, this machine's own detection: a core of the CPU's level as detected
  // (OpenBLAS goes by the CPU's model number: a VM that reports a Rocket Lake's model with
  // AVX-512 BF16 gets SkylakeX where the features say Cooperlake; their SGEMM kernels are
  // the same, and a core of the same level is not re-executed), or the CPU's core chosen in a
  // re-execution (Zen 4, or a CPU newer than OpenBLAS's tables), or the line says it is not.
  const std::string plain = version_cpu_line("");
  EXPECT_TRUE(same_level_as_detected(plain, best) ||
              plain.find(" " + best + " (chosen by the CPU's features") != std::string::npos ||
              plain.find("this CPU's " + best) != std::string::npos)
      << plain;
}

// The training tests' Markov model with 2 blocks and 2 heads (one block per stage at pp 2),
// `parallel` plus 2 microbatches, `steps` steps, a small corpus.
testing::MarkovModel tiny_pp_model(const std::string& parallel, int steps) {
  testing::MarkovModel m;
  m.n_layer = 2;
  m.n_head = 2;
  m.parallel = parallel + ", microbatches: 2";
  m.training = "steps: " + std::to_string(steps) + ", warmup_steps: 0";
  m.corpus_tokens = 6000;
  return m;
}

// Every step's "| loss X" of a training's output, in order, ';'-separated.
std::string losses(const std::string& out) {
  std::string l;
  for (size_t at = out.find("| loss "); at != std::string::npos; at = out.find("| loss ", at + 1))
    l += out.substr(at, out.find(" |", at + 2) - at) + ";";
  return l;
}

// Under mpirun each rank re-executes itself before MPI starts (same pid, so the job does
// not notice), and trains as it would have: the same losses as a run with nothing to fix.
TEST(BlasCore, EveryRankOfAnMpiJobReexecutesAndTrainsTheSame) {
  const std::string best = cpu::best_blas_core(cpu::read_cpu_info());
  if (best.empty()) GTEST_SKIP() << "a CPU without AVX2";
  testing::TempDir dir;
  auto data = testing::write_markov_model(dir, tiny_pp_model("pp: 2", 2), "c.yaml");
  ASSERT_EQ(data.exit_code, 0) << data.output;
  auto train = [&](const std::string& env) {
    auto r = run_command(env + " " + testing::mpirun(2) + "-x PPTRAIN_FAULTS " + testing::pptrain_bin() + " train " +
                             dir.file("c.yaml") + " 2>&1",
                         120);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
  };
  const std::string fixed = train("PPTRAIN_FAULTS=blas_detected:Prescott"), plain = train("PPTRAIN_FAULTS=");
  EXPECT_NE(fixed.find(" " + best + " (chosen by the CPU's features; OpenBLAS detected Prescott)"), std::string::npos)
      << fixed;
  EXPECT_EQ(losses(fixed), losses(plain));
  EXPECT_FALSE(losses(plain).empty()) << plain;
}

// The program interpreter (PT_INTERP) a dynamically linked ELF file names, "" if none.
std::string elf_interpreter(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  Elf64_Ehdr eh{};
  if (!in.read(reinterpret_cast<char*>(&eh), sizeof eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) return "";
  for (int i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph{};
    in.seekg(std::streamoff(eh.e_phoff + size_t(i) * eh.e_phentsize));
    if (!in.read(reinterpret_cast<char*>(&ph), sizeof ph)) return "";
    if (ph.p_type != PT_INTERP) continue;
    std::string interp(ph.p_filesz, '\0');
    in.seekg(std::streamoff(ph.p_offset));
    if (!in.read(interp.data(), std::streamsize(interp.size()))) return "";
    return interp.substr(0, interp.find('\0'));
  }
  return "";
}

// Started through the dynamic loader (`ld-linux-x86-64.so.2 pptrain train ...`, as some
// module and conda set-ups do), /proc/self/exe is the loader: the re-execution runs the
// loader with the whole original command line, not with main's argv (which would ask the
// loader to run `train`), and trains as a plain start does.
TEST(BlasCore, AProcessStartedThroughTheLoaderReexecutesTheSameWay) {
  const std::string best = cpu::best_blas_core(cpu::read_cpu_info());
  if (best.empty()) GTEST_SKIP() << "a CPU without AVX2";
  const std::string loader = elf_interpreter(testing::pptrain_bin());
  if (loader.empty()) GTEST_SKIP() << "pptrain names no program interpreter";
  testing::TempDir dir;
  auto data = testing::write_markov_model(dir, tiny_pp_model("pp: 1", 2), "c.yaml");
  ASSERT_EQ(data.exit_code, 0) << data.output;
  auto train = [&](const std::string& prefix) {
    auto r = run_command("PPTRAIN_FAULTS=blas_detected:Prescott " + prefix + testing::pptrain_bin() + " train " +
                             dir.file("c.yaml") + " 2>&1",
                         120);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(" " + best + " (chosen by the CPU's features; OpenBLAS detected Prescott)"),
              std::string::npos)
        << r.output;
    return losses(r.output);
  };
  const std::string through_loader = train(loader + " "), plain = train("");
  EXPECT_EQ(through_loader, plain);
  EXPECT_FALSE(plain.empty());
}

TEST(BlasCore, TheLineNamesTheCopyAndTheRequestedOne) {
  const std::string line = version_cpu_line("PPTRAIN_CPU_ISA=avx2");
  EXPECT_NE(line.find("| loops avx2 (PPTRAIN_CPU_ISA=avx2) |"), std::string::npos) << line;
  auto bad = run_command("PPTRAIN_CPU_ISA=neon " + testing::pptrain_bin() + " --version 2>&1", 60);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("PPTRAIN_CPU_ISA=neon: expected auto, avx2 or avx512"), std::string::npos) << bad.output;
}

// The clock is measured by chains of dependent instructions (backend/cpu/cpu_clock.h). If a
// chain measured anything but its latency (independent instructions retire up to 4 a cycle;
// a wrong latency scales the figure by 3), the add and multiply chains would disagree by a
// factor of 3 or more: a chain of immediate adds, which Golden Cove cores fold at renaming,
// measured 10-12 GHz against the multiply chain's 2.9 on an Emerald Rapids VM. Bound: 15%, from the two chains' own spread: the same clock, each the
// best of 21 runs of ~0.5 ms (short enough that most runs see no context switch while the
// suite runs other tests beside this one); measured within 1% of each other on an idle AMD
// EPYC VM.
TEST(CpuClock, AddAndMultiplyChainsMeasureTheSameClock) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "the chains are written for x86-64";
#endif
  constexpr long kAddIterations = 200000;  // 1.6·10^6 cycles
  const double add = cpu::chain_clock_ghz(cpu::ChainOp::add, kAddIterations, 21);
  const double mul = cpu::chain_clock_ghz(cpu::ChainOp::imul, kAddIterations / 3, 21);
  EXPECT_GT(add, 0.3);  // no x86-64 core runs below 300 MHz or above 10 GHz
  EXPECT_LT(add, 10.0);
  EXPECT_NEAR(mul / add, 1.0, 0.15) << "add chain " << add << " GHz, imul chain " << mul << " GHz";
  const std::string line = cpu::cpu_summary_line(/*measure=*/true);
  EXPECT_NE(line.find(" GHz measured x "), std::string::npos) << line;
}

TEST(CpuShare, ThreadsAreTheCpusDividedAmongTheRanksThatShareThem) {
  EXPECT_EQ(threads_for_share(2, 4), 1);   // 4 ranks on 2 cores: one each, never zero
  EXPECT_EQ(threads_for_share(16, 4), 4);
  EXPECT_EQ(threads_for_share(3, 2), 1);   // rounded down: no CPU runs two threads
  EXPECT_EQ(threads_for_share(1, 1), 1);   // bound to one core
  EXPECT_EQ(threads_for_share(8, 1), 8);   // alone on its CPUs
}

// Four unbound ranks with OMP_NUM_THREADS unset take the CPUs of their mask divided by four;
// with OMP_NUM_THREADS set, it stands, and more threads than CPUs is said in one line.
TEST(CpuShare, RanksOfOneNodeDivideItsCpusUnlessOmpNumThreadsIsSet) {
  cpu_set_t mask;
  ASSERT_EQ(sched_getaffinity(0, sizeof mask, &mask), 0);
  const int cpus = CPU_COUNT(&mask);  // unbound ranks inherit this process's mask
  testing::TempDir dir;
  auto data = testing::write_markov_model(dir, tiny_pp_model("pp: 2, tp: 2", 1), "c.yaml");
  ASSERT_EQ(data.exit_code, 0) << data.output;
  auto train = [&](const std::string& threads_env) {
    auto r = run_command("env -u OMP_NUM_THREADS " + threads_env +
                             " OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe "
                             "--bind-to none -np 4 " + testing::pptrain_bin() + " train " + dir.file("c.yaml") + " 2>&1",
                         120);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
  };
  auto cpu_line_threads = [](int n) { return cat(", ", n, n == 1 ? " thread, " : " threads, "); };
  // Threads are shared out in cores where the CPUs are SMT siblings (cpu_topology.h).
  const int cores = std::min(cpus, std::max(1, cpu::process_topology().cores));
  const int share = std::max(1, cores / 4);
  const std::string plain = train("");
  EXPECT_NE(plain.find(cat("threads: ", share, " per rank (4 ranks of this node share ", cpus)), std::string::npos)
      << plain;
  EXPECT_NE(plain.find(cpu_line_threads(share)), std::string::npos) << plain;
  const std::string set = train(cat("OMP_NUM_THREADS=", cpus));
  EXPECT_NE(set.find(cpu_line_threads(cpus)), std::string::npos) << set;
  EXPECT_NE(set.find(cat("threads: OMP_NUM_THREADS=", cpus, " on each of 4 ranks that share ", cpus)),
            std::string::npos)
      << set;
  EXPECT_EQ(set.find("per rank ("), std::string::npos) << set;
}

}  // namespace
}  // namespace pptrain
