// Entry points of the cuda backend, free of CUDA headers so that the job and the CLI can
// include them in every build. Defined by the cuda backend (backend/cuda/*.cpp, real or
// emulated); a build without it links backend/no_cuda.cpp instead, whose definitions fail
// with one line saying so.
#pragma once
#include <memory>
#include <optional>

#include "backend/ops.h"

namespace pptrain {

struct Config;

// The cuda backend for `device: cuda`: selects this rank's GPU (node-local rank, see
// backend/cuda/device.h) and builds CudaOps on it; one object serves fp32 and bf16
// storage (`training.precision`).
std::unique_ptr<Ops> make_cuda_ops(const Config& cfg);

// The cuda backend on an explicit device (tests; the emulated build has device 0 only).
std::unique_ptr<Ops> make_cuda_ops(int device);

// How this binary runs `device: cuda`: "cuda", "cuda (emulated ...)", or "" without it
// (pptrain --version).
const char* cuda_backend_build();

// Whether the cuda backend was built with cuDNN (model.attention: cudnn; the default
// attention on cuda where the model allows it). False without the cuda backend.
bool cuda_backend_has_cudnn();

// The GPU this rank's cuda backend will take (node-local rank mod the device count, as
// make_cuda_ops does) and its memory, for the preflight; nullopt in a build without the
// cuda backend or where no device is visible.
struct CudaDeviceInfo {
  int device = 0;
  double total_bytes = 0;
};
std::optional<CudaDeviceInfo> cuda_device_info();

// The device index of a cuda backend (CudaOps); -1 for another backend.
int cuda_device_of(Ops& ops);

}  // namespace pptrain
