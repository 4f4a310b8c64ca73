#include "parallel/mpi_comm.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <utility>

#include "core/error.h"
#include "core/log.h"

namespace pptrain {
namespace {

std::atomic<MpiWait> g_mpi_wait{MpiWait::Poll};

// The pauses of one wait between its polls (MpiWait says when and why). In Sleep, a wait
// through a pipeline bubble of 100 ms makes about 100 wake-ups of a few µs each instead of
// polling 100 ms of CPU time away, and adds at most 1 ms (the longest sleep) to it.
class IdlePause {
 public:
  void operator()() {
    if (g_mpi_wait.load(std::memory_order_relaxed) == MpiWait::Poll) return;
    if (std::chrono::steady_clock::now() - start_ < kPolling) return;
    std::this_thread::sleep_for(sleep_);
    sleep_ = std::min(sleep_ * 2, kLongest);
  }

 private:
  static constexpr std::chrono::microseconds kPolling{50}, kLongest{1000};
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::microseconds sleep_{20};
};

std::string mpi_error_string(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return cat("MPI error code ", rc);
  return std::string(text, len);
}

MPI_Op to_mpi(ReduceOp op) { return op == ReduceOp::Sum ? MPI_SUM : MPI_MAX; }

// One MPI_Test of a non-blocking collective not yet finished (`done` false): true once it
// completed, setting `done`; an error throws naming `where`.
bool test_collective(MPI_Request& request, bool& done, const std::string& where) {
  int flag = 0;
  const int rc = MPI_Test(&request, &flag, MPI_STATUS_IGNORE);
  if (rc == MPI_SUCCESS && !flag) return false;
  done = true;  // success or not, the request is finished with
  check_mpi(rc, "MPI_Test", where);
  return true;
}

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

// Whether a non-blocking collective is still running as its owner is destroyed (an error
// unwinding the stack): MPI can neither cancel nor free one, so the owner must leave its
// buffers to MPI.
bool collective_still_running(MPI_Request& request, bool done) {
  if (done || request == MPI_REQUEST_NULL || mpi_finalized()) return false;
  int flag = 0;
  return !(MPI_Test(&request, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag);
}

// Number of MPI calls needed to move n elements at most max_count at a time; a zero-size
// transfer is still one (empty) message so that sends and receives pair up.
size_t chunk_count(size_t n, size_t max_count) {
  return n == 0 ? 1 : (n + max_count - 1) / max_count;
}

// One isend/irecv, posted as one MPI request per chunk of at most max_count bytes.
class MpiRequest final : public Request {
 public:
  MpiRequest(std::vector<MPI_Request> parts, std::vector<int> counts, bool is_send,
             std::string what, std::string where)
      : parts_(std::move(parts)), counts_(std::move(counts)), statuses_(parts_.size()),
        is_send_(is_send), what_(std::move(what)), where_(std::move(where)) {}

  ~MpiRequest() override {
    if (!done_ && !mpi_finalized()) abandon();
  }

  // Polls MPI_Testall rather than calling MPI_Waitall. Open MPI 4.1's MPI_Waitall can
  // miss the completion of a request that completes with an error (a truncated receive:
  // the message was longer than posted) and then spins forever; under load a quarter of
  // such waits hung. MPI_Testall reads the completion flag directly, and each call drives
  // MPI's progress engine as MPI_Waitall's own loop does, so nothing is lost by polling.
  void wait() override {
    IdlePause pause;
    while (!test()) pause();
  }

  bool test() override {
    if (done_) return true;
    int flag = 0;
    int rc = MPI_Testall(int(parts_.size()), parts_.data(), &flag, statuses_.data());
    if (rc == MPI_SUCCESS && !flag) return false;
    done_ = true;  // success or not, the request is finished with
    finish(rc, "MPI_Testall");
    return true;
  }

 private:
  // Checks the completion code and, for a receive, that each chunk got exactly the
  // number of bytes posted: a shorter message than expected would otherwise leave
  // stale data in the buffer without any MPI error.
  void finish(int rc, const char* call) {
    if (rc == MPI_ERR_IN_STATUS) {
      for (const MPI_Status& s : statuses_)
        if (s.MPI_ERROR != MPI_SUCCESS && s.MPI_ERROR != MPI_ERR_PENDING) rc = s.MPI_ERROR;
    }
    check_mpi(rc, call, cat(where_, ", ", what_));
    if (is_send_) return;
    for (size_t i = 0; i < statuses_.size(); ++i) {
      int got = 0;
      check_mpi(MPI_Get_count(&statuses_[i], MPI_BYTE, &got), "MPI_Get_count", where_);
      if (got != counts_[i])
        fail(what_, " on ", where_, ": expected ", counts_[i], " bytes in part ", i + 1, " of ",
             statuses_.size(), " but the message had ", got);
    }
  }

  // Destroyed before completion: a bug in the caller or an error unwinding the stack.
  // Cancels what is still pending (receives always cancel; an unmatched large send may
  // not), waits briefly, and says what happened, so the dropped transfer is never silent.
  void abandon() {
    for (MPI_Request& r : parts_)
      if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(250);
    int flag = 0;
    while (true) {
      if (MPI_Testall(int(parts_.size()), parts_.data(), &flag, statuses_.data()) != MPI_SUCCESS)
        break;
      if (flag || std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const char* outcome = "cancelled";
    if (!flag) {
      // Still pending: let MPI finish it in the background rather than hang here.
      for (MPI_Request& r : parts_)
        if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
      outcome = "could not be cancelled; released to complete in the background";
    }
    log::warn(what_, " on ", where_, " was destroyed before completion: ", outcome);
  }

  std::vector<MPI_Request> parts_;  // one per chunk; MPI_REQUEST_NULL once complete
  std::vector<int> counts_;         // bytes per chunk
  std::vector<MPI_Status> statuses_;  // one per chunk, filled by MPI_Testall
  bool is_send_;
  std::string what_;   // "isend of 48 bytes to rank 2, tag 7"
  std::string where_;  // "'pp' (rank 1 of 4, world rank 5)"
  bool done_ = false;
};

}  // namespace

void set_mpi_wait(MpiWait wait) { g_mpi_wait.store(wait, std::memory_order_relaxed); }
MpiWait mpi_wait() { return g_mpi_wait.load(std::memory_order_relaxed); }

void check_mpi(int rc, const char* call, const std::string& where) {
  if (rc != MPI_SUCCESS) fail(call, " failed on ", where, ": ", mpi_error_string(rc));
}

MpiComm MpiComm::world() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  PPTRAIN_CHECK(initialized && !mpi_finalized(), "MpiComm::world() needs an active MpiSession");
  return MpiComm(MPI_COMM_WORLD, "world", false);
}

MpiComm::MpiComm(MPI_Comm comm, std::string name, bool owned)
    : comm_(comm), name_(std::move(name)), owned_(owned) {
  PPTRAIN_CHECK(comm_ != MPI_COMM_NULL, "communicator '", name_, "' is MPI_COMM_NULL");
  // Return codes instead of MPI's default abort, so failures name the call and group.
  check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler",
            cat("'", name_, "'"));
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank", cat("'", name_, "'"));
  check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size", cat("'", name_, "'"));
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_), "MPI_Comm_rank", "'world'");
  int* tag_ub = nullptr;
  int found = 0;
  check_mpi(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found), "MPI_Comm_get_attr",
            "'world'");
  if (found && tag_ub) max_tag_ = *tag_ub;
}

