// How a rank waits for MPI (mpi_comm.h: MpiWait), on 2 ranks: rank 0 sleeps `delay_ms`
// (argument, default 300) before each of three transfers, and rank 1 waits for each the
// way a pipeline does: a receive (MpiRequest::wait), a non-blocking reduce-scatter
// (MpiCollectiveRequest::wait) and a gather of doubles (PendingAllgather::wait). For each,
// rank 1 prints the CPU time its thread spent in the wait and the wall time:
//   "wait MODE WHAT cpu_ms C wall_ms W"   (MODE: poll or sleep, as MpiSession chose)
// Rank 0 checks nothing; rank 1 checks the data arrived.
#include <time.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "parallel/mpi_comm.h"
#include "support/mpi_program.h"

using namespace pptrain;
using pptrain::mpi_test::say;

namespace {

double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) * 1e3 + double(t.tv_nsec) * 1e-6;
}

// Runs `wait` on rank 1 and prints what it cost; rank 0 first sleeps `delay_ms`, then
// runs `start` (its side of the transfer).
template <typename Start, typename Wait>
void timed(MpiComm& world, const char* what, int delay_ms, Start start, Wait wait) {
  if (world.rank() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    start();
    return;
  }
  const double cpu0 = thread_cpu_ms();
  const auto wall0 = std::chrono::steady_clock::now();
  wait();
  const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall0).count();
  say("wait ", mpi_wait() == MpiWait::Sleep ? "sleep" : "poll", " ", what, " cpu_ms ", thread_cpu_ms() - cpu0,
      " wall_ms ", wall);
}

}  // namespace

int main(int argc, char** argv) {
  return mpi_test::run_mpi_program(argc, argv, [](MpiSession&, const auto& args) {
    MpiComm world = MpiComm::world();
    MPI_EXPECT(world.size() == 2, "runs on 2 ranks");
    const int delay_ms = args.empty() ? 300 : std::stoi(args[0]);
    const int r = world.rank();

    std::vector<float> message(256, float(r));  // [256]
    timed(world, "recv", delay_ms, [&] { world.isend(message.data(), message.size() * 4, 1, 7)->wait(); },
          [&] {
            world.irecv(message.data(), message.size() * 4, 0, 7)->wait();
            MPI_EXPECT(message[255] == 0.0f, "the message from rank 0 arrived");
          });

    // Both ranks take part in each collective; rank 1 starts its part at once and waits.
    std::vector<float> parts(2 * 64, 1.0f);  // [2 · 64]: each rank's 64 summed over both
    std::unique_ptr<Request> reduction;
    timed(world, "reduce_scatter", delay_ms, [&] { world.ireduce_scatter(parts.data(), 64, ReduceOp::Sum)->wait(); },
          [&] {
            world.ireduce_scatter(parts.data(), 64, ReduceOp::Sum)->wait();
            MPI_EXPECT(parts[64] == 2.0f, "the reduce-scatter summed both ranks into rank 1's part");
          });

    timed(world, "allgather", delay_ms, [&] { world.iallgather(std::vector<double>{1.0})->wait(); },
          [&] {
            const std::vector<double> all = world.iallgather(std::vector<double>{2.0})->wait();
            MPI_EXPECT(all.size() == 2 && all[0] == 1.0 && all[1] == 2.0, "the gather holds both ranks' values");
          });
    world.barrier();
  });
}
