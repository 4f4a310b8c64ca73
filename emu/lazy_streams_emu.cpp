// Lazy streams of the emulated CUDA runtime (lazy_streams.h).
#include "emu/lazy_streams.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

namespace pptrain::cuda_emu::lazy {
namespace {

struct Item {
  std::function<void()> op;          // a kernel, GEMM, copy or fill; or
  std::shared_ptr<StreamWork> work;  // a transfer in flight
};
struct Queue {
  std::deque<Item> items;
  uint64_t queued = 0, run = 0;  // items ever queued, and run (or completed)
  uint64_t created = 0;          // order of first use: run_all takes the newest first
};

// The mutex guards the table; operations run outside it (a kernel may take seconds).
std::mutex table_mutex;
std::map<cudaStream_t, Queue> queues;
uint64_t streams_seen = 0;

Queue& queue_of(cudaStream_t stream) {  // table_mutex held
  auto [it, inserted] = queues.try_emplace(stream);
  if (inserted) it->second.created = ++streams_seen;
  return it->second;
}

}  // namespace

bool on() {
  static const bool lazy = [] {
    const char* v = std::getenv("PPTRAIN_EMU_STREAMS");
    return !(v && std::strcmp(v, "eager") == 0);
  }();
  return lazy;
}

void queue(cudaStream_t stream, std::function<void()> op) {
  std::lock_guard<std::mutex> lock(table_mutex);
  Queue& q = queue_of(stream);
  q.items.push_back({std::move(op), nullptr});
  ++q.queued;
}

void queue_work(cudaStream_t stream, std::shared_ptr<StreamWork> work) {
  std::lock_guard<std::mutex> lock(table_mutex);
  Queue& q = queue_of(stream);
  q.items.push_back({nullptr, std::move(work)});
  ++q.queued;
}

Mark mark(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(table_mutex);
  return {stream, queue_of(stream).queued};
}

bool reached(const Mark& m) {
  std::lock_guard<std::mutex> lock(table_mutex);
  auto it = queues.find(m.stream);
  return it == queues.end() || it->second.run >= m.seq;
}

cudaError_t run(cudaStream_t stream, uint64_t upto, bool block) {
  for (;;) {
    std::function<void()> op;
    std::shared_ptr<StreamWork> work;
    {
      std::lock_guard<std::mutex> lock(table_mutex);
      auto it = queues.find(stream);
      if (it == queues.end() || it->second.run >= upto || it->second.items.empty()) return cudaSuccess;
      Queue& q = it->second;
      if (q.items.front().op) {
        // Taken off first: an op that throws (a kernel fault) is not run again.
        op = std::move(q.items.front().op);
        q.items.pop_front();
        ++q.run;
      } else {
        work = q.items.front().work;
      }
    }
    if (op) {
      op();
      continue;
    }
    switch (work->poll(block)) {
      case StreamWork::State::pending: return cudaErrorNotReady;
      case StreamWork::State::failed:
        std::fprintf(stderr, "emulated stream work failed: %s\n", work->error().c_str());
        return cudaErrorLaunchFailure;
      case StreamWork::State::done: {
        std::lock_guard<std::mutex> lock(table_mutex);
        Queue& q = queues.at(stream);
        q.items.pop_front();
        ++q.run;
        break;
      }
    }
  }
}

cudaError_t run_all() {
  std::vector<std::pair<uint64_t, cudaStream_t>> order;
  {
    std::lock_guard<std::mutex> lock(table_mutex);
    for (auto& [stream, q] : queues) order.push_back({q.created, stream});
  }
  std::sort(order.rbegin(), order.rend());
  cudaError_t result = cudaSuccess;
  for (auto& [created, stream] : order)
    if (cudaError_t err = run(stream, kAll, true); err != cudaSuccess) result = err;
  return result;
}

void forget(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(table_mutex);
  queues.erase(stream);
}

}  // namespace pptrain::cuda_emu::lazy
