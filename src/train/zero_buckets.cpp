#include "train/zero_buckets.h"

#include <exception>

#include "core/error.h"
#include "core/log.h"

namespace pptrain {

ZeroBuckets::ZeroBuckets(ParamStore& params, Communicator& dp, Timeline& timeline)
    : params_(params), dp_(dp), timeline_(timeline) {
  PPTRAIN_CHECK(params.flat() && params.flat_layout().shards == dp.size(), "ZeroBuckets: the parameters are ",
                params.flat() ? cat("flat in ", params.flat_layout().shards, " shards") : std::string("not flat"),
                ", the dp group has ", dp.size(), " ranks");
  const size_t n = params.flat_layout().buckets.size();
  reductions_.resize(n);
  gathers_.resize(n);
  reduction_start_us_.assign(n, 0.0);
}

ZeroBuckets::~ZeroBuckets() {
  if (std::uncaught_exceptions() > 0) return;
  try {
    drain();
  } catch (const std::exception& e) {
    log::warn("ZeRO-1 collectives still pending at the end: ", e.what());
  }
}

std::vector<int> ZeroBuckets::buckets_of(int stage) const {
  std::vector<int> out;
  const auto& buckets = params_.flat_layout().buckets;
  for (size_t b = 0; b < buckets.size(); ++b)
    if (buckets[b].stage == stage || buckets[b].stage < 0) out.push_back(int(b));
  return out;
}

std::string ZeroBuckets::bucket_name(size_t b) const {
  const int stage = params_.flat_layout().buckets[b].stage;
  return stage < 0 ? std::string("shared") : cat("stage ", stage);
}

void ZeroBuckets::wait(std::unique_ptr<Request>& request, const std::string& what) {
  if (!request) return;
  const double t0 = timeline_.now_us();
  request->wait();
  request.reset();
  timeline_.add(cat("wait ", what), t0, timeline_.now_us(), false);
}

void ZeroBuckets::wait_all(std::vector<std::unique_ptr<Request>>& requests) {
  for (auto& request : requests)
    if (request) {
      request->wait();
      request.reset();
    }
}

void ZeroBuckets::start_bucket_reduction(size_t b) {
  const FlatBucket& bucket = params_.flat_layout().buckets[b];
  reduction_start_us_[b] = timeline_.now_us();
  reductions_[b] = dp_.ireduce_scatter(params_.grad_arena() + bucket.begin, bucket.shard_size, ReduceOp::Sum);
}

void ZeroBuckets::start_reduction(int stage) {
  const FlatLayout& layout = params_.flat_layout();
  for (size_t b = 0; b < layout.buckets.size(); ++b) {
    if (layout.buckets[b].stage != stage) continue;
    PPTRAIN_CHECK(!reductions_[b], "ZeRO-1: the reduce-scatter of stage ", stage, "'s bucket started twice in a step");
    start_bucket_reduction(b);
  }
}

void ZeroBuckets::finish_reductions() {
  const size_t n = reductions_.size();
  std::vector<bool> started(n);
  for (size_t b = 0; b < n; ++b) {
    started[b] = reductions_[b] != nullptr;
    if (!started[b]) start_bucket_reduction(b);
  }
  for (size_t b = 0; b < n; ++b) {
    reductions_[b]->wait();
    reductions_[b].reset();
    // The collective's span in the trace: from its start to the end of the wait for it.
    timeline_.add(cat("reduce-scatter ", bucket_name(b), started[b] ? " (started after its last W)" : ""),
                  reduction_start_us_[b], timeline_.now_us(), false, /*track=*/1);
  }
}

void ZeroBuckets::start_gathers() {
  const FlatLayout& layout = params_.flat_layout();
  for (size_t b = 0; b < layout.buckets.size(); ++b) {
    PPTRAIN_CHECK(!gathers_[b], "ZeRO-1: an all-gather started while the last is pending");
    const FlatBucket& bucket = layout.buckets[b];
    // Under sharded masters the bf16 copies (what the layers compute with); else the masters.
    gathers_[b] = params_.masters_sharded() ? dp_.iallgather(params_.bf16_arena() + bucket.begin, bucket.shard_size)
                                            : dp_.iallgather(params_.value_arena() + bucket.begin, bucket.shard_size);
  }
}

void ZeroBuckets::finish_gathers(int stage) {
  for (int b : buckets_of(stage)) wait(gathers_[size_t(b)], cat("all-gather ", bucket_name(size_t(b))));
}

void ZeroBuckets::finish_gathers() { wait_all(gathers_); }

void ZeroBuckets::drain() {
  wait_all(gathers_);
  wait_all(reductions_);
}

bool ZeroBuckets::gathers_pending() const {
  for (const auto& g : gathers_)
    if (g) return true;
  return false;
}

}  // namespace pptrain
