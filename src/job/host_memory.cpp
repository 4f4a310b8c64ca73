#include "job/host_memory.h"

#include <sys/resource.h>

#include <cstdint>
#include <fstream>
#include <sstream>

namespace pptrain {
namespace {

// A limit at or above this is "no limit" (cgroup v1 writes 2^63 rounded to a page).
constexpr double kUnlimited = double(uint64_t(1) << 60);

// The value of `key` in a "key value [kB]" file (/proc/meminfo, memory.stat), in bytes.
std::optional<double> field(const std::string& path, const std::string& key, double unit) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string name;
    double value;
    if (words >> name >> value && (name == key || name == key + ":")) return value * unit;
  }
  return std::nullopt;
}

// The first number in `path` ("max" and missing files are nullopt).
std::optional<double> number(const std::string& path) {
  std::ifstream in(path);
  double value;
  if (in >> value) return value;
  return std::nullopt;
}

// The cgroup's headroom: limit - (usage - inactive file pages), cgroup v2 then v1.
std::optional<HostMemory> cgroup_headroom() {
  struct Layout {
    const char *limit, *usage, *stat, *inactive, *name;
  };
  const Layout layouts[] = {
      {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory.stat",
       "inactive_file", "cgroup memory.max"},
      {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes",
       "/sys/fs/cgroup/memory/memory.stat", "total_inactive_file", "cgroup memory.limit_in_bytes"}};
  for (const Layout& l : layouts) {
    const auto limit = number(l.limit), usage = number(l.usage);
    if (!limit || !usage || *limit >= kUnlimited) continue;
    const double inactive = field(l.stat, l.inactive, 1).value_or(0);
    const double used = *usage > inactive ? *usage - inactive : 0;
    return HostMemory{*limit > used ? *limit - used : 0, l.name};
  }
  return std::nullopt;
}

}  // namespace

std::optional<HostMemory> available_host_memory() {
  const auto meminfo = field("/proc/meminfo", "MemAvailable", 1024);  // kB
  if (!meminfo) return std::nullopt;
  HostMemory best{*meminfo, "MemAvailable"};
  if (auto cgroup = cgroup_headroom(); cgroup && cgroup->available_bytes < best.available_bytes) best = *cgroup;
  return best;
}

std::optional<HostMemory> address_space_headroom() {
  struct rlimit limit;
  if (::getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::nullopt;
  const double mapped = field("/proc/self/status", "VmSize", 1024).value_or(0);  // kB
  const double cap = double(limit.rlim_cur);
  return HostMemory{cap > mapped ? cap - mapped : 0, "address-space limit, ulimit -v"};
}

}  // namespace pptrain
