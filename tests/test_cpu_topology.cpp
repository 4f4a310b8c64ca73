// The cores under the process's CPUs (src/backend/cpu/cpu_topology.h), which the peak
// estimate of the start-up line and the benchmarks counts instead of threads: on SMT
// siblings two threads share one core's FMA units.
#include <gtest/gtest.h>
#include <sched.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/cpu/cpu_topology.h"
#include "parallel/mpi_session.h"
#include "support/markov_model.h"
#include "support/test_util.h"

namespace pptrain {
namespace {

using testing::run_command;

// A stand-in for /sys/devices/system/cpu: cpu<N>/topology/<file> holding `siblings`.
void write_siblings(const testing::TempDir& dir, int cpu, const std::string& file, const std::string& siblings) {
  const std::string topology = dir.file("cpu" + std::to_string(cpu) + "/topology");
  std::filesystem::create_directories(topology);
  testing::write_file(topology + "/" + file, siblings + "\n");
}

// Four CPUs on two cores, numbered as Linux numbers SMT siblings on many Intel servers (the
// second thread of every core after all the first ones): 0 and 2 share a core, 1 and 3.
TEST(CpuTopology, SiblingsCountOnce) {
  testing::TempDir sys;
  write_siblings(sys, 0, "core_cpus_list", "0,2");
  write_siblings(sys, 1, "core_cpus_list", "1,3");
  write_siblings(sys, 2, "core_cpus_list", "0,2");
  write_siblings(sys, 3, "core_cpus_list", "1,3");
  EXPECT_EQ(cpu::count_cores({0, 1, 2, 3}, sys.path()), 2);
  EXPECT_EQ(cpu::count_cores({0, 2}, sys.path()), 1);  // a mask of one core's two threads
  EXPECT_EQ(cpu::count_cores({0, 1}, sys.path()), 2);  // one thread of each core
  EXPECT_EQ(cpu::count_cores({}, sys.path()), 0);
}

// Kernels before 5.6 have only thread_siblings_list; a CPU with neither file (no sysfs, a
// container hiding it) is a core of its own, as the estimate counted before.
TEST(CpuTopology, OlderKernelsListAndUnreadableCpus) {
  testing::TempDir sys;
  write_siblings(sys, 0, "thread_siblings_list", "0-1");
  write_siblings(sys, 1, "thread_siblings_list", "0-1");
  EXPECT_EQ(cpu::count_cores({0, 1}, sys.path()), 1);
  EXPECT_EQ(cpu::count_cores({0, 1, 2, 3}, sys.path()), 3);  // cpu2 and cpu3 unread: one core each
  EXPECT_EQ(cpu::count_cores({5, 6}, sys.path() + "/missing"), 2);
}

// This process: at least one core, no more than its CPUs, and the threads' share never
// above either.
TEST(CpuTopology, ThisProcessHasAtMostOneCorePerCpu) {
  const cpu::CpuTopology& t = cpu::process_topology();
  cpu_set_t mask;
  ASSERT_EQ(sched_getaffinity(0, sizeof mask, &mask), 0);
  EXPECT_EQ(t.cpus, CPU_COUNT(&mask));
  EXPECT_GE(t.cores, 1);
  EXPECT_LE(t.cores, t.cpus);
  EXPECT_EQ(cpu::cores_for_threads(1), 1);
  EXPECT_EQ(cpu::cores_for_threads(t.cpus * 4), t.cores);
}

// The mask read at any size gives what glibc's fixed 1,024-CPU set gives on a machine with
// fewer CPUs (the only kind at hand: the larger sizes are taken where the kernel refuses
// that one, with EINVAL).
TEST(CpuTopology, TheAffinityMaskReadAtAnySizeListsTheSameCpus) {
  cpu_set_t mask;
  ASSERT_EQ(sched_getaffinity(0, sizeof mask, &mask), 0);
  std::vector<int> fixed;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &mask)) fixed.push_back(cpu);
  EXPECT_EQ(cpu::affinity_cpus(), fixed);
  EXPECT_EQ(cpu::process_topology().ids, fixed);
}

// The ranks of a node compare masks as 64-bit words of any length: CPUs past glibc's 1,024
// (a cpu_set_t would drop them, and these ranks would seem to share nothing).
TEST(CpuTopology, RanksSharingCpusPastTheFirst1024AreCounted) {
  const int words = 2048 / 64;
  const std::vector<uint64_t> mine = cpu_words({1500, 1501}, words);
  ASSERT_EQ(mine.size(), size_t(words));
  EXPECT_EQ(mine[1500 / 64], (uint64_t(1) << (1500 % 64)) | (uint64_t(1) << (1501 % 64)));
  std::vector<uint64_t> node;  // 4 ranks: itself, CPUs 0-1, CPU 1501, CPU 2047
  for (const std::vector<int>& cpus : std::vector<std::vector<int>>{{1500, 1501}, {0, 1}, {1501}, {2047}}) {
    const std::vector<uint64_t> w = cpu_words(cpus, words);
    node.insert(node.end(), w.begin(), w.end());
  }
  EXPECT_EQ(ranks_sharing(mine, node), 2);
  EXPECT_EQ(ranks_sharing(cpu_words({2047}, words), node), 1);
  // A CPU beyond the words given is left out, never written past them.
  EXPECT_EQ(cpu_words({64}, 1), std::vector<uint64_t>{0});
}

