#include <cstdio>

#include "cli/commands.h"
#include "cli/version.h"

namespace pptrain {

int cmd_version(const Args&) {
  std::printf("pptrain %s\nbackends: %s\n", kVersion, compiled_backends());
  return 0;
}

}  // namespace pptrain
