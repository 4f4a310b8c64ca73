#pragma once

#include "core/version.h"

namespace pptrain {

// "cpu" or "cpu cuda": which backends this binary contains.
inline const char* compiled_backends() {
#if defined(PPTRAIN_WITH_CUDA) && defined(PPTRAIN_EMULATED)
  return "cpu cuda (emulated on the CPU by the SIMT emulator; NCCL emulated over MPI)";
#elif defined(PPTRAIN_WITH_CUDA)
  return "cpu cuda";
#else
  return "cpu";
#endif
}

}  // namespace pptrain