// The CPUs of this process's affinity mask (0 if it cannot be read).
int process_cpus() {
  cpu_set_t mask;
  return sched_getaffinity(0, sizeof mask, &mask) == 0 ? CPU_COUNT(&mask) : 0;
}

// A stand-in for sysfs in which every CPU of this process's mask is an SMT sibling of one
// core (cpu0's), as on a VM whose two vCPUs are one core's two threads.
void write_one_core(const testing::TempDir& sys) {
  cpu_set_t mask;
  ASSERT_EQ(sched_getaffinity(0, sizeof mask, &mask), 0);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &mask)) write_siblings(sys, cpu, "core_cpus_list", "0-" + std::to_string(CPU_SETSIZE - 1));
}

// A one-step run of a tiny model in `dir` (written on the first call) with `env` set; its output.
std::string train(const testing::TempDir& dir, const std::string& env) {
  if (!std::filesystem::exists(dir.file("c.yaml"))) {
    auto data = testing::write_markov_model(dir, testing::one_step_model(), "c.yaml");
    EXPECT_EQ(data.exit_code, 0) << data.output;
  }
  auto r = run_command("env -u OMP_NUM_THREADS " + env + " " + testing::pptrain_bin() + " train " + dir.file("c.yaml") +
                           " 2>&1",
                       120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.output;
}

// Its start-up line of the cpu backend ("cpu: ...").
std::string cpu_line(const std::string& out) {
  const size_t at = out.find("cpu: ");
  return at == std::string::npos ? out : out.substr(at, out.find('\n', at) - at);
}

// The start-up line of a run whose CPUs are one core's SMT siblings (the stand-in tree maps
// every CPU of this machine to one core): two threads are said to be on one core, and the
// peak estimate counts that one core.
TEST(CpuTopology, StartUpLineCountsCoresNotThreads) {
  testing::TempDir dir, sys;
  write_one_core(sys);
  const std::string smt = cpu_line(train(dir, "OMP_NUM_THREADS=2 PPTRAIN_FAULTS=cpu_topology:" + sys.path()));
  EXPECT_NE(smt.find(", 2 threads on 1 core (SMT), "), std::string::npos) << smt;
  if (smt.find(" GHz ") != std::string::npos) {  // a clock known: the estimate is printed
    EXPECT_NE(smt.find(" (1 x "), std::string::npos) << smt;
  }
  // On this machine's own tree, as many cores as threads wherever it has two CPUs without SMT.
  if (cpu::cores_for_threads(2) == 2) {
    const std::string plain = cpu_line(train(dir, "OMP_NUM_THREADS=2 PPTRAIN_FAULTS="));
    EXPECT_EQ(plain.find("(SMT)"), std::string::npos) << plain;
    if (plain.find(" GHz ") != std::string::npos) {
      EXPECT_NE(plain.find(" (2 x "), std::string::npos) << plain;
    }
  }
}

// With OMP_NUM_THREADS unset, one process takes one thread per core, not one per logical
// CPU (a core's second thread adds no FMA units; PyTorch's default too), and says so.
TEST(CpuTopology, OneProcessTakesOneThreadPerCoreOfSmtSiblings) {
  const int cpus = process_cpus();
  if (cpus < 2) GTEST_SKIP() << "one CPU: no siblings to stand in for";
  testing::TempDir dir, sys;
  write_one_core(sys);
  const std::string out = train(dir, "PPTRAIN_FAULTS=cpu_topology:" + sys.path());
  EXPECT_NE(out.find("threads: 1, one per core (" + std::to_string(cpus) + " CPUs are SMT siblings of 1 core;"),
            std::string::npos)
      << out;
  EXPECT_NE(cpu_line(out).find(", 1 thread, "), std::string::npos) << out;
  // Without SMT (this machine's own tree, where it has none), OpenMP's default stands.
  if (cpu::process_topology().cores == cpus) {
    const std::string plain = train(dir, "PPTRAIN_FAULTS=");
    EXPECT_EQ(plain.find("one per core"), std::string::npos) << plain;
    EXPECT_NE(cpu_line(plain).find(", " + std::to_string(cpus) + " threads, "), std::string::npos) << plain;
  }
}

// Ranks of one node share cores too: two unbound ranks whose CPUs are one core's siblings
// take one thread each, and rank 0 says what they share.
TEST(CpuTopology, RanksShareCoresOfSmtSiblings) {
  const int cpus = process_cpus();
  if (cpus < 2) GTEST_SKIP() << "one CPU: no siblings to stand in for";
  testing::TempDir dir, sys;
  write_one_core(sys);
  train(dir, "PPTRAIN_FAULTS=");  // writes the model
  // (Not testing::mpirun, which sets OMP_NUM_THREADS=1: here it must be unset.)
  auto r = run_command("env -u OMP_NUM_THREADS PPTRAIN_FAULTS=cpu_topology:" + sys.path() +
                           " OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe "
                           "--bind-to none -x PPTRAIN_FAULTS -np 2 " + testing::pptrain_bin() + " train " +
                           dir.file("c.yaml") + " parallel.pp=2 model.n_layer=2 2>&1",
                       120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("threads: 1 per rank (2 ranks of this node share " + std::to_string(cpus) +
                          " CPUs (SMT siblings of 1 core); OMP_NUM_THREADS unset)"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace pptrain
