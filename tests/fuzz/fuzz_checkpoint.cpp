// Fuzz target: the checkpoint reader's checks of an untrusted HDF5 file, as
// `pptrain inspect --verify` and every load make them (root attributes with bounded
// sizes, every link, each dataset's full type, rank, checksum and finiteness). The input
// is written to a temporary file; every input either verifies or yields problems and
// pptrain::Errors naming the file: never a crash inside HDF5 or pptrain, never a read the
// sanitizers flag.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "checkpoint/verify.h"
#include "core/error.h"
#include "fuzz/temp_file.h"

// HDF5 1.10 leaks the blocks of an object header whose load failed on its own error path
// (H5C_protect, seen under H5Oopen and H5Aexists of damaged headers). That memory is the
// library's, unreachable from pptrain, so LeakSanitizer is told to ignore allocations made
// inside libhdf5; what pptrain allocates is still checked, and its HDF5 handles are RAII.
extern "C" const char* __lsan_default_suppressions() { return "leak:libhdf5\n"; }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static pptrain::fuzz::TempFile file(".h5");
  const std::string& path = file.write(data, size);
  try {
    const pptrain::VerifyReport report = pptrain::verify_checkpoint_file(path);
    for (const std::string& problem : report.problems)
      if (problem.find('\n') != std::string::npos || problem.rfind("checkpoint " + path, 0) != 0) {
        std::fprintf(stderr, "a problem that is not one line naming the file: %s\n", problem.c_str());
        std::abort();
      }
  } catch (const pptrain::Error&) {
  }
  return 0;
}
