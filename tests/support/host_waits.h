// The emulated runtime's counts of host waits in a job's output: each rank of pptrain-emu
// run with PPTRAIN_EMU_HOST_WAITS prints "emulated cuda: N host waits (F of them cudaFree)"
// at exit (emu/cuda_runtime_emu.h). Summed over the ranks that printed one.
#pragma once
#include <regex>
#include <string>

namespace pptrain::testing {

struct HostWaits {
  long long waits = 0;  // every counted wait, the cudaFree among them
  long long frees = 0;  // of them cudaFree: how many blocks a caching allocator frees at
                        // exit can depend on timing, so counts over ranks leave them out
  int ranks = 0;        // the counts found
};

inline HostWaits host_waits_of(const std::string& output) {
  static const std::regex count("emulated cuda: ([0-9]+) host waits \\(([0-9]+) of them cudaFree\\)");
  HostWaits w;
  for (std::sregex_iterator it(output.begin(), output.end(), count), end; it != end; ++it, ++w.ranks) {
    w.waits += std::stoll((*it)[1]);
    w.frees += std::stoll((*it)[2]);
  }
  return w;
}

}  // namespace pptrain::testing
