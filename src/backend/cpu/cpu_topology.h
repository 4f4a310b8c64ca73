// The physical cores under the CPUs this process may run on, for the peak estimate
// (blas_setup.h) and the default thread counts (parallel/mpi_session.h: one thread per
// core). With simultaneous multithreading (Intel's Hyper-Threading, AMD's SMT) a
// core shows as two logical CPUs that share its FMA units: two threads there do not double
// its FLOP rate, so a peak counted per thread would be twice what the core can do, and every
// "fraction of the peak" half what it is. Cloud VMs often hand out vCPUs as such sibling
// pairs (lscpu: "Thread(s) per core: 2").
#pragma once

#include <string>
#include <vector>

namespace pptrain::cpu {

// Distinct cores among `cpus` (logical CPU numbers): CPUs whose sibling lists,
// <sysfs_cpu_dir>/cpu<N>/topology/core_cpus_list (thread_siblings_list on kernels before
// 5.6, the same list), are equal share a core. A CPU whose list cannot be read counts as a
// core of its own (no sysfs: no SMT is assumed, the estimate stays what it was).
int count_cores(const std::vector<int>& cpus, const std::string& sysfs_cpu_dir);

// The logical CPUs this process may run on (its affinity mask), ascending; empty when the
// mask cannot be read. Read into a set as large as the kernel's: glibc's cpu_set_t holds
// 1,024 CPUs, and on a machine with more sched_getaffinity refuses it (EINVAL).
std::vector<int> affinity_cpus();

struct CpuTopology {
  int cpus = 0;   // logical CPUs in this process's affinity mask
  int cores = 0;  // the physical cores they belong to
  std::vector<int> ids;  // [cpus]: the CPUs themselves (affinity_cpus)
};
// This process's, under /sys/devices/system/cpu; read on the first call, kept after.
const CpuTopology& process_topology();

// The cores `threads` threads keep busy: min(threads, cores); Linux's scheduler puts a
// runnable thread on an idle core before an idle sibling.
int cores_for_threads(int threads);

}  // namespace pptrain::cpu
