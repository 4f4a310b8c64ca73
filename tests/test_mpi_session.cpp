// MpiSession's start: a singleton pptrain (no launcher) is an isolated Open MPI singleton,
// which starts no daemon and opens no network layer; where a user asks for the daemon, it
// keeps a preloaded library (a profiler's injection library) to itself, out of the daemon
// Open MPI's singleton MPI_Init forks; started by mpirun, the ranks keep their environment
// as given.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "support/test_util.h"

using namespace pptrain::testing;
namespace fs = std::filesystem;

namespace {

// A preload library whose constructor appends "<executable>" to $PRELOAD_PROBE_LOG in every
// process that loads it, compiled into `dir` with the system C compiler.
std::string build_probe(const TempDir& dir) {
  std::ofstream(dir.file("probe.c")) << R"(#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void probe(void) {
  char exe[512] = {0};
  const char* log = getenv("PRELOAD_PROBE_LOG");
  if (!log || readlink("/proc/self/exe", exe, sizeof exe - 1) <= 0) return;
  FILE* f = fopen(log, "a");
  if (f) fprintf(f, "%s\n", exe), fclose(f);
}
)";
  CommandResult cc = run_command("cc -shared -fPIC -o " + dir.file("libprobe.so") + " " + dir.file("probe.c"), 60);
  EXPECT_EQ(cc.exit_code, 0) << cc.output;
  return dir.file("libprobe.so");
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

// Without a launcher's variables: what a user's shell starts.
const char* const kNoLauncher =
    "env -u OMPI_COMM_WORLD_SIZE -u PMIX_RANK -u PMIX_NAMESPACE -u PMI_RANK -u PMI_SIZE -u MPI_LOCALNRANKS "
    "-u SLURM_STEP_ID ";

TEST(MpiSession, ASingletonStartsNoMpiDaemon) {
  if (run_command("command -v strace", 10).exit_code != 0) GTEST_SKIP() << "strace is not installed";
  TempDir dir;
  CommandResult r = run_command(std::string(kNoLauncher) + "strace -f -qq -e trace=execve -o " + dir.file("trace") +
                                    " " + pptrain_bin() + " --version",
                                60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string trace = read(dir.file("trace"));
  EXPECT_NE(trace.find("execve("), std::string::npos) << "strace saw nothing:\n" << trace;
  EXPECT_EQ(trace.find("orted"), std::string::npos) << "MPI_Init started Open MPI's daemon:\n" << trace;
}

// Nor does it open Open MPI's network layers: the cm layer's Omni-Path library sleeps 0.2 s
// as it loads. Where Open MPI's components are built into its library (no mca_*.so to
// open), there is nothing to see.
TEST(MpiSession, ASingletonOpensNoNetworkLayer) {
  if (run_command("command -v strace", 10).exit_code != 0) GTEST_SKIP() << "strace is not installed";
  TempDir dir;
  CommandResult r = run_command(std::string(kNoLauncher) + "env -u OMPI_MCA_pml strace -f -qq -e trace=openat -o " +
                                    dir.file("trace") + " " + pptrain_bin() + " --version",
                                60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string trace = read(dir.file("trace"));
  if (trace.find("mca_pml_ob1") == std::string::npos) GTEST_SKIP() << "no Open MPI component was opened as a file";
  for (const char* layer : {"mca_pml_cm", "mca_pml_ucx", "libpsm2"})
    EXPECT_EQ(trace.find(layer), std::string::npos) << "a process without peers opened " << layer;
}

// A task of an srun step is a rank, not a singleton, even without a PMI variable (an MPI
// built against Slurm's PMI-1 library): Open MPI chooses its own point-to-point layer there.
TEST(MpiSession, ATaskOfAnSrunStepKeepsOpenMpisOwnChoice) {
  if (run_command("command -v strace", 10).exit_code != 0) GTEST_SKIP() << "strace is not installed";
  TempDir dir;
  CommandResult r = run_command(std::string(kNoLauncher) + "SLURM_STEP_ID=0 env -u OMPI_MCA_pml -u SLURM_NODELIST " +
                                    "strace -f -qq -e trace=openat -o " + dir.file("trace") + " " + pptrain_bin() +
                                    " --version",
                                60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string trace = read(dir.file("trace"));
  if (trace.find("mca_pml_ob1") == std::string::npos) GTEST_SKIP() << "no Open MPI component was opened as a file";
  bool others = false;
  for (const char* layer : {"mca_pml_cm", "mca_pml_ucx", "mca_pml_v.", "mca_pml_monitoring"})
    others = others || trace.find(layer) != std::string::npos;
  EXPECT_TRUE(others) << "only ob1 was opened: the task's point-to-point layer was chosen for Open MPI";
}

TEST(MpiSession, ASingletonKeepsItsPreloadOutOfTheMpiDaemon) {
  TempDir dir;
  const std::string probe = build_probe(dir);
  const std::string log = dir.file("loads.txt");
  // The daemon asked for (not isolated): Open MPI 4's singleton forks orted.
  CommandResult r = run_command(std::string(kNoLauncher) + "OMPI_MCA_ess_singleton_isolated=0 PRELOAD_PROBE_LOG=" + log +
                                    " LD_PRELOAD=" + probe + " " + pptrain_bin() + " --version",
                                60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string loads = read(log);
  // pptrain itself loaded it (the preload works) ...
  EXPECT_NE(loads.find(fs::canonical(pptrain_bin()).string()), std::string::npos) << loads;
  // ... and no other process did: without the hold-back, Open MPI's orted appears here.
  std::istringstream lines(loads);
  for (std::string line; std::getline(lines, line);)
    EXPECT_EQ(line, fs::canonical(pptrain_bin()).string()) << "a process other than pptrain loaded the preload";
}
