// The GEMM libraries under the cpu backend's linear layers (backend/cpu/gemm_library.h):
// each one installed computes the linear layers' products (forward NT, dgrad NN, wgrad TN
// with β = 1, α ≠ 1, row strides wider than the rows) within a float sum's rounding bound of
// a double product, and with β = 0 never reads C; PPTRAIN_CPU_GEMM chooses the process's
// library, named on the start-up line, and a bad value or a library that does not load is one
// line and exit 1; the cpu op tests of the linear layers pass on each library.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/gemm_library.h"
#include "support/test_util.h"

namespace pptrain {
namespace {

using cpu::Gemm;
using cpu::GemmLibrary;
using testing::run_command;

struct Operand {
  std::vector<float> data;
  int rows, cols, ld;  // stored [rows, cols] with row stride ld >= cols
  float at(int r, int c) const { return data[size_t(r) * ld + c]; }
};

Operand random_operand(int rows, int cols, int pad, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Operand o{std::vector<float>(size_t(rows) * (cols + pad)), rows, cols, cols + pad};
  for (float& e : o.data) e = u(gen);
  return o;
}

// Largest |C − ref| over its bound, ref = α·op(A)·op(B) + β·C0 in double. A length-K float
// sum of products rounds at most K times (γ_K ≈ K·u, u = 2⁻²⁴, of Σ|α·a·b|); a blocked
// order (libraries split K into panels and add each panel's partial sums) at most doubles the
// count, and β·C0's add is one rounding more: 2(K + 1)·u·(Σ|α·a·b| + |β·C0|).
double worst_error(const Gemm& g, const Operand& a, const Operand& b, const std::vector<float>& c0) {
  double worst = 0;
  for (int i = 0; i < g.m; ++i)
    for (int j = 0; j < g.n; ++j) {
      double ref = 0, magnitude = 0;
      for (int p = 0; p < g.k; ++p) {
        const double prod = double(g.alpha) * (g.a_t ? a.at(p, i) : a.at(i, p)) * (g.b_t ? b.at(j, p) : b.at(p, j));
        ref += prod;
        magnitude += std::fabs(prod);
      }
      const double start = g.beta == 0.0f ? 0.0 : double(g.beta) * c0[size_t(i) * g.ldc + j];
      const double bound = 2.0 * (g.k + 1) * std::ldexp(1.0, -24) * (magnitude + std::fabs(start)) + 1e-30;
      const double got = g.c[size_t(i) * g.ldc + j];
      worst = std::max(worst, std::isfinite(got) ? std::fabs(got - (ref + start)) / bound : INFINITY);
    }
  return worst;
}

struct Case {
  const char* name;
  bool a_t, b_t;
  float alpha, beta;
};

// The linear layers' three forms (linear.cpp) and their α/β variants, on a shape that is
// no multiple of any kernel's tile (m = 37, n = 29, k = 70) with padded rows.
std::vector<Case> cases() {
  return {{"forward NT", false, true, 1.0f, 0.0f},   {"dgrad NN", false, false, 1.0f, 0.0f},
          {"dgrad NN, accumulate", false, false, 1.0f, 1.0f}, {"wgrad TN, accumulate", true, false, 1.0f, 1.0f},
          {"TT, alpha 0.5, beta 0.25", true, true, 0.5f, 0.25f}};
}

double run_case(GemmLibrary lib, const Case& cs, bool flip_a = false) {
  const int m = 37, n = 29, k = 70, pad = 3;
  const Operand a = cs.a_t ? random_operand(k, m, pad, 11) : random_operand(m, k, pad, 11);
  const Operand b = cs.b_t ? random_operand(n, k, pad, 12) : random_operand(k, n, pad, 12);
  const int ldc = n + pad;
  std::vector<float> c0 = random_operand(m, n, pad, 13).data;
  std::vector<float> c = c0;
  // With β = 0, C must be written without being read: NaN there would otherwise show.
  if (cs.beta == 0.0f) std::fill(c.begin(), c.end(), NAN);
  Gemm g{cs.a_t, cs.b_t, m, n, k, cs.alpha, a.data.data(), a.ld, b.data.data(), b.ld, cs.beta, c.data(), ldc};
  if (flip_a) {  // the test's own check: a square A read the other way round must fail it
    const Operand sq = random_operand(m, m, pad, 14);
    Gemm wrong{!cs.a_t, cs.b_t, m, n, m, cs.alpha, sq.data.data(), sq.ld, b.data.data(), b.ld, cs.beta, c.data(),
               ldc};
    cpu::run_gemm(lib, wrong);
    Gemm as_checked = wrong;
    as_checked.a_t = cs.a_t;
    return worst_error(as_checked, sq, b, c0);
  }
  cpu::run_gemm(lib, g);
  return worst_error(g, a, b, c0);
}

TEST(GemmLibrary, EachInstalledLibraryComputesTheLinearLayersProducts) {
  int checked = 0;
  for (GemmLibrary lib : cpu::kGemmLibraries) {
    if (!cpu::gemm_library_available(lib)) {
      std::printf("%s: not installed here (%s), not checked\n", cpu::gemm_library_name(lib),
                  cpu::gemm_library_package(lib));
      continue;
    }
    ++checked;
    for (const Case& cs : cases()) {
      EXPECT_LE(run_case(lib, cs), 1.0) << cpu::gemm_library_name(lib) << " " << cs.name;
      // A transposition misread is off by far more than the bound: its entries are unrelated
      // sums, off by about their magnitude Σ|α·a·b|, while the bound is 2(K + 1)·u of it
      // (K = 37 here: 4.5e-6), so the error comes out near 1e5 of the bound; 100 leaves room
      // for an unlucky entry and still shows that the check can fail.
      EXPECT_GT(run_case(lib, cs, true), 100.0) << cpu::gemm_library_name(lib) << " " << cs.name;
    }
  }
  EXPECT_GE(checked, 1);  // OpenBLAS is linked
}

// `pptrain --version` takes well under a second (it loads the library, measures nothing); 60 s
// only turns a hang into a failure, as the op tests' 300 s (a few seconds each here).
std::string version_line(const std::string& env) {
  auto r = run_command(env + " " + testing::pptrain_bin() + " --version 2>&1", 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const std::string& line : testing::split_lines(r.output))
    if (line.rfind("cpu: ", 0) == 0) return line;
  return "";
}

TEST(GemmLibrary, TheEnvironmentChoosesAndTheStartUpLineSaysSo) {
  // The line's "| GEMM ..." field (the packed weights' field may name "the GEMM library").
  EXPECT_EQ(version_line("env -u PPTRAIN_CPU_GEMM").find("| GEMM "), std::string::npos);
  EXPECT_EQ(version_line("PPTRAIN_CPU_GEMM=openblas").find("| GEMM "), std::string::npos);
  const char* names[] = {"", "oneDNN ", "BLIS "};
  for (GemmLibrary lib : {GemmLibrary::onednn, GemmLibrary::blis}) {
    if (!cpu::gemm_library_available(lib)) continue;
    const std::string var = std::string("PPTRAIN_CPU_GEMM=") + cpu::gemm_library_name(lib);
    const std::string line = version_line(var);
    EXPECT_NE(line.find(std::string("| GEMM ") + names[int(lib)]), std::string::npos) << line;
    EXPECT_NE(line.find("(" + var + ")"), std::string::npos) << line;
  }
  auto bad = run_command("PPTRAIN_CPU_GEMM=mkl " + testing::pptrain_bin() + " --version 2>&1", 60);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_EQ(bad.output, "error: PPTRAIN_CPU_GEMM=mkl: expected openblas, onednn or blis\n");
  // A library that does not load (stood in for: this machine may have it) names what to install.
  auto missing = run_command("PPTRAIN_FAULTS=gemm_missing:onednn PPTRAIN_CPU_GEMM=onednn " +
                                 testing::pptrain_bin() + " --version 2>&1", 60);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.output,
            "error: PPTRAIN_CPU_GEMM=onednn: libdnnl.so.2 does not load on this machine (install libdnnl2, or "
            "unset PPTRAIN_CPU_GEMM for OpenBLAS)\n");
}

// Where the loader finds a libdnnl.so.2 that is not one (first on LD_LIBRARY_PATH), the line
// says which file and what the loader said, or which entry point the file lacks.
TEST(GemmLibrary, ALibraryThatFailsToLoadIsNamedWithTheLoadersReason) {
  testing::TempDir dir;
  auto run = [&] {
    return run_command("LD_LIBRARY_PATH=" + dir.path() + " PPTRAIN_CPU_GEMM=onednn " + testing::pptrain_bin() +
                           " --version 2>&1",
                       60);
  };
  {
    std::ofstream(dir.file("libdnnl.so.2")) << "not a shared object\n";
  }
  auto garbage = run();
  EXPECT_EQ(garbage.exit_code, 1);
  EXPECT_EQ(garbage.output.rfind("error: PPTRAIN_CPU_GEMM=onednn: libdnnl.so.2 does not load on this machine (" +
                                     dir.file("libdnnl.so.2") + ": ",
                                 0),
            0u)
      << garbage.output;
  EXPECT_NE(garbage.output.find("; install libdnnl2, or unset PPTRAIN_CPU_GEMM for OpenBLAS)"), std::string::npos)
      << garbage.output;
  // A real shared object without oneDNN's entry points: the C math library, wherever it is.
  Dl_info info{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(static_cast<double (*)(double)>(&::cos)), &info), 0);
  ASSERT_NE(info.dli_fname, nullptr);
  std::filesystem::copy_file(info.dli_fname, dir.file("libdnnl.so.2"),
                             std::filesystem::copy_options::overwrite_existing);
  auto no_entry = run();
  EXPECT_EQ(no_entry.exit_code, 1);
  EXPECT_EQ(no_entry.output,
            "error: PPTRAIN_CPU_GEMM=onednn: libdnnl.so.2 does not load on this machine (libdnnl.so.2 has no "
            "dnnl_sgemm; install libdnnl2, or unset PPTRAIN_CPU_GEMM for OpenBLAS)\n");
}

TEST(GemmLibrary, TheLinearLayersOpTestsPassOnEachLibrary) {
  const std::string dir = testing::build_dir() + "/tests/";
  for (GemmLibrary lib : {GemmLibrary::onednn, GemmLibrary::blis}) {
    if (!cpu::gemm_library_available(lib)) continue;
    for (const char* test : {"test_cpu_ops", "test_cpu_ops_grad"}) {
      auto r = run_command(std::string("PPTRAIN_CPU_GEMM=") + cpu::gemm_library_name(lib) + " " + dir + test +
                               " --gtest_filter='*Linear*:*AccumulateFlags*:*WeightGradients*' --gtest_brief=1 2>&1",
                           300);
      EXPECT_EQ(r.exit_code, 0) << cpu::gemm_library_name(lib) << " " << test << "\n" << r.output;
      EXPECT_NE(r.output.find("PASSED"), std::string::npos) << r.output;
      EXPECT_EQ(r.output.find("PASSED  ] 0 tests"), std::string::npos) << "the filter matched nothing";
    }
  }
}

}  // namespace
}  // namespace pptrain
