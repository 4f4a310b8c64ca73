// The cuda backend's entry points (backend/cuda/cuda_backend.h) in a build without it.
// Linked from libpptrain.a only when nothing before it defined them: binaries with the
// cuda backend link its objects ahead of the library, so this object is never pulled.
// Weak as well, so the real definitions win even if it were.
#include "backend/cuda/cuda_backend.h"
#include "core/config.h"
#include "core/error.h"

namespace pptrain {

__attribute__((weak)) std::unique_ptr<Ops> make_cuda_ops(const Config& cfg) {
  fail(cfg.source, ": key 'device': cuda requested but this pptrain was built without CUDA (see pptrain --version; "
       "make CUDA=1 builds it)");
}

__attribute__((weak)) std::unique_ptr<Ops> make_cuda_ops(int device) {
  fail("the cuda backend was requested (device ", device, ") but this pptrain was built without CUDA");
}

__attribute__((weak)) const char* cuda_backend_build() { return ""; }

__attribute__((weak)) bool cuda_backend_has_cudnn() { return false; }

__attribute__((weak)) int cuda_device_of(Ops&) { return -1; }

__attribute__((weak)) std::optional<CudaDeviceInfo> cuda_device_info() { return std::nullopt; }

}  // namespace pptrain
