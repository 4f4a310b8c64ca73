#include "core/communicator.h"

#include "core/error.h"

namespace pptrain {

std::unique_ptr<Request> LocalComm::isend(const void*, size_t, int peer, int) {
  PPTRAIN_CHECK(false, "send to rank ", peer, " in a group of one");
}
std::unique_ptr<Request> LocalComm::irecv(void*, size_t, int peer, int) {
  PPTRAIN_CHECK(false, "receive from rank ", peer, " in a group of one");
}

}  // namespace pptrain
