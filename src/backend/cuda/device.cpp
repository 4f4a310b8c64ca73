#include "backend/cuda/device.h"

#include <mpi.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "core/log.h"

namespace pptrain::cuda {

int node_local_rank() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return 0;
  // The ranks that can share memory are the ranks of this node.
  MPI_Comm node = MPI_COMM_NULL;
  int rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  if (rc != MPI_SUCCESS) fail("MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed on rank ", log::rank());
  int local = 0;
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  return local;
}

int select_device() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0)
    fail("device: cuda: no CUDA device visible on rank ", log::rank(), " (",
         err != cudaSuccess ? cudaGetErrorString(err) : "device count is 0", ")");
  int device = node_local_rank() % count;
  PPTRAIN_CUDA_CHECK(cudaSetDevice(device));
  return device;
}

}  // namespace pptrain::cuda

namespace pptrain {

std::optional<CudaDeviceInfo> cuda_device_info() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return std::nullopt;
  CudaDeviceInfo info;
  info.device = cuda::node_local_rank() % count;
  PPTRAIN_CUDA_CHECK(cudaSetDevice(info.device));
  size_t free_bytes = 0, total_bytes = 0;
  PPTRAIN_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  info.total_bytes = double(total_bytes);
  return info;
}

const char* cuda_backend_build() {
#ifdef PPTRAIN_EMULATED
  return "cuda (emulated on the CPU by the SIMT emulator; NCCL emulated over MPI)";
#else
  return "cuda";
#endif
}

}  // namespace pptrain
