// MpiComm collectives on any number of ranks: allreduce (float, double and bf16, Sum and Max,
// whole and chunked), broadcast from every root (whole and chunked), barrier, allgather
// (blocking, and non-blocking across other traffic), reduce-scatter (out of place and in
// place) and the in-place all-gather (fp32, bf16), and a split communicator. Prints "collectives ok rank R" on success.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "parallel/mpi_comm.h"
#include "support/collective_checks.h"
#include "support/mpi_program.h"

using namespace pptrain;
using pptrain::mpi_test::say;

namespace {

// Values are small integers and halves, exact in float, so sums compare exactly.
void check_allreduce_float(MpiComm& comm, size_t n) {
  const int r = comm.rank(), p = comm.size();
  std::vector<float> sum(n), max(n);  // [n]
  for (size_t i = 0; i < n; ++i) {
    sum[i] = float(r + 1) + 0.5f * float(i);
    max[i] = float((r * 7 + int(i)) % (p + 3)) - 2.0f;  // some negative
  }
  comm.allreduce(sum.data(), n, ReduceOp::Sum);
  comm.allreduce(max.data(), n, ReduceOp::Max);
  for (size_t i = 0; i < n; ++i) {
    float want_sum = float(p * (p + 1) / 2) + 0.5f * float(i) * float(p);
    float want_max = -1e30f;
    for (int q = 0; q < p; ++q) want_max = std::max(want_max, float((q * 7 + int(i)) % (p + 3)) - 2.0f);
    MPI_EXPECT(sum[i] == want_sum, comm.where(), " float sum[", i, "] = ", sum[i], ", want ", want_sum,
               " (max_count ", comm.max_count(), ")");
    MPI_EXPECT(max[i] == want_max, comm.where(), " float max[", i, "] = ", max[i], ", want ", want_max);
  }
}

// Doubles whose sum needs more than float precision: 1e9 + r * 1e-3.
void check_allreduce_double(MpiComm& comm, size_t n) {
  const int r = comm.rank(), p = comm.size();
  std::vector<double> sum(n), max(n);  // [n]
  for (size_t i = 0; i < n; ++i) {
    sum[i] = 1e9 + double(r) * 1e-3 + double(i);
    max[i] = -double(r) - double(i);
  }
  comm.allreduce(sum.data(), n, ReduceOp::Sum);
  comm.allreduce(max.data(), n, ReduceOp::Max);
  for (size_t i = 0; i < n; ++i) {
    double want = p * (1e9 + double(i)) + 1e-3 * double(p * (p - 1) / 2);
    MPI_EXPECT(std::fabs(sum[i] - want) < 1e-6, comm.where(), " double sum[", i, "] = ", sum[i],
               ", want ", want);
    MPI_EXPECT(max[i] == -double(i), comm.where(), " double max[", i, "] = ", max[i]);
  }
}

// bf16: summed in fp32 and rounded once, so the result is the bf16 rounding of the exact
// sum. Values 1 + r/256 + i/8 are exact in bf16 (8 significant bits for small i, r); their
// sum over p ranks generally is not, which checks the single rounding.
void check_allreduce_bf16(MpiComm& comm, size_t n) {
  const int r = comm.rank(), p = comm.size();
  std::vector<bfloat16> sum(n), max(n);  // [n]
  auto value = [](int rank, size_t i) { return 1.0f + float(rank) / 256.0f + float(i % 4) / 8.0f; };
  for (size_t i = 0; i < n; ++i) {
    sum[i] = bfloat16::from_float(value(r, i));
    max[i] = bfloat16::from_float(-value(r, i));
  }
  comm.allreduce(sum.data(), n, ReduceOp::Sum);
  comm.allreduce(max.data(), n, ReduceOp::Max);
  for (size_t i = 0; i < n; ++i) {
    float exact = 0;
    for (int q = 0; q < p; ++q) exact += bfloat16::from_float(value(q, i)).to_float();
    const float want = bfloat16::from_float(exact).to_float();
    const float want_max = bfloat16::from_float(-value(0, i)).to_float();
    MPI_EXPECT(sum[i].to_float() == want, comm.where(), " bf16 sum[", i, "] = ", sum[i].to_float(),
               ", want ", want);
    MPI_EXPECT(max[i].to_float() == want_max, comm.where(), " bf16 max[", i, "] = ", max[i].to_float());
  }
}

// The bytes root `root` broadcasts: a pattern that names it.
std::string pattern(int root, size_t bytes) {
  std::string s(bytes, '\0');  // [bytes]
  for (size_t i = 0; i < bytes; ++i) s[i] = char(root * 31 + i * 7);
  return s;
}

// Every rank in turn broadcasts; everyone checks every byte.
void check_broadcast(MpiComm& comm, size_t bytes) {
  for (int root = 0; root < comm.size(); ++root) {
    std::string buf = comm.rank() == root ? pattern(root, bytes) : std::string(bytes, '\xEE');
    comm.broadcast(buf.data(), bytes, root);
    MPI_EXPECT(buf == pattern(root, bytes), comm.where(), " broadcast of ", bytes,
               " bytes from rank ", root, " (max_count ", comm.max_count(), ")");
  }
}

// Rank r contributes n values r·100 + i; everyone gets all of them in rank order. The
// non-blocking form stays pending across a ring exchange and a barrier of another
// communicator (a duplicate of `comm`), as the trainer's step reduction stays pending
// across the next step's pipeline.
void check_allgather(MpiComm& comm, size_t n) {
  const int r = comm.rank(), p = comm.size();
  auto mine = [n](int rank) {
    std::vector<double> v(n);  // [n]
    for (size_t i = 0; i < n; ++i) v[i] = rank * 100.0 + double(i);
    return v;
  };
  auto check = [&](const std::vector<double>& all, const char* how) {
    MPI_EXPECT(all.size() == n * size_t(p), comm.where(), " ", how, " size ", all.size());
    for (int q = 0; q < p; ++q)
      for (size_t i = 0; i < n; ++i)
        MPI_EXPECT(all[q * n + i] == mine(q)[i], comm.where(), " ", how, "[", q, "][", i, "] = ", all[q * n + i]);
  };
  check(comm.allgather(mine(r)), "allgather");

  MpiComm other = comm.split(0, r, "other");
  auto pending = comm.iallgather(mine(r));
  int token = r, got = -1;
  auto recv = other.irecv(&got, sizeof got, (r + p - 1) % p, 5);
  auto send = other.isend(&token, sizeof token, (r + 1) % p, 5);
  recv->wait();
  send->wait();
  other.barrier();
  MPI_EXPECT(got == (r + p - 1) % p, other.where(), " ring got ", got);
  check(pending->wait(), "iallgather");
  MPI_EXPECT(pending->test(), "test() after wait()");
}

}  // namespace

