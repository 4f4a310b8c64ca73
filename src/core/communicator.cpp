#include "core/communicator.h"

#include "core/error.h"

namespace pptrain {
namespace {

// A collective that ran to completion when it was started.
class FinishedRequest final : public Request {
 public:
  void wait() override {}
  bool test() override { return true; }
};

}  // namespace

std::unique_ptr<Request> Communicator::ireduce_scatter(float* data, size_t count, ReduceOp op) {
  reduce_scatter(data, data + size_t(rank()) * count, count, op);
  return std::make_unique<FinishedRequest>();
}

std::unique_ptr<Request> Communicator::iallgather(float* data, size_t count) {
  allgather(data, count);
  return std::make_unique<FinishedRequest>();
}

std::unique_ptr<Request> Communicator::iallgather(bfloat16* data, size_t count) {
  allgather(data, count);
  return std::make_unique<FinishedRequest>();
}

void LocalComm::reduce_scatter(const float* send, float* recv, size_t count, ReduceOp) {
  PPTRAIN_CHECK(send == recv || count == 0, "reduce_scatter in a group of one must be in place");
}

std::unique_ptr<Request> LocalComm::isend(const void*, size_t, int peer, int) {
  PPTRAIN_CHECK(false, "send to rank ", peer, " in a group of one");
}
std::unique_ptr<Request> LocalComm::irecv(void*, size_t, int peer, int) {
  PPTRAIN_CHECK(false, "receive from rank ", peer, " in a group of one");
}

}  // namespace pptrain
