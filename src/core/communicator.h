// Communicator: the one interface through which pptrain talks between ranks.
// MpiComm (parallel/) implements it over an MPI communicator on CPUs, NcclComm over
// NCCL on GPUs; LocalComm is the group of one. Buffers are backend memory (device
// pointers under CUDA). Collectives and transfers between ranks go through it; MPI is called
// directly only where a communicator cannot serve: the session (parallel/mpi_session),
// the grid's splits, node-local queries (backend/cuda/device, job/preflight's node
// communicator) and parallel HDF5's MPI-IO (checkpoint/).
#pragma once
#include <cstddef>
#include <memory>

#include "core/bf16.h"

namespace pptrain {

enum class ReduceOp { Sum, Max };

// A pending non-blocking transfer or collective.
class Request {
 public:
  virtual ~Request() = default;
  // Makes the result usable by what the caller issues next: on the host (MPI) the host
  // waits for it; where on_device(), only the device's compute stream is ordered after it
  // (NCCL) and the host goes on: test() tells the host when it has completed.
  virtual void wait() = 0;
  virtual bool test() = 0;  // true once complete
  virtual bool on_device() const { return false; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void allreduce(float* data, size_t n, ReduceOp op) = 0;   // in place
  virtual void allreduce(double* data, size_t n, ReduceOp op) = 0;  // in place, host memory
  // In place; bf16 activations of tensor-parallel layers (training.precision: bf16).
  virtual void allreduce(bfloat16* data, size_t n, ReduceOp op) = 0;
  // Reduce-scatter over the group: send is [size · count]; rank r receives in recv[count]
  // the reduction of every rank's send[r · count, (r + 1) · count). recv may be
  // send + rank() · count (in place: the other parts of send are left as they were);
  // otherwise the two must not overlap. ZeRO-1 sums the gradient arena this way.
  virtual void reduce_scatter(const float* send, float* recv, size_t count, ReduceOp op) = 0;
  // All-gather in place: data is [size · count]; rank r's data[r · count, (r + 1) · count)
  // ends up in the same place on every rank (bits copied, no arithmetic).
  virtual void allgather(float* data, size_t count) = 0;
  virtual void allgather(bfloat16* data, size_t count) = 0;
  // Non-blocking forms of the in-place reduce-scatter and all-gather (ZeRO-1 runs one per
  // bucket of the flat arena while the pipeline goes on). The data must not be touched
  // until the request's wait() returns; after it, the results are in place for everything
  // the backend runs next (on GPUs wait() orders the compute stream after the collective
  // without blocking the host). Every rank starts the group's collectives, blocking or
  // not, in the same order. The defaults run the blocking form and return a finished
  // request; MpiComm and NcclComm overlap.
  virtual std::unique_ptr<Request> ireduce_scatter(float* data, size_t count, ReduceOp op);
  virtual std::unique_ptr<Request> iallgather(float* data, size_t count);
  virtual std::unique_ptr<Request> iallgather(bfloat16* data, size_t count);
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Point-to-point transfers move bytes (activations of either precision); the buffer
  // must stay valid until the request completes.
  virtual std::unique_ptr<Request> isend(const void* data, size_t bytes, int peer, int tag) = 0;
  virtual std::unique_ptr<Request> irecv(void* data, size_t bytes, int peer, int tag) = 0;
  // A transport that holds operations back until the device has produced what they send
  // (StagedMpiComm) posts them here: those whose data is ready, or with `all` every one, the
  // host waiting for the device where it must. Its requests' test() and wait() and its
  // blocking calls do this themselves; a caller about to wait for the device for a while
  // (the pipeline's end) calls it first, so that the peers get their data meanwhile.
  // Others hold nothing back.
  virtual void progress(bool all) {}
};

// The group of one: collectives are identities, p2p is a bug.
class LocalComm final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allreduce(float*, size_t, ReduceOp) override {}
  void allreduce(double*, size_t, ReduceOp) override {}
  void allreduce(bfloat16*, size_t, ReduceOp) override {}
  // In place only: a group of one has nothing to move (and no way to copy backend memory).
  void reduce_scatter(const float* send, float* recv, size_t count, ReduceOp op) override;
  void allgather(float*, size_t) override {}
  void allgather(bfloat16*, size_t) override {}
  void broadcast(void*, size_t, int) override {}
  void barrier() override {}
  std::unique_ptr<Request> isend(const void*, size_t, int, int) override;
  std::unique_ptr<Request> irecv(void*, size_t, int, int) override;
};

}  // namespace pptrain