MpiComm::~MpiComm() {
  if (owned_ && comm_ != MPI_COMM_NULL && !mpi_finalized()) MPI_Comm_free(&comm_);
}

MpiComm::MpiComm(MpiComm&& other) noexcept
    : comm_(std::exchange(other.comm_, MPI_COMM_NULL)), name_(std::move(other.name_)),
      owned_(std::exchange(other.owned_, false)), rank_(other.rank_), size_(other.size_),
      world_rank_(other.world_rank_), max_tag_(other.max_tag_), max_count_(other.max_count_) {}

MpiComm& MpiComm::operator=(MpiComm&& other) noexcept {
  if (this != &other) {
    if (owned_ && comm_ != MPI_COMM_NULL && !mpi_finalized()) MPI_Comm_free(&comm_);
    comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
    name_ = std::move(other.name_);
    owned_ = std::exchange(other.owned_, false);
    rank_ = other.rank_;
    size_ = other.size_;
    world_rank_ = other.world_rank_;
    max_tag_ = other.max_tag_;
    max_count_ = other.max_count_;
  }
  return *this;
}

std::string MpiComm::where() const {
  return cat("'", name_, "' (rank ", rank_, " of ", size_, ", world rank ", world_rank_, ")");
}

MpiComm MpiComm::split(int color, int key, const std::string& name) const {
  MPI_Comm out = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(comm_, color, key, &out), "MPI_Comm_split",
            cat(where(), " creating '", name, "'"));
  return MpiComm(out, name, true);
}

