// Physical cores from sysfs's sibling lists (cpu_topology.h). Compiled once, for the
// baseline ISA.
#include "backend/cpu/cpu_topology.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <memory>
#include <set>

#include "core/faults.h"

namespace pptrain::cpu {

namespace {

// The first line of a file; "" when it cannot be read.
std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  return line;
}

}  // namespace

int count_cores(const std::vector<int>& cpus, const std::string& sysfs_cpu_dir) {
  std::set<std::string> cores;
  for (int cpu : cpus) {
    const std::string topology = sysfs_cpu_dir + "/cpu" + std::to_string(cpu) + "/topology/";
    std::string siblings = first_line(topology + "core_cpus_list");
    if (siblings.empty()) siblings = first_line(topology + "thread_siblings_list");
    // Unreadable: a key no sibling list can equal, so the CPU is a core of its own.
    cores.insert(siblings.empty() ? "unread:" + std::to_string(cpu) : siblings);
  }
  return int(cores.size());
}

std::vector<int> affinity_cpus() {
  // Doubling from glibc's 1,024 until the kernel takes the size (its mask is as long as
  // the CPUs it was built for, up to 8,192 on today's distributions; 2^22 is Linux's cap).
  for (int n = CPU_SETSIZE; n <= (1 << 22); n *= 2) {
    std::unique_ptr<cpu_set_t, void (*)(cpu_set_t*)> set(CPU_ALLOC(n), [](cpu_set_t* s) { CPU_FREE(s); });
    if (!set) return {};
    const size_t bytes = CPU_ALLOC_SIZE(n);
    CPU_ZERO_S(bytes, set.get());
    if (sched_getaffinity(0, bytes, set.get()) != 0) {
      if (errno == EINVAL) continue;  // more CPUs than n
      return {};
    }
    std::vector<int> cpus;
    for (int cpu = 0; cpu < int(bytes * 8); ++cpu)
      if (CPU_ISSET_S(cpu, bytes, set.get())) cpus.push_back(cpu);
    return cpus;
  }
  return {};
}

const CpuTopology& process_topology() {
  static const CpuTopology topology = [] {
    CpuTopology t;
    t.ids = affinity_cpus();
    t.cpus = int(t.ids.size());
    // The planted stand-in (faults.h: cpu_topology:DIR) lets a test give this machine SMT
    // siblings.
    t.cores = count_cores(t.ids, Faults::stand_in_from_env("cpu_topology").value_or("/sys/devices/system/cpu"));
    return t;
  }();
  return topology;
}

int cores_for_threads(int threads) {
  const int cores = process_topology().cores;
  // No mask read (cores 0): every thread is taken for a core, as before.
  return cores > 0 ? std::max(1, std::min(threads, cores)) : threads;
}

}  // namespace pptrain::cpu
