// Checks of the Communicator's reduce-scatter and in-place all-gather, shared by the MPI
// and emulated-NCCL programs of tests/mpi (host memory: MpiComm, and NcclComm over the
// emulated NCCL, whose device memory is host memory). Values are small integers and
// halves, exact in fp32 and in bf16, so results compare exactly.
#pragma once
#include <algorithm>
#include <vector>

#include "core/bf16.h"
#include "core/communicator.h"
#include "support/mpi_program.h"

namespace pptrain::mpi_test {

// Rank q's input at element j of the [size · count] buffer.
inline float scatter_input(int q, size_t j) { return float(q + 1) + 0.5f * float(j % 64); }

// Out of place and in place (recv = send + rank · count), Sum and Max: rank r receives the
// reduction of every rank's part r; in place, the other parts of send stay as they were.
inline void check_reduce_scatter(Communicator& comm, size_t count) {
  const int r = comm.rank(), p = comm.size();
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max})
    for (bool in_place : {false, true}) {
      std::vector<float> send(size_t(p) * count), recv(count, -7.0f);  // [p · count], [count]
      for (size_t j = 0; j < send.size(); ++j) send[j] = scatter_input(r, j);
      float* out = in_place ? send.data() + size_t(r) * count : recv.data();
      comm.reduce_scatter(send.data(), out, count, op);
      for (size_t i = 0; i < count; ++i) {
        const size_t j = size_t(r) * count + i;
        float want = op == ReduceOp::Sum ? 0.0f : -1e30f;
        for (int q = 0; q < p; ++q)
          want = op == ReduceOp::Sum ? want + scatter_input(q, j) : std::max(want, scatter_input(q, j));
        MPI_EXPECT(out[i] == want, "reduce_scatter ", op == ReduceOp::Sum ? "sum" : "max",
                   in_place ? " in place" : "", " [", i, "] = ", out[i], ", want ", want, " (rank ", r, ")");
      }
      if (in_place)
        for (size_t j = 0; j < send.size(); ++j)
          if (j / count != size_t(r))
            MPI_EXPECT(send[j] == scatter_input(r, j), "reduce_scatter in place changed send[", j, "]");
    }
}

// In place, fp32 and bf16: every rank ends with every rank's part where it was. With
// `nonblocking`, both gathers in flight at once and waited for in the reverse order.
inline void check_allgather_in_place(Communicator& comm, size_t count, bool nonblocking = false) {
  const int r = comm.rank(), p = comm.size();
  std::vector<float> f(size_t(p) * count, -1.0f);                            // [p · count]
  std::vector<bfloat16> h(size_t(p) * count, bfloat16::from_float(-1.0f));   // [p · count]
  for (size_t i = 0; i < count; ++i) {
    const size_t j = size_t(r) * count + i;
    f[j] = scatter_input(r, j);
    h[j] = bfloat16::from_float(scatter_input(r, j));
  }
  if (nonblocking) {
    auto gf = comm.iallgather(f.data(), count);
    auto gh = comm.iallgather(h.data(), count);
    gh->wait();
    gf->wait();
    MPI_EXPECT(gf->test() && gh->test(), "a waited request does not test complete (rank ", r, ")");
  } else {
    comm.allgather(f.data(), count);
    comm.allgather(h.data(), count);
  }
  for (size_t j = 0; j < f.size(); ++j) {
    const float want = scatter_input(int(j / count), j);
    MPI_EXPECT(f[j] == want, "allgather fp32 [", j, "] = ", f[j], ", want ", want, " (rank ", r, ")");
    MPI_EXPECT(h[j].to_float() == want, "allgather bf16 [", j, "] = ", h[j].to_float(), ", want ", want);
  }
}

// The non-blocking in-place forms: two reduce-scatters and two all-gathers (fp32, bf16) in
// flight at once, waited for in the reverse order, give what the blocking forms give.
inline void check_nonblocking_collectives(Communicator& comm, size_t count) {
  const int r = comm.rank(), p = comm.size();
  std::vector<float> a(size_t(p) * count), b(size_t(p) * count);  // [p · count] each
  for (size_t j = 0; j < a.size(); ++j) {
    a[j] = scatter_input(r, j);
    b[j] = scatter_input(r, j + 1);
  }
  auto ra = comm.ireduce_scatter(a.data(), count, ReduceOp::Sum);
  auto rb = comm.ireduce_scatter(b.data(), count, ReduceOp::Max);
  rb->wait();
  ra->wait();
  for (size_t i = 0; i < count; ++i) {
    const size_t j = size_t(r) * count + i;
    float sum = 0.0f, most = -1e30f;
    for (int q = 0; q < p; ++q) {
      sum += scatter_input(q, j);
      most = std::max(most, scatter_input(q, j + 1));
    }
    MPI_EXPECT(a[j] == sum, "ireduce_scatter sum [", i, "] = ", a[j], ", want ", sum, " (rank ", r, ")");
    MPI_EXPECT(b[j] == most, "ireduce_scatter max [", i, "] = ", b[j], ", want ", most, " (rank ", r, ")");
  }
  for (size_t j = 0; j < a.size(); ++j)
    if (j / count != size_t(r)) MPI_EXPECT(a[j] == scatter_input(r, j), "ireduce_scatter changed a[", j, "]");
  check_allgather_in_place(comm, count, /*nonblocking=*/true);
}

}  // namespace pptrain::mpi_test
