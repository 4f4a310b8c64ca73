// make_nccl_comm in a build without the cuda backend. Linked from libpptrain.a only when
// nothing before it defined the symbol: binaries with the cuda backend link
// parallel/nccl_comm.cpp's definition ahead of the library, so this object is never pulled.
// Weak as well, so the real definition wins even if it were.
#include "core/error.h"
#include "parallel/nccl.h"

namespace pptrain {

__attribute__((weak)) std::unique_ptr<Communicator> make_nccl_comm(MpiComm& group, Ops& ops) {
  fail("NCCL requested (device: cuda) but this pptrain was built without CUDA (see pptrain --version; "
       "make CUDA=1 builds it)");
}

__attribute__((weak)) std::unique_ptr<Communicator> make_staged_mpi_comm(MpiComm& group, Ops& ops) {
  fail("parallel.comm: mpi for device: cuda, but this pptrain was built without CUDA (see pptrain --version)");
}

}  // namespace pptrain
