// The binaries on a CPU older than the build's -march (src/core/cpu_guard.cpp): one line
// naming what the CPU lacks and how to rebuild, exit 1, instead of dying of SIGILL wherever
// the first AVX2 instruction happened to be. The older CPU is QEMU's user-mode emulator with
// the CPU model of an Intel Nehalem (x86-64-v2: SSE4.2 and POPCNT, no AVX), which raises an
// illegal-instruction fault for any AVX instruction as that CPU would (qemu-user is one of
// the test packages, scripts/install_deps.sh).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/test_util.h"

namespace pptrain {
namespace {

using testing::run_command;

bool have_qemu() { return run_command("command -v qemu-x86_64 >/dev/null 2>&1", 30).exit_code == 0; }

// The output without QEMU's own warnings (CPU features its emulator does not model).
std::string without_qemu_warnings(const std::string& output) {
  std::string kept;
  for (const std::string& line : testing::split_lines(output))
    if (!line.empty() && line.rfind("qemu-x86_64: warning", 0) != 0) kept += line + "\n";
  return kept;
}

std::string build_dir() {
  const std::string bin = testing::pptrain_bin();
  return bin.substr(0, bin.rfind('/'));
}

#if defined(__x86_64__) && defined(__AVX2__)
// This build assumes AVX2 (the default x86-64-v3, or ARCH=native on a newer CPU).
TEST(CpuGuard, EachKindOfBinaryRefusesAnOlderCpuInOneLine) {
  if (!have_qemu()) GTEST_SKIP() << "qemu-x86_64 is not installed (make deps installs qemu-user)";
  // The CLI, a test program and a benchmark: each links the check on its own.
  const std::vector<std::string> commands = {testing::pptrain_bin() + " --version",
                                             build_dir() + "/tests/test_cpu_guard --gtest_list_tests",
                                             build_dir() + "/bench/bench_model 1 8 1"};
  for (const std::string& command : commands) {
    // 120 s: the emulated start takes a few seconds; the limit only turns a hang into a failure.
    const auto r = run_command("qemu-x86_64 -cpu Nehalem " + command, 120);
    const std::string out = without_qemu_warnings(r.output);
    EXPECT_EQ(r.exit_code, 1) << command << ":\n" << r.output;
    EXPECT_EQ(out.rfind("pptrain: this binary was built for -march=", 0), 0u) << command << ":\n" << out;
    EXPECT_NE(out.find(" and this CPU lacks avx2 fma bmi2"), std::string::npos) << out;
    EXPECT_NE(out.find("`make ARCH=native`"), std::string::npos) << out;
    EXPECT_EQ(out.find('\n'), out.size() - 1) << "one line:\n" << out;
  }
}
#endif

#if defined(__x86_64__) && !defined(__AVX512F__)
// A CPU with what the build assumes runs it: QEMU's "max" model has AVX2 (no AVX-512, so this
// half is left out of builds that assume it).
TEST(CpuGuard, ACpuWithTheBuildsIsaRunsIt) {
  if (!have_qemu()) GTEST_SKIP() << "qemu-x86_64 is not installed (make deps installs qemu-user)";
  const auto r = run_command("qemu-x86_64 -cpu max " + testing::pptrain_bin() + " --version", 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("pptrain "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("this CPU lacks"), std::string::npos) << r.output;
}
#endif

}  // namespace
}  // namespace pptrain
