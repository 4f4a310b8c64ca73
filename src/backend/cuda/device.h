// GPU selection: every rank of a node takes its own device, chosen from its rank among
// the ranks on the same node (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)), so
// `mpirun -np 8` / `srun --ntasks-per-node=8` on 8-GPU nodes needs no CUDA_VISIBLE_DEVICES
// juggling. With fewer devices than ranks on a node, ranks share devices round-robin.
#pragma once

namespace pptrain::cuda {

// This rank's index among the ranks of its node (0 without MPI or when MPI is not
// initialised).
int node_local_rank();

// Selects device node_local_rank() mod (device count) with cudaSetDevice and returns it.
// Throws pptrain::Error naming the rank when no device is visible.
int select_device();

}  // namespace pptrain::cuda