int MpiComm::world_rank_of(int group_rank) const {
  check_peer(group_rank, "world_rank_of", "group");
  MPI_Group group, world_group;
  check_mpi(MPI_Comm_group(comm_, &group), "MPI_Comm_group", where());
  check_mpi(MPI_Comm_group(MPI_COMM_WORLD, &world_group), "MPI_Comm_group", where());
  int world_rank = MPI_UNDEFINED;
  int rc = MPI_Group_translate_ranks(group, 1, &group_rank, world_group, &world_rank);
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  check_mpi(rc, "MPI_Group_translate_ranks", where());
  return world_rank;
}

void MpiComm::set_max_count(size_t max_count) {
  PPTRAIN_CHECK(max_count >= 1 && max_count <= size_t(INT_MAX), "max_count ", max_count);
  max_count_ = max_count;
}

void MpiComm::check_peer(int peer, const char* call, const char* role) const {
  if (peer < 0 || peer >= size_)
    fail(call, " on ", where(), ": ", role, " rank ", peer, " is outside the group (0..", size_ - 1,
         ")");
}

template <typename T>
void MpiComm::allreduce_impl(T* data, size_t n, MPI_Datatype type, ReduceOp op) {
  // Elementwise reductions are independent per element, so chunks reduce separately.
  for (size_t offset = 0; offset < n; offset += max_count_) {
    int count = int(std::min(max_count_, n - offset));
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, data + offset, count, type, to_mpi(op), comm_),
              "MPI_Allreduce", where());
  }
}

void MpiComm::allreduce(float* data, size_t n, ReduceOp op) {
  allreduce_impl(data, n, MPI_FLOAT, op);
}
void MpiComm::allreduce(double* data, size_t n, ReduceOp op) {
  allreduce_impl(data, n, MPI_DOUBLE, op);
}

void MpiComm::allreduce(bfloat16* data, size_t n, ReduceOp op) {
  if (n == 0 || size_ == 1) return;
  std::vector<float> wide(n);  // [n]
  for (size_t i = 0; i < n; ++i) wide[i] = data[i].to_float();
  allreduce_impl(wide.data(), n, MPI_FLOAT, op);
  for (size_t i = 0; i < n; ++i) data[i] = bfloat16::from_float(wide[i]);
}

void MpiComm::check_collective_count(size_t count, const char* call) const {
  if (count > max_count_)
    fail(call, " on ", where(), ": ", count, " elements per rank, more than one MPI call moves (", max_count_, ")");
}

void MpiComm::reduce_scatter(const float* send, float* recv, size_t count, ReduceOp op) {
  if (count == 0) return;
  check_collective_count(count, "reduce_scatter");
  if (recv == send + size_t(rank_) * count) {
    std::vector<float> mine(count);  // [count]: MPI may not write where it reads
    check_mpi(MPI_Reduce_scatter_block(send, mine.data(), int(count), MPI_FLOAT, to_mpi(op), comm_),
              "MPI_Reduce_scatter_block", where());
    std::copy(mine.begin(), mine.end(), recv);
    return;
  }
  check_mpi(MPI_Reduce_scatter_block(send, recv, int(count), MPI_FLOAT, to_mpi(op), comm_),
            "MPI_Reduce_scatter_block", where());
}

