// Fibers of the SIMT emulator: one per thread of the block being run, each on its own
// guarded stack, switched cooperatively by the scheduler in block_runner.cpp.
//
// A fiber switch is the hot path (two per resume, and a kernel with a loop of barriers
// switches thousands of times per block). On x86-64 it is the hand-written switch of
// fiber.cpp: it saves only what the System V ABI makes callee-saved and returns on the other
// fiber's stack, with no system call. ucontext's swapcontext, the fallback on other
// architectures, also saves the signal mask with an rt_sigprocmask system call every time.
#pragma once
#include <cstddef>
#include <cstdint>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#if defined(__x86_64__)
extern "C" void pptrain_emu_switch_fiber(void** save_sp, void* load_sp);
#endif

namespace pptrain::emu {

constexpr size_t kStackBytes = 64 * 1024;

// A fiber stack whose lowest page is inaccessible, so an overflow faults instead of
// silently corrupting a neighbour.
class FiberStack {
 public:
  FiberStack();
  ~FiberStack();
  FiberStack(FiberStack&& o) noexcept;
  FiberStack(const FiberStack&) = delete;
  FiberStack& operator=(const FiberStack&) = delete;
  FiberStack& operator=(FiberStack&&) = delete;
  void* usable() const { return static_cast<char*>(base_) + page_; }
  size_t usable_bytes() const { return kStackBytes; }

 private:
  void* base_ = nullptr;  // the mapping, guard page first
  size_t bytes_ = 0, page_ = 0;
};

#if defined(__x86_64__)
// A suspended fiber is its stack pointer; its registers are in the frame below it.
struct FiberContext {
  void* sp = nullptr;
};

inline void switch_context(FiberContext& save, const FiberContext& load) {
  pptrain_emu_switch_fiber(&save.sp, load.sp);
}
#else
struct FiberContext {
  ucontext_t context;
};

inline void switch_context(FiberContext& save, const FiberContext& load) {
  swapcontext(&save.context, &load.context);
}
#endif

// Makes `context` a fresh fiber: the first switch to it enters `entry` (which must never
// return) on [stack, stack + bytes).
void prepare_context(FiberContext& context, void* stack, size_t bytes, void (*entry)());

// Throws if the process runs with CET shadow stacks, which the x86-64 switch cannot work
// under (a no-op elsewhere).
void require_no_shadow_stack();

}  // namespace pptrain::emu
