// MpiComm failure paths, one per mode (first argument), on 2 or more ranks:
//   truncate      rank 1 receives a longer message than it posted: MPI_ERR_TRUNCATE
//                 becomes a pptrain::Error naming the call, group and rank
//   short         rank 1 receives a shorter message than it posted: caught by the count
//                 check (MPI itself reports no error)
//   bad_peer      a send to a rank outside the group, a negative tag
//   dropped       requests destroyed before completion (an unmatched receive, an
//                 unmatched large send): reported, cancelled, no hang
//   rank_throws   rank 1 throws while the others wait for it: the job ends at once with
//                 rank 1's message and a non-zero status
//   hang          rank 0 waits for a message never sent, the others in a barrier: a
//                 real hang, for the test harness's report of where each rank was
// The first three print "caught: <message>" on rank 1 and exit 0.
#include <chrono>
#include <thread>

#include "parallel/mpi_comm.h"
#include "support/mpi_program.h"

using namespace pptrain;
using pptrain::mpi_test::say;

namespace {

// Runs `f` and prints the pptrain::Error it must throw.
template <typename F>
void expect_error(F&& f, const std::string& what) {
  try {
    f();
  } catch (const Error& e) {
    say("caught: ", e.what());
    return;
  }
  MPI_EXPECT(false, what, " did not throw");
}

void mismatched_length(MpiComm& world, size_t sent, size_t posted) {
  const int tag = 5;
  std::vector<float> out(sent, 1.0f), in(posted, 0.0f);
  if (world.rank() == 0) world.isend(out.data(), sent * sizeof(float), 1, tag)->wait();
  if (world.rank() == 1) {
    auto recv = world.irecv(in.data(), posted * sizeof(float), 0, tag);
    expect_error([&] { recv->wait(); }, "receiving a message of the wrong length");
  }
}

}  // namespace

int main(int argc, char** argv) {
  return mpi_test::run_mpi_program(argc, argv, [](MpiSession& session, const auto& args) {
    MpiComm world = MpiComm::world();
    MPI_EXPECT(world.size() >= 2 && args.size() == 1, "usage: mpirun -np N comm_errors MODE");
    const std::string mode = args[0];
    // Named as the trainer's groups are, to check that messages carry the name.
    MpiComm pp = world.split(0, world.rank(), "pp");

    if (mode == "truncate") {
      mismatched_length(pp, 8, 4);
    } else if (mode == "short") {
      mismatched_length(pp, 4, 8);
    } else if (mode == "bad_peer") {
      if (pp.rank() == 1) {
        float x = 0;
        expect_error([&] { pp.isend(&x, sizeof x, pp.size(), 0); }, "isend to a rank past the group");
        expect_error([&] { pp.irecv(&x, sizeof x, -1, 0); }, "irecv from rank -1");
        expect_error([&] { pp.broadcast(&x, sizeof x, pp.size()); }, "broadcast from a bad root");
        expect_error([&] { pp.isend(&x, sizeof x, 0, -1); }, "isend with a negative tag");
        MPI_EXPECT(pp.max_tag() >= 32767, "MPI_TAG_UB ", pp.max_tag());
      }
    } else if (mode == "dropped") {
      // Larger than any eager limit, so the send cannot complete without a receiver.
      std::vector<float> big(1 << 20, 1.0f), small(4, 0.0f);
      if (pp.rank() == 0) {
        auto send = pp.isend(big.data(), big.size() * sizeof(float), 1, 9);
        MPI_EXPECT(!send->test(), "an unmatched 4 MB send completed");
      }
      if (pp.rank() == 1) {
        auto recv = pp.irecv(small.data(), small.size() * sizeof(float), 0, 10);
        MPI_EXPECT(!recv->test(), "a receive completed with no sender");
      }
      // The communicator still works afterwards.
      float one = 1.0f;
      pp.allreduce(&one, 1, ReduceOp::Sum);
      MPI_EXPECT(one == float(pp.size()), "allreduce after dropped requests gave ", one);
      say("dropped ok rank ", pp.rank());
    } else if (mode == "rank_throws") {
      pp.barrier();
      if (pp.rank() == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));  // others are waiting
        fail("rank 1 failed on purpose (config.yaml: key 'x')");
      }
      // Everyone else waits for a message rank 1 never sends: only the abort ends this.
      float x = 0;
      pp.irecv(&x, sizeof x, 1, 99)->wait();
      MPI_EXPECT(false, "rank ", pp.rank(), " received a message that was never sent");
    } else if (mode == "hang") {
      say("hanging rank ", pp.rank());
      float x = 0;
      if (pp.rank() == 0) pp.irecv(&x, sizeof x, 1, 77)->wait();
      pp.barrier();
    } else {
      MPI_EXPECT(false, "unknown mode ", mode);
    }
    world.barrier();
    (void)session;
  });
}