namespace {

// A pending in-place collective of MpiComm::ireduce_scatter / iallgather. A reduce-scatter
// receives into a buffer of its own (MPI's in-place form would write at the front) that is
// copied into place on completion.
class MpiCollectiveRequest final : public Request {
 public:
  MpiCollectiveRequest(std::string where, std::vector<float> received, float* place)
      : where_(std::move(where)), received_(std::move(received)), place_(place) {}
  MPI_Request* handle() { return &request_; }
  float* receive_buffer() { return received_.data(); }

  // Still pending (an error unwinding the stack): MPI can neither cancel nor free a
  // non-blocking collective, so the receive buffer is left to it, with a warning.
  ~MpiCollectiveRequest() override {
    if (!collective_still_running(request_, done_)) return;
    static_cast<void>(new std::vector<float>(std::move(received_)));
    log::warn(where_, " was destroyed before completion: it is left to MPI");
  }
  // Polls (MpiRequest::wait says why).
  void wait() override {
    IdlePause pause;
    while (!test()) pause();
  }
  bool test() override {
    if (done_) return true;
    if (!test_collective(request_, done_, where_)) return false;
    if (place_) std::copy(received_.begin(), received_.end(), place_);
    return true;
  }

 private:
  std::string where_;            // "MPI_Ireduce_scatter_block of 1024 floats on 'dp' (rank ...)"
  std::vector<float> received_;  // [count] for a reduce-scatter, else empty
  float* place_;                 // where received_ goes, or nullptr
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool done_ = false;
};

}  // namespace

std::unique_ptr<Request> MpiComm::ireduce_scatter(float* data, size_t count, ReduceOp op) {
  if (count == 0 || size_ == 1) return Communicator::ireduce_scatter(data, count, op);
  check_collective_count(count, "ireduce_scatter");
  auto request = std::make_unique<MpiCollectiveRequest>(cat("MPI_Ireduce_scatter_block of ", count, " floats on ", where()),
                                                        std::vector<float>(count), data + size_t(rank_) * count);
  check_mpi(MPI_Ireduce_scatter_block(data, request->receive_buffer(), int(count), MPI_FLOAT, to_mpi(op), comm_,
                                      request->handle()),
            "MPI_Ireduce_scatter_block", where());
  return request;
}

std::unique_ptr<Request> MpiComm::iallgather_impl(void* data, size_t count, MPI_Datatype type, const char* what) {
  check_collective_count(count, "iallgather");
  auto request = std::make_unique<MpiCollectiveRequest>(cat("MPI_Iallgather of ", count, " ", what, " on ", where()),
                                                        std::vector<float>(), nullptr);
  check_mpi(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, int(count), type, comm_, request->handle()),
            "MPI_Iallgather", where());
  return request;
}

std::unique_ptr<Request> MpiComm::iallgather(float* data, size_t count) {
  if (count == 0 || size_ == 1) return Communicator::iallgather(data, count);
  return iallgather_impl(data, count, MPI_FLOAT, "floats");
}

std::unique_ptr<Request> MpiComm::iallgather(bfloat16* data, size_t count) {
  if (count == 0 || size_ == 1) return Communicator::iallgather(data, count);
  return iallgather_impl(data, count, MPI_UINT16_T, "bf16 words");
}

void MpiComm::allgather_impl(void* data, size_t count, MPI_Datatype type) {
  if (count == 0) return;
  check_collective_count(count, "allgather");
  check_mpi(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, int(count), type, comm_), "MPI_Allgather",
            where());
}

void MpiComm::allgather(float* data, size_t count) { allgather_impl(data, count, MPI_FLOAT); }
void MpiComm::allgather(bfloat16* data, size_t count) {
  static_assert(sizeof(bfloat16) == sizeof(uint16_t));
  allgather_impl(data, count, MPI_UINT16_T);
}

void MpiComm::broadcast(void* data, size_t bytes, int root) {
  check_peer(root, "broadcast", "root");
  auto* p = static_cast<char*>(data);
  for (size_t offset = 0; offset < bytes; offset += max_count_) {
    int count = int(std::min(max_count_, bytes - offset));
    check_mpi(MPI_Bcast(p + offset, count, MPI_BYTE, root, comm_), "MPI_Bcast", where());
  }
}

