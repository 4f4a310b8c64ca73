// The emulated NCCL over MPI (see nccl_emu.h).
#include "emu/nccl_emu.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"

struct ncclComm {
  MPI_Comm comm = MPI_COMM_NULL;  // exactly the members, MPI rank == NCCL rank
  int rank = 0, nranks = 1;
};

namespace {

using pptrain::cat;
using pptrain::cuda_emu::StreamWork;

// The fields of an ncclUniqueId (the rest of its 128 bytes stays zero).
struct IdFields {
  uint64_t magic;
  int32_t creator;  // world rank of the caller of ncclGetUniqueId
  uint32_t serial;  // per creating process
};
static_assert(sizeof(IdFields) <= NCCL_UNIQUE_ID_BYTES);
constexpr uint64_t kIdMagic = 0x70707472'6e63636cull;  // "pptrnccl"

// ncclCommInitRank's rendezvous runs over MPI_COMM_WORLD with tags in
// [kInitTagBase, kInitTagBase + kInitTagSpan) (below the MPI minimum of MPI_TAG_UB, 32767);
// the serial picks the tag, so a creator's concurrent inits do not mix.
constexpr int kInitTagBase = 30000, kInitTagSpan = 2000;
constexpr double kInitTimeoutSeconds = 300;
constexpr int kP2pTag = 0;  // NCCL matches a pair's messages by order: one tag does that in MPI

uint32_t next_serial = 0;
int group_depth = 0;

template <typename... A>
ncclResult_t warn(ncclResult_t result, const A&... a) {
  std::string line = cat("NCCL WARN (emulated) ", a..., "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
  return result;
}

std::string mpi_error(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return cat("MPI error ", rc);
  return std::string(text, len);
}

int world_rank() {
  int r = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// Completes `req` or gives up after kInitTimeoutSeconds (then cancels it).
int wait_with_timeout(MPI_Request* req, bool* timed_out) {
  *timed_out = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kInitTimeoutSeconds);
  for (;;) {
    int done = 0;
    if (int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE); rc != MPI_SUCCESS) return rc;
    if (done) return MPI_SUCCESS;
    if (std::chrono::steady_clock::now() > deadline) {
      *timed_out = true;
      MPI_Cancel(req);
      return MPI_Request_free(req);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

size_t type_size(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

// The MPI type all-reduce uses for `type` (bf16 is reduced as fp32); MPI_DATATYPE_NULL if none.
MPI_Datatype mpi_type(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: return MPI_INT8_T;
    case ncclUint8: return MPI_UINT8_T;
    case ncclInt32: return MPI_INT32_T;
    case ncclUint32: return MPI_UINT32_T;
    case ncclInt64: return MPI_INT64_T;
    case ncclUint64: return MPI_UINT64_T;
    case ncclFloat32: case ncclBfloat16: return MPI_FLOAT;
    case ncclFloat64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpi_op(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return MPI_SUM;
    case ncclProd: return MPI_PROD;
    case ncclMax: return MPI_MAX;
    case ncclMin: return MPI_MIN;
    default: return MPI_OP_NULL;  // ncclAvg and custom ops are not emulated
  }
}

// ncclSend/ncclRecv in flight: its MPI requests (one per chunk of at most INT_MAX bytes).
class TransferWork final : public StreamWork {
 public:
  TransferWork(std::vector<MPI_Request> requests, std::string what)
      : requests_(std::move(requests)), what_(std::move(what)) {}
  State poll(bool block) override {
    if (state_ != State::pending) return state_;
    // Blocking also polls MPI_Testall: Open MPI 4.1's MPI_Waitall can miss a request that
    // completes with an error and spin forever (see MpiRequest::wait, parallel/mpi_comm.cpp).
    int done = 0;
    do {
      if (int rc = MPI_Testall(int(requests_.size()), requests_.data(), &done, MPI_STATUSES_IGNORE);
          rc != MPI_SUCCESS) {
        error_ = cat(what_, ": MPI_Testall failed: ", mpi_error(rc));
        state_ = State::failed;
        return state_;
      }
    } while (block && !done);
    if (done) state_ = State::done;
    return state_;
  }
  std::string error() const override { return error_; }

 private:
  std::vector<MPI_Request> requests_;
  std::string what_, error_;
  State state_ = State::pending;
};

ncclResult_t check_comm(ncclComm_t comm, const char* call) {
  if (!comm || comm->comm == MPI_COMM_NULL) return warn(ncclInvalidArgument, call, ": null communicator");
  return ncclSuccess;
}

ncclResult_t post_transfer(void* buff, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                           cudaStream_t stream, bool is_send) {
  const char* call = is_send ? "ncclSend" : "ncclRecv";
  if (ncclResult_t r = check_comm(comm, call); r != ncclSuccess) return r;
  const size_t elem = type_size(type);
  if (elem == 0) return warn(ncclInvalidArgument, call, ": invalid data type ", int(type));
  if (peer < 0 || peer >= comm->nranks)
    return warn(ncclInvalidArgument, call, ": peer ", peer, " is outside 0..", comm->nranks - 1);
  const size_t bytes = count * elem;
  if (bytes && !buff) return warn(ncclInvalidArgument, call, ": null buffer");
  // Stream order: what the stream holds before the transfer runs first (lazy streams), up to
  // a transfer still in flight (waiting for one here could stall both ranks' hosts).
  pptrain::cuda_emu::run_queued_ops(stream);
  std::vector<MPI_Request> requests;
  char* p = static_cast<char*>(buff);
  // Both sides split the same byte count the same way, so the chunks pair up in order.
  for (size_t offset = 0; offset < bytes || (bytes == 0 && requests.empty()); offset += INT_MAX) {
    const int n = int(std::min<size_t>(INT_MAX, bytes - offset));
    MPI_Request req;
    int rc = is_send ? MPI_Isend(p + offset, n, MPI_BYTE, peer, kP2pTag, comm->comm, &req)
                     : MPI_Irecv(p + offset, n, MPI_BYTE, peer, kP2pTag, comm->comm, &req);
    if (rc != MPI_SUCCESS) {
      if (!requests.empty()) MPI_Waitall(int(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
      return warn(ncclSystemError, call, ": ", is_send ? "MPI_Isend" : "MPI_Irecv", " failed: ", mpi_error(rc));
    }
    requests.push_back(req);
  }
  pptrain::cuda_emu::enqueue_stream_work(
      stream, std::make_shared<TransferWork>(std::move(requests),
                                             cat(call, " of ", bytes, " bytes ", is_send ? "to" : "from", " rank ",
                                                 peer, " (rank ", comm->rank, " of ", comm->nranks, ")")));
  return ncclSuccess;
}

}  // namespace

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return warn(ncclInvalidArgument, "ncclGetUniqueId: null id");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return warn(ncclInvalidUsage, "ncclGetUniqueId: MPI is not initialised (it carries the emulation)");
  IdFields f{kIdMagic, world_rank(), next_serial++};
  std::memset(id->internal, 0, sizeof id->internal);
  std::memcpy(id->internal, &f, sizeof f);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
  const char* call = "ncclCommInitRank";
  if (!out) return warn(ncclInvalidArgument, call, ": null communicator pointer");
  *out = nullptr;
  IdFields f;
  std::memcpy(&f, id.internal, sizeof f);
  int world_size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (f.magic != kIdMagic || f.creator < 0 || f.creator >= world_size)
    return warn(ncclInvalidArgument, call, ": the id does not come from ncclGetUniqueId");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return warn(ncclInvalidArgument, call, ": rank ", rank, " of ", nranks, " is out of range");
  const int me = world_rank();
  const int tag = kInitTagBase + int(f.serial % kInitTagSpan);
  // Each member says hello to the creator: {nccl rank, nranks, its world rank}. The answer:
  // the members' world ranks by nccl rank, or {-1} when they disagree.
  std::vector<int> members(std::max(nranks, 1), -1);  // [nranks]
  bool timed_out = false;
  int rc = MPI_SUCCESS;
  if (me == f.creator) {
    members[rank] = me;
    std::string problem;
    std::vector<int> senders;  // world ranks that said hello, to answer
    for (int i = 1; i < nranks; ++i) {
      int hello[3];
      MPI_Request req;
      rc = MPI_Irecv(hello, 3, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &req);
      if (rc == MPI_SUCCESS) rc = wait_with_timeout(&req, &timed_out);
      if (rc != MPI_SUCCESS || timed_out) break;
      const int r = hello[0], sender = hello[2];
      senders.push_back(sender);
      if (hello[1] != nranks)
        problem = cat("world rank ", sender, " passed nranks ", hello[1], ", world rank ", me, " passed ", nranks);
      else if (r < 0 || r >= nranks || members[r] != -1)
        problem = cat("rank ", r, " passed by world rank ", sender, " is out of range or taken twice");
      else
        members[r] = sender;
    }
    if (rc != MPI_SUCCESS) return warn(ncclSystemError, call, ": MPI_Irecv/MPI_Test failed: ", mpi_error(rc));
    if (timed_out)
      return warn(ncclSystemError, call, ": only ", senders.size() + 1, " of ", nranks, " ranks arrived in ",
                  kInitTimeoutSeconds, " s");
    std::vector<int> answer = problem.empty() ? members : std::vector<int>{-1};
    for (int sender : senders) {
      rc = MPI_Send(answer.data(), int(answer.size()), MPI_INT, sender, tag, MPI_COMM_WORLD);
      if (rc != MPI_SUCCESS) return warn(ncclSystemError, call, ": MPI_Send failed: ", mpi_error(rc));
    }
    if (!problem.empty()) return warn(ncclInvalidArgument, call, ": ", problem);
  } else {
    int hello[3] = {rank, nranks, me};
    rc = MPI_Send(hello, 3, MPI_INT, f.creator, tag, MPI_COMM_WORLD);
    MPI_Request req;
    if (rc == MPI_SUCCESS) rc = MPI_Irecv(members.data(), int(members.size()), MPI_INT, f.creator, tag, MPI_COMM_WORLD, &req);
    if (rc == MPI_SUCCESS) rc = wait_with_timeout(&req, &timed_out);
    if (rc != MPI_SUCCESS) return warn(ncclSystemError, call, ": MPI_Send/MPI_Irecv failed: ", mpi_error(rc));
    if (timed_out)
      return warn(ncclSystemError, call, ": no answer from the creator, world rank ", f.creator, ", in ",
                  kInitTimeoutSeconds, " s");
    if (members[0] == -1)
      return warn(ncclInvalidArgument, call, ": the members disagree on nranks or ranks (see world rank ",
                  f.creator, ")");
  }
  MPI_Group world_group, group;
  MPI_Comm comm = MPI_COMM_NULL;
  rc = MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  if (rc == MPI_SUCCESS) rc = MPI_Group_incl(world_group, nranks, members.data(), &group);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, tag, &comm);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) return warn(ncclSystemError, call, ": MPI_Comm_create_group failed: ", mpi_error(rc));
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  auto c = std::make_unique<ncclComm>();
  c->comm = comm;
  MPI_Comm_rank(comm, &c->rank);
  MPI_Comm_size(comm, &c->nranks);
  if (c->rank != rank || c->nranks != nranks) {
    MPI_Comm_free(&c->comm);
    return warn(ncclInternalError, call, ": the MPI communicator has rank ", c->rank, " of ", c->nranks,
                ", want ", rank, " of ", nranks);
  }
  *out = c.release();
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  int rc = comm->comm == MPI_COMM_NULL ? MPI_SUCCESS : MPI_Comm_free(&comm->comm);
  delete comm;
  if (rc != MPI_SUCCESS) return warn(ncclSystemError, "ncclCommDestroy: MPI_Comm_free failed: ", mpi_error(rc));
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const char* call = "ncclAllReduce";
  if (ncclResult_t r = check_comm(comm, call); r != ncclSuccess) return r;
  const MPI_Datatype mtype = mpi_type(type);
  const MPI_Op mop = mpi_op(op);
  if (mtype == MPI_DATATYPE_NULL) return warn(ncclInvalidArgument, call, ": data type ", int(type), " is not emulated");
  if (mop == MPI_OP_NULL) return warn(ncclInvalidArgument, call, ": reduction ", int(op), " is not emulated");
  if (count && (!sendbuff || !recvbuff)) return warn(ncclInvalidArgument, call, ": null buffer");
  // Stream order: what was queued on the stream before this call finishes first.
  if (cudaError_t err = pptrain::cuda_emu::finish_stream(stream); err != cudaSuccess)
    return warn(ncclUnhandledCudaError, call, ": cudaStreamSynchronize: ", cudaGetErrorString(err));
  const size_t elem = type_size(type);
  // bf16 is reduced in fp32: widened here, rounded once into recvbuff below.
  std::vector<float> wide;  // [count] for bf16
  const char* src = static_cast<const char*>(sendbuff);
  char* dst = static_cast<char*>(recvbuff);
  size_t mpi_elem = elem;
  if (type == ncclBfloat16) {
    wide.resize(count);
    auto* in = static_cast<const pptrain::bfloat16*>(sendbuff);
    for (size_t i = 0; i < count; ++i) wide[i] = in[i].to_float();
    src = dst = reinterpret_cast<char*>(wide.data());
    mpi_elem = sizeof(float);
  }
  // Elementwise, so chunks of at most INT_MAX elements reduce separately.
  for (size_t offset = 0; offset < count; offset += INT_MAX) {
    const int n = int(std::min<size_t>(INT_MAX, count - offset));
    const void* in = src == dst ? MPI_IN_PLACE : src + offset * mpi_elem;
    if (int rc = MPI_Allreduce(in, dst + offset * mpi_elem, n, mtype, mop, comm->comm); rc != MPI_SUCCESS)
      return warn(ncclSystemError, call, ": MPI_Allreduce failed: ", mpi_error(rc));
  }
  if (type == ncclBfloat16) {
    auto* out = static_cast<pptrain::bfloat16*>(recvbuff);
    for (size_t i = 0; i < count; ++i) out[i] = pptrain::bfloat16::from_float(wide[i]);
  }
  return ncclSuccess;
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const char* call = "ncclReduceScatter";
  if (ncclResult_t r = check_comm(comm, call); r != ncclSuccess) return r;
  const MPI_Op mop = mpi_op(op);
  if (type != ncclFloat32) return warn(ncclInvalidArgument, call, ": data type ", int(type), " is not emulated");
  if (mop == MPI_OP_NULL) return warn(ncclInvalidArgument, call, ": reduction ", int(op), " is not emulated");
  if (recvcount == 0) return ncclSuccess;
  if (!sendbuff || !recvbuff) return warn(ncclInvalidArgument, call, ": null buffer");
  if (recvcount > size_t(INT_MAX)) return warn(ncclInvalidArgument, call, ": ", recvcount, " elements per rank");
  if (cudaError_t err = pptrain::cuda_emu::finish_stream(stream); err != cudaSuccess)
    return warn(ncclUnhandledCudaError, call, ": cudaStreamSynchronize: ", cudaGetErrorString(err));
  // MPI may not receive where it reads: the part lands in a temporary first.
  std::vector<float> part(recvcount);  // [recvcount]
  if (int rc = MPI_Reduce_scatter_block(sendbuff, part.data(), int(recvcount), MPI_FLOAT, mop, comm->comm);
      rc != MPI_SUCCESS)
    return warn(ncclSystemError, call, ": MPI_Reduce_scatter_block failed: ", mpi_error(rc));
  std::memcpy(recvbuff, part.data(), recvcount * sizeof(float));
  return ncclSuccess;
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  const char* call = "ncclAllGather";
  if (ncclResult_t r = check_comm(comm, call); r != ncclSuccess) return r;
  const size_t elem = type_size(type);
  if (elem == 0) return warn(ncclInvalidArgument, call, ": invalid data type ", int(type));
  if (sendcount == 0) return ncclSuccess;
  if (!sendbuff || !recvbuff) return warn(ncclInvalidArgument, call, ": null buffer");
  if (sendcount * elem > size_t(INT_MAX)) return warn(ncclInvalidArgument, call, ": ", sendcount, " elements per rank");
  if (cudaError_t err = pptrain::cuda_emu::finish_stream(stream); err != cudaSuccess)
    return warn(ncclUnhandledCudaError, call, ": cudaStreamSynchronize: ", cudaGetErrorString(err));
  // Bytes: an all-gather copies, whatever the type.
  const int bytes = int(sendcount * elem);
  char* out = static_cast<char*>(recvbuff);
  const bool in_place = sendbuff == out + size_t(comm->rank) * bytes;
  if (int rc = MPI_Allgather(in_place ? MPI_IN_PLACE : sendbuff, bytes, MPI_BYTE, out, bytes, MPI_BYTE, comm->comm);
      rc != MPI_SUCCESS)
    return warn(ncclSystemError, call, ": MPI_Allgather failed: ", mpi_error(rc));
  return ncclSuccess;
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return post_transfer(const_cast<void*>(sendbuff), count, type, peer, comm, stream, true);
}
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return post_transfer(recvbuff, count, type, peer, comm, stream, false);
}

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return warn(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  --group_depth;
  return ncclSuccess;
}
