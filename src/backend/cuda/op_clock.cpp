// The cuda backend's op clock (Ops::make_op_clock): a timing event per mark, recorded on
// the compute stream, so a mark sits exactly between the kernels issued before and after
// it, and the host never waits inside a profiled step; resolve() waits once for the last
// mark (stream order: every earlier one is then reached too) and reads each mark's time
// after the first with cudaEventElapsedTime (resolution about half a microsecond).
#include <memory>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_handles.h"
#include "backend/cuda/cuda_ops.h"
#include "core/error.h"

namespace pptrain::cuda {

namespace {

class EventOpClock final : public OpClock {
 public:
  explicit EventOpClock(cudaStream_t stream) : stream_(stream) {}
  void mark(size_t i) override {
    while (events_.size() <= i) events_.push_back(std::make_unique<Event>(true));
    PPTRAIN_CUDA_CHECK(cudaEventRecord(events_[i]->get(), stream_));
  }
  std::vector<double> resolve(size_t n) override {
    PPTRAIN_CHECK(n <= events_.size(), "op clock: ", n, " marks resolved, ", events_.size(), " recorded");
    std::vector<double> ms(n, 0.0);
    if (n == 0) return ms;
    PPTRAIN_CUDA_CHECK(cudaEventSynchronize(events_[n - 1]->get()));
    for (size_t i = 1; i < n; ++i) {
      float elapsed = 0;
      PPTRAIN_CUDA_CHECK(cudaEventElapsedTime(&elapsed, events_[0]->get(), events_[i]->get()));
      ms[i] = elapsed;
    }
    return ms;
  }

 private:
  cudaStream_t stream_;
  std::vector<std::unique_ptr<Event>> events_;  // grown to the most marks a step has had
};

}  // namespace

std::unique_ptr<OpClock> CudaOps::make_op_clock() { return std::make_unique<EventOpClock>(stream_.get()); }

}  // namespace pptrain::cuda
