// How much host memory a new allocation can still get on this node: the kernel's
// MemAvailable (/proc/meminfo: free memory plus what reclaim can free without swapping),
// lowered to the memory cgroup's headroom when the job runs under a limit (Slurm's
// cgroup plugin, containers): limit - (usage - inactive file cache), the working set
// the kernel's OOM killer compares with the limit. A process may be limited further by its
// address-space limit.
#pragma once
#include <optional>
#include <string>

namespace pptrain {

struct HostMemory {
  double available_bytes = 0;
  std::string source;  // "MemAvailable" or "cgroup memory.max" / "cgroup memory.limit_in_bytes"
};

// For the node: nullopt where /proc/meminfo cannot be read (not Linux): the caller skips
// its check.
std::optional<HostMemory> available_host_memory();

// For this process: the address-space limit (RLIMIT_AS, `ulimit -v`, set by some batch
// systems) less the address space already mapped (VmSize); nullopt when unlimited.
std::optional<HostMemory> address_space_headroom();

}  // namespace pptrain
