#include "core/communicator.h"

#include "core/error.h"

namespace pptrain {

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
