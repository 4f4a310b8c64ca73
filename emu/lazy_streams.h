// The lazy streams of the emulated CUDA runtime (cuda_runtime_emu.h describes what they do;
// cuda_emu.cpp calls these unless PPTRAIN_EMU_STREAMS=eager). Each stream is a queue of
// operations (kernels, GEMMs, copies, fills: run when reached) and transfers (the emulated
// NCCL's: posted when queued, complete when polled done), with the number of items ever
// queued and run; an event records a position in one queue.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include "emu/cuda_runtime_emu.h"

namespace pptrain::cuda_emu::lazy {

struct Mark {
  cudaStream_t stream = nullptr;
  uint64_t seq = 0;  // items of `stream` that must have run
};

// True unless PPTRAIN_EMU_STREAMS=eager (read once).
bool on();
void queue(cudaStream_t stream, std::function<void()> op);
void queue_work(cudaStream_t stream, std::shared_ptr<StreamWork> work);
// Where `stream` stands now: what an event recorded now waits for.
Mark mark(cudaStream_t stream);
bool reached(const Mark& m);
constexpr uint64_t kAll = ~uint64_t(0);
// Runs `stream`'s items until `upto` of them have run (or it is empty). A transfer still in
// flight is waited for with `block`, else the run stops there (cudaErrorNotReady). A failed
// transfer stays at the front (sticky): cudaErrorLaunchFailure, its reason on stderr.
cudaError_t run(cudaStream_t stream, uint64_t upto, bool block);
// Every stream to its end, newest stream first.
cudaError_t run_all();
// A destroyed stream: its queue, after run() emptied it.
void forget(cudaStream_t stream);

}  // namespace pptrain::cuda_emu::lazy