int main(int argc, char** argv) {
  return mpi_test::run_mpi_program(argc, argv, [](MpiSession& session, const auto&) {
    MpiComm world = MpiComm::world();
    MPI_EXPECT(world.rank() == session.rank() && world.size() == session.world_size());
    MPI_EXPECT(world.name() == "world");

    check_allreduce_float(world, 1);
    check_allreduce_float(world, 1000);
    check_allreduce_double(world, 17);
    check_allreduce_bf16(world, 13);
    check_allreduce_float(world, 0);  // no elements: no call, no hang
    check_broadcast(world, 1);
    check_broadcast(world, 4096);
    check_allgather(world, 6);
    check_allgather(world, 0);
    mpi_test::check_reduce_scatter(world, 5);
    mpi_test::check_reduce_scatter(world, 0);
    mpi_test::check_allgather_in_place(world, 7);
    mpi_test::check_nonblocking_collectives(world, 5);
    mpi_test::check_nonblocking_collectives(world, 0);
    world.barrier();

    // Chunking: with at most 3 elements (or bytes) per MPI call the results must not
    // change; counts that are and are not multiples of the chunk.
    world.set_max_count(3);
    check_allreduce_float(world, 10);
    check_allreduce_float(world, 9);
    check_allreduce_double(world, 7);
    check_allreduce_bf16(world, 8);
    check_broadcast(world, 23);
    world.set_max_count(INT_MAX);

    // A split communicator (even / odd world ranks): collectives stay inside it, and
    // its ranks translate back to world ranks.
    MpiComm half = world.split(world.rank() % 2, world.rank(), "half");
    MPI_EXPECT(half.name() == "half");
    MPI_EXPECT(half.size() == (world.size() + 1 - world.rank() % 2) / 2, "half size ", half.size());
    MPI_EXPECT(half.rank() == world.rank() / 2, "half rank ", half.rank());
    float members = float(world.rank());
    half.allreduce(&members, 1, ReduceOp::Sum);
    float want = 0;
    for (int q = world.rank() % 2; q < world.size(); q += 2) want += float(q);
    MPI_EXPECT(members == want, "sum of world ranks in 'half' = ", members, ", want ", want);
    for (int q = 0; q < half.size(); ++q)
      MPI_EXPECT(half.world_rank_of(q) == 2 * q + world.rank() % 2, "world_rank_of(", q, ")");
    check_allreduce_float(half, 5);
    check_broadcast(half, 8);
    mpi_test::check_reduce_scatter(half, 3);
    mpi_test::check_allgather_in_place(half, 2);
    mpi_test::check_nonblocking_collectives(half, 5);
    mpi_test::check_nonblocking_collectives(half, 0);

    // Moving an owned communicator transfers the handle; only the last owner frees it.
    MpiComm moved = std::move(half);
    MPI_EXPECT(moved.handle() != MPI_COMM_NULL && half.handle() == MPI_COMM_NULL);
    moved.barrier();

    world.barrier();
    say("collectives ok rank ", world.rank(), " of ", world.size());
  });
}
