// choose_transport and make_device_comm (device_comm.h).
#include "parallel/device_comm.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "parallel/nccl.h"

namespace pptrain {

namespace {
std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}
}  // namespace

GroupTransport choose_transport(const std::string& comm, MpiComm& group, Ops& ops) {
  if (comm == "nccl") return {true, "parallel.comm: nccl"};
  if (comm == "mpi") return {false, "parallel.comm: mpi"};
  // (host, device) as one exact double: 40 bits of the host name's hash, 10 of the device.
  const double key = double(std::hash<std::string>{}(host_name()) & ((uint64_t(1) << 40) - 1)) * 1024.0 +
                     double(cuda_device_of(ops) & 1023);
  std::vector<double> keys = group.allgather(std::vector<double>{key});
  std::sort(keys.begin(), keys.end());
  if (std::adjacent_find(keys.begin(), keys.end()) == keys.end()) return {true, "auto: a GPU per rank"};
  return {false, "auto: ranks of the group share a GPU, which NCCL refuses"};
}

std::unique_ptr<Communicator> make_device_comm(const std::string& comm, MpiComm& group, Ops& ops,
                                               GroupTransport* chosen) {
  const GroupTransport t = choose_transport(comm, group, ops);
  if (chosen) *chosen = t;
  return t.nccl ? make_nccl_comm(group, ops) : make_staged_mpi_comm(group, ops);
}

}  // namespace pptrain
