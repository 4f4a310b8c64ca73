// MpiComm isend/irecv on a ring of any size >= 2: every rank sends several tagged
// messages to its right neighbour and receives them from its left one. Receives are
// posted in a different order than the sends, so only the tag can match them up.
// Covers wait(), polling with test(), two messages with one tag (arrive in order), an
// empty message, and a message split into chunks. Prints "p2p ok rank R".
#include <algorithm>
#include <chrono>
#include <thread>

#include "parallel/mpi_comm.h"
#include "support/mpi_program.h"

using namespace pptrain;
using pptrain::mpi_test::say;

namespace {

// The payload of message `tag` from rank `from`: distinct per (sender, tag, element).
std::vector<float> payload(int from, int tag, size_t n) {
  std::vector<float> v(n);  // [n]
  for (size_t i = 0; i < n; ++i) v[i] = float(from * 1000 + tag * 100) + float(i) * 0.25f;
  return v;
}

void expect_payload(const std::vector<float>& got, int from, int tag, const std::string& where) {
  std::vector<float> want = payload(from, tag, got.size());
  for (size_t i = 0; i < got.size(); ++i)
    MPI_EXPECT(got[i] == want[i], where, ": message tag ", tag, " from rank ", from, " element ",
               i, " = ", got[i], ", want ", want[i]);
}

}  // namespace

int main(int argc, char** argv) {
  return mpi_test::run_mpi_program(argc, argv, [](MpiSession&, const auto&) {
    MpiComm world = MpiComm::world();
    const int p = world.size(), r = world.rank();
    MPI_EXPECT(p >= 2, "needs at least 2 ranks");
    const int right = (r + 1) % p, left = (r + p - 1) % p;

    // Tags 1..3 with different lengths; tag 3 is sent first but received last.
    const int tags[] = {3, 1, 2};
    const size_t lengths[] = {0, 64, 5, 300};  // by tag; tag 0 unused
    std::vector<std::vector<float>> out(4), in(4);
    for (int t = 1; t <= 3; ++t) {
      out[t] = payload(r, t, lengths[t]);
      in[t].assign(lengths[t], -1.0f);
    }
    std::vector<std::unique_ptr<Request>> recvs(4), sends;
    for (int t = 3; t >= 1; --t) recvs[t] = world.irecv(in[t].data(), lengths[t] * sizeof(float), left, t);
    for (int t : tags) sends.push_back(world.isend(out[t].data(), lengths[t] * sizeof(float), right, t));

    // Tag 1 by polling test() (bounded), the others by wait().
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!recvs[1]->test()) {
      MPI_EXPECT(std::chrono::steady_clock::now() < deadline, "tag 1 never arrived");
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    MPI_EXPECT(recvs[1]->test(), "test() stays true once complete");
    recvs[2]->wait();
    recvs[3]->wait();
    recvs[3]->wait();  // a second wait on a completed request returns at once
    for (auto& s : sends) s->wait();
    for (int t = 1; t <= 3; ++t) expect_payload(in[t], left, t, world.where());

    // Two messages with one tag arrive in the order sent.
    std::vector<float> first = payload(r, 7, 4), second = payload(r, 8, 4);
    std::vector<float> got_first(4), got_second(4);
    auto recv_a = world.irecv(got_first.data(), 4 * sizeof(float), left, 7);
    auto recv_b = world.irecv(got_second.data(), 4 * sizeof(float), left, 7);
    auto send_a = world.isend(first.data(), 4 * sizeof(float), right, 7);
    auto send_b = world.isend(second.data(), 4 * sizeof(float), right, 7);
    recv_b->wait();
    recv_a->wait();
    send_a->wait();
    send_b->wait();
    expect_payload(got_first, left, 7, world.where());
    expect_payload(got_second, left, 8, world.where());

    // An empty message still pairs a send with a receive.
    auto empty_recv = world.irecv(nullptr, 0, left, 11);
    auto empty_send = world.isend(nullptr, 0, right, 11);
    empty_recv->wait();
    empty_send->wait();

    // Chunked: 37 floats (148 bytes) at most 10 bytes per MPI message (15 messages, cut
    // inside floats) in both directions of the ring at once; the receiver chunks
    // identically.
    world.set_max_count(10);
    std::vector<float> big_out = payload(r, 20, 37), big_in(37, -1.0f);
    std::vector<float> back_out = payload(r, 21, 37), back_in(37, -1.0f);
    auto big_recv = world.irecv(big_in.data(), 37 * sizeof(float), left, 20);
    auto back_recv = world.irecv(back_in.data(), 37 * sizeof(float), right, 21);
    auto big_send = world.isend(big_out.data(), 37 * sizeof(float), right, 20);
    auto back_send = world.isend(back_out.data(), 37 * sizeof(float), left, 21);
    big_recv->wait();
    back_recv->wait();
    big_send->wait();
    back_send->wait();
    expect_payload(big_in, left, 20, world.where());
    expect_payload(back_in, right, 21, world.where());

    world.barrier();
    say("p2p ok rank ", r, " of ", p);
  });
}
