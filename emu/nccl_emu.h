// The slice of the NCCL API that NcclComm (nccl_comm.cpp) uses, for the emulated build only
// (tests and pptrain-emu), carried by MPI: "device" memory is host memory. Names,
// signatures, enum values and error strings follow nccl.h so nccl_comm.cpp compiles
// unchanged against either header.
//  - ncclGetUniqueId names a new communicator: the creating world rank and a per-process
//    serial number. ncclCommInitRank finds the other members by that name (each reports its
//    rank to the creator over MPI_COMM_WORLD, the creator answers with the member list) and
//    builds an MPI communicator of exactly them with MPI_Comm_create_group, which is
//    collective over the members only: groups may be created in any order, and ranks
//    outside a group take no part. The creator must be a member (NcclComm: group rank 0).
//    The rendezvous messages use tags 30000..31999 on MPI_COMM_WORLD (kInitTagBase in
//    nccl_emu.cpp); pptrain's own point-to-point traffic runs on its group communicators.
//    A mismatch (ranks passing different nranks, a rank taken twice) is ncclInvalidArgument
//    on every member; a member that never arrives is ncclSystemError after a timeout
//    (kInitTimeoutSeconds in nccl_emu.cpp) instead of a hang.
//  - ncclAllReduce is synchronous MPI_Allreduce (bf16 widened to fp32, reduced and rounded
//    once, as MpiComm does), after the stream's queued work.
//  - ncclReduceScatter is synchronous MPI_Reduce_scatter_block (in place, recvbuff =
//    sendbuff + rank · recvcount, through a temporary, as NCCL allows it); ncclAllGather is
//    synchronous MPI_Allgather (in place, sendbuff = recvbuff + rank · sendcount, with
//    MPI_IN_PLACE; out of place otherwise), bf16 moved as 16-bit words. Both after the
//    stream's queued work, like ncclAllReduce.
//  - ncclSend/ncclRecv post MPI_Isend/MPI_Irecv of count x type-size bytes with one tag on
//    the communicator's own MPI communicator (so a pair's messages match in posting order,
//    as in NCCL) and queue the request as work of the stream (cuda_runtime_emu.h): events
//    recorded on the stream afterwards complete when the transfer has.
//  - ncclGroupStart/End only count nesting: every call is issued at once.
// Errors are returned as NCCL's codes, with the detail on stderr as an "NCCL WARN" line (as
// NCCL_DEBUG=WARN prints it).
#pragma once
#include <cstddef>

#include "emu/cuda_runtime_emu.h"

typedef struct ncclComm* ncclComm_t;

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4, ncclNumOps = 5 } ncclRedOp_t;

typedef enum {
  ncclInt8 = 0, ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2, ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6, ncclHalf = 6,  // no MPI type: all-reduce rejects it, send/recv move bytes
  ncclFloat32 = 7, ncclFloat = 7,
  ncclFloat64 = 8, ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

const char* ncclGetErrorString(ncclResult_t result);
ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();
