#include <cstdio>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "cli/commands.h"
#include "core/version.h"

namespace pptrain {

// Which backends this binary contains: the cuda backend is linked in (real or emulated)
// or not, which cuda_backend_build() tells at run time.
int cmd_version(const Args&) {
  const std::string cuda = cuda_backend_build();
  std::printf("pptrain %s\nbackends: cpu%s%s\n", kVersion, cuda.empty() ? "" : " ", cuda.c_str());
  return 0;
}

}  // namespace pptrain