void MpiComm::barrier() { check_mpi(MPI_Barrier(comm_), "MPI_Barrier", where()); }

std::unique_ptr<Request> MpiComm::isend(const void* data, size_t bytes, int peer, int tag) {
  // MPI_Isend takes a non-const buffer only in old MPI versions; it never writes to it.
  return post(static_cast<char*>(const_cast<void*>(data)), bytes, peer, tag, true);
}

std::unique_ptr<Request> MpiComm::irecv(void* data, size_t bytes, int peer, int tag) {
  return post(static_cast<char*>(data), bytes, peer, tag, false);
}

std::unique_ptr<Request> MpiComm::post(char* data, size_t n, int peer, int tag, bool is_send) {
  std::string what = cat(is_send ? "isend of " : "irecv of ", n, is_send ? " bytes to rank " :
                         " bytes from rank ", peer, ", tag ", tag);
  check_peer(peer, is_send ? "isend" : "irecv");
  if (tag < 0 || tag > max_tag_)
    fail(is_send ? "isend" : "irecv", " on ", where(), ": tag ", tag, " is outside 0..", max_tag_,
         " (MPI_TAG_UB)");
  size_t chunks = chunk_count(n, max_count_);
  std::vector<MPI_Request> parts(chunks, MPI_REQUEST_NULL);
  std::vector<int> counts(chunks);
  for (size_t c = 0; c < chunks; ++c) {
    size_t offset = c * max_count_;
    counts[c] = int(std::min(max_count_, n - offset));
    int rc = is_send ? MPI_Isend(data + offset, counts[c], MPI_BYTE, peer, tag, comm_, &parts[c])
                     : MPI_Irecv(data + offset, counts[c], MPI_BYTE, peer, tag, comm_, &parts[c]);
    if (rc != MPI_SUCCESS) {
      // The request object takes the chunks already posted, so they are cancelled and
      // reported rather than leaked when the error propagates.
      parts.resize(c);
      counts.resize(c);
      std::unique_ptr<MpiRequest> posted;
      if (c > 0)
        posted = std::make_unique<MpiRequest>(std::move(parts), std::move(counts), is_send, what,
                                              where());
      check_mpi(rc, is_send ? "MPI_Isend" : "MPI_Irecv", cat(where(), ", ", what));
    }
  }
  return std::make_unique<MpiRequest>(std::move(parts), std::move(counts), is_send, what, where());
}

PendingAllgather::PendingAllgather(std::vector<double> mine, int size, std::string where)
    : mine_(std::move(mine)), all_(mine_.size() * size_t(size)), where_(std::move(where)) {}

PendingAllgather::~PendingAllgather() {
  if (!collective_still_running(request_, done_)) return;
  // The moved-to vectors keep the storage MPI was given.
  static_cast<void>(new std::vector<double>(std::move(mine_)));
  static_cast<void>(new std::vector<double>(std::move(all_)));
  log::warn(where_, " was destroyed before completion: its buffers are left to MPI");
}

bool PendingAllgather::test() { return done_ || test_collective(request_, done_, where_); }

const std::vector<double>& PendingAllgather::wait() {
  IdlePause pause;
  while (!test()) pause();
  return all_;
}

std::vector<double> MpiComm::allgather(std::vector<double> mine) {
  return iallgather(std::move(mine))->wait();
}

std::unique_ptr<PendingAllgather> MpiComm::iallgather(std::vector<double> mine) {
  const size_t n = mine.size();
  PPTRAIN_CHECK(n * size_t(size_) <= size_t(INT_MAX), "iallgather of ", n, " doubles on ", where());
  // The constructor is private (only MpiComm starts gathers), hence no make_unique.
  std::unique_ptr<PendingAllgather> pending(
      new PendingAllgather(std::move(mine), size_, cat("MPI_Iallgather of ", n, " doubles on ", where())));
  check_mpi(MPI_Iallgather(pending->mine_.data(), int(n), MPI_DOUBLE, pending->all_.data(), int(n), MPI_DOUBLE,
                           comm_, &pending->request_),
            "MPI_Iallgather", where());
  return pending;
}

}  // namespace pptrain
