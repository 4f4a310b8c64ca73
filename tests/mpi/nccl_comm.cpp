// NcclComm (src/parallel/nccl_comm.cpp) over the emulated NCCL (emu/nccl_emu.h), on any
// number of ranks >= 2. Built with PPTRAIN_EMULATED against the emulated cuda backend
// (mk/mpi_tests.mk). Modes:
//  - (none): ring p2p with several messages per pair received in posting order; receives
//    that test() not ready until their sender has posted, then test() polling and wait();
//    fp32, bf16 and fp64 all-reduce sum and max over the world and over groups that only
//    some ranks create (as the job's embedding group); mismatched ncclCommInitRank
//    arguments fail on every member. Prints "nccl ok rank R of P".
//  - bad_peer: rank 0 isends to a peer outside the group; the error is caught and printed
//    as "caught: <message>".
#include <chrono>
#include <thread>

#include "backend/cuda/cuda_check.h"
#include "parallel/nccl_comm.h"
#include "support/collective_checks.h"
#include "support/mpi_program.h"

using namespace pptrain;
using pptrain::mpi_test::say;

namespace {

// An owned stream, the compute stream of the NcclComms below.
struct ComputeStream {
  cudaStream_t s = nullptr;
  ComputeStream() { PPTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~ComputeStream() { (void)cudaStreamDestroy(s); }
};

// Message k from rank `from`: distinct per (sender, message, element).
std::vector<float> payload(int from, int k, size_t n) {
  std::vector<float> v(n);  // [n]
  for (size_t i = 0; i < n; ++i) v[i] = float(from * 1000 + k * 100) + float(i) * 0.25f;
  return v;
}

void ring(MpiComm& world, NcclComm& nccl) {
  const int p = nccl.size(), r = nccl.rank();
  const int right = (r + 1) % p, left = (r + p - 1) % p;
  const size_t lengths[] = {64, 0, 5, 3000};  // one pair's messages, in posting order
  constexpr int kMessages = 4;
  std::vector<std::vector<float>> out(kMessages), in(kMessages);
  std::vector<std::unique_ptr<Request>> recvs, sends;
  for (int k = 0; k < kMessages; ++k) {
    in[k].assign(lengths[k], -1.0f);
    // Tags are ignored by NCCL: all differ here, yet order alone must match the messages.
    recvs.push_back(nccl.irecv(in[k].data(), lengths[k] * sizeof(float), left, 7 - k));
  }
  // Nobody has sent yet (the barrier below comes first), so no receive can be complete.
  for (int k = 0; k < kMessages; ++k)
    MPI_EXPECT(!recvs[k]->test(), "receive ", k, " complete before its message was sent");
  world.barrier();
  for (int k = 0; k < kMessages; ++k) {
    out[k] = payload(r, k, lengths[k]);
    sends.push_back(nccl.isend(out[k].data(), lengths[k] * sizeof(float), right, k));
  }
  // The first by polling test() (bounded), the others by wait().
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!recvs[0]->test()) {
    MPI_EXPECT(std::chrono::steady_clock::now() < deadline, "message 0 never arrived");
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  MPI_EXPECT(recvs[0]->test(), "test() stays true once complete");
  for (int k = 1; k < kMessages; ++k) recvs[k]->wait();
  for (auto& s : sends) s->wait();
  for (int k = 0; k < kMessages; ++k) {
    std::vector<float> want = payload(left, k, lengths[k]);
    for (size_t i = 0; i < lengths[k]; ++i)
      MPI_EXPECT(in[k][i] == want[i], "message ", k, " from rank ", left, " element ", i, " = ", in[k][i],
                 ", want ", want[i]);
  }
}

// All-reduces over `nccl` whose members hold value (rank + 1) + 0.5 i at element i.
void allreduce(NcclComm& nccl) {
  const int p = nccl.size(), r = nccl.rank();
  constexpr size_t n = 37;
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
    auto want = [&](size_t i) {
      return op == ReduceOp::Sum ? double(p) * (p + 1) / 2 + p * 0.5 * double(i) : p + 0.5 * double(i);
    };
    std::vector<float> f(n);       // [n]
    std::vector<bfloat16> h(n);    // [n]
    std::vector<double> d(n);      // [n]
    for (size_t i = 0; i < n; ++i) {
      f[i] = float(r + 1 + 0.5 * double(i));
      h[i] = bfloat16::from_float(f[i]);
      d[i] = f[i];
    }
    nccl.allreduce(f.data(), n, op);
    nccl.allreduce(h.data(), n, op);
    nccl.allreduce(d.data(), n, op);
    const char* name = op == ReduceOp::Sum ? "sum" : "max";
    for (size_t i = 0; i < n; ++i) {
      MPI_EXPECT(f[i] == float(want(i)), "fp32 ", name, "[", i, "] = ", f[i], ", want ", want(i));
      // One rounding of the exact result to bf16 (8 significant bits).
      const float h_want = bfloat16::from_float(float(want(i))).to_float();
      MPI_EXPECT(h[i].to_float() == h_want, "bf16 ", name, "[", i, "] = ", h[i].to_float(), ", want ", h_want);
      MPI_EXPECT(d[i] == want(i), "fp64 ", name, "[", i, "] = ", d[i], ", want ", want(i));
    }
  }
}

// ncclCommInitRank with a member passing the wrong nranks fails on every member, no hang.
void mismatched_init(MpiComm& world) {
  ncclUniqueId id{};
  if (world.rank() == 0) MPI_EXPECT(ncclGetUniqueId(&id) == ncclSuccess);
  world.broadcast(&id, sizeof id, 0);
  const int nranks = world.size() + (world.rank() == world.size() - 1 ? 1 : 0);
  ncclComm_t comm = nullptr;
  ncclResult_t result = ncclCommInitRank(&comm, nranks, id, world.rank());
  MPI_EXPECT(result == ncclInvalidArgument, "mismatched nranks gave ", ncclGetErrorString(result));
  MPI_EXPECT(comm == nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  return mpi_test::run_mpi_program(argc, argv, [](MpiSession&, const auto& args) {
    MpiComm world = MpiComm::world();
    const int p = world.size(), r = world.rank();
    MPI_EXPECT(p >= 2, "needs at least 2 ranks");
    ComputeStream stream;
    NcclComm nccl(world, stream.s);
    if (!args.empty() && args[0] == "bad_peer") {
      if (r == 0) {
        try {
          nccl.isend(nullptr, 0, p, 0);
          MPI_EXPECT(false, "isend to peer ", p, " did not throw");
        } catch (const Error& e) {
          say("caught: ", e.what());
        }
      }
      world.barrier();
      return;
    }
    ring(world, nccl);
    allreduce(nccl);
    mpi_test::check_reduce_scatter(nccl, 6);
    mpi_test::check_allgather_in_place(nccl, 5);
    mpi_test::check_nonblocking_collectives(nccl, 5);
    mpi_test::check_nonblocking_collectives(nccl, 0);
    // Groups that only some ranks create, in a different order on different ranks: the
    // first and last rank (like the embedding group of a deep pipeline), and the pairs
    // {0,1}, {2,3}, ... created after it by its members and before it by the others.
    MpiComm ends = world.split(r == 0 || r == p - 1 ? 0 : 1 + r, r, "ends");
    MpiComm pair = world.split(r / 2, r, "pair");
    {
      const bool in_ends = ends.size() == 2;
      std::unique_ptr<NcclComm> ends_nccl, pair_nccl;
      if (!in_ends && pair.size() == 2) pair_nccl = std::make_unique<NcclComm>(pair, stream.s);
      if (in_ends) ends_nccl = std::make_unique<NcclComm>(ends, stream.s);
      if (in_ends && pair.size() == 2) pair_nccl = std::make_unique<NcclComm>(pair, stream.s);
      if (ends_nccl) allreduce(*ends_nccl);
      if (pair_nccl) {
        allreduce(*pair_nccl);
        ring(pair, *pair_nccl);
      }
    }
    mismatched_init(world);
    world.barrier();
    say("nccl ok rank ", r, " of ", p);
  });
}
