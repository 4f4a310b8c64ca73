#include <cstdio>
#include <string>

#include "backend/cpu/blas_setup.h"
#include "backend/cuda/cuda_backend.h"
#include "cli/commands.h"
#include "core/config.h"
#include "core/version.h"

namespace pptrain {

// Which backends this binary contains: the cuda backend is linked in (real or emulated)
// or not, which cuda_backend_build() tells at run time.
BuildFeatures build_features() { return {.cudnn = cuda_backend_has_cudnn()}; }

int cmd_version(const Args&) {
  const std::string cuda = cuda_backend_build();
  std::printf("pptrain %s\nbackends: cpu%s%s\n%s\n", kVersion, cuda.empty() ? "" : " ", cuda.c_str(),
              cpu::cpu_summary_line(false).c_str());
  return 0;
}

}  // namespace pptrain
