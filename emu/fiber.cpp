// The fiber stacks and contexts of the SIMT emulator (see fiber.h).
#include "emu/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <stdexcept>

#if defined(__x86_64__)
// pptrain_emu_switch_fiber(void** save_sp, void* load_sp): pushes the callee-saved integer
// registers of the running fiber (rbp, rbx, r12-r15) onto its own stack, stores the stack
// pointer in *save_sp, loads load_sp and pops the other fiber's registers the same way, then
// `ret`s into that fiber, which resumes as if its own call to this function had returned.
// Everything else (rax-r11 but rbx, the vector registers, flags) is caller-saved, so the
// compiler keeps nothing live in it across this call.
// MXCSR and the x87 control word are callee-saved as well, but they are left untouched: every
// fiber and the scheduler share the OS thread's, which nothing in a kernel changes (a GPU has
// no rounding-mode state to set). Saving them cost three quarters of the switch (stmxcsr and
// ldmxcsr/fldcw stall), for a per-fiber floating-point environment nobody uses.
// No exception ever unwinds through the switch: every fiber catches all exceptions in its
// entry function (BlockRunner::fiber_main), so it carries no unwind info.
asm(R"(
  .pushsection .text
  .p2align 4
  .globl pptrain_emu_switch_fiber
  .hidden pptrain_emu_switch_fiber
  .type pptrain_emu_switch_fiber, @function
pptrain_emu_switch_fiber:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size pptrain_emu_switch_fiber, .-pptrain_emu_switch_fiber
  .popsection
)");
extern "C" void pptrain_emu_switch_fiber(void** save_sp, void* load_sp);
#endif

namespace pptrain::emu {

FiberStack::FiberStack() {
  page_ = size_t(sysconf(_SC_PAGESIZE));
  bytes_ = kStackBytes + page_;
  void* base = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) throw std::runtime_error("emulator: cannot map a fiber stack");
  base_ = base;
  mprotect(base_, page_, PROT_NONE);
}

FiberStack::~FiberStack() {
  if (base_) munmap(base_, bytes_);
}

FiberStack::FiberStack(FiberStack&& o) noexcept : base_(o.base_), bytes_(o.bytes_), page_(o.page_) {
  o.base_ = nullptr;
}

#if defined(__x86_64__)
// The frame pptrain_emu_switch_fiber pops, lowest address first.
struct InitialFrame {
  uint64_t r15, r14, r13, r12, rbx, rbp;
  void (*entry)();          // where the first switch's `ret` goes
  uint64_t return_address;  // entry's "caller": 0 ends backtraces and unwinding there
};
static_assert(sizeof(InitialFrame) == 64);

// The first switch to `context` enters `entry` (which must never return) on `stack` with the
// stack pointer as right after a call: 8 below a 16-byte boundary, the fake return address
// at the top.
void prepare_context(FiberContext& context, void* stack, size_t bytes, void (*entry)()) {
  uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + bytes) & ~uintptr_t(15);
  auto* frame = reinterpret_cast<InitialFrame*>(top - sizeof(InitialFrame));
  *frame = InitialFrame{};
  frame->entry = entry;
  frame->return_address = 0;
  context.sp = frame;
}

// The switch `ret`s to an address no `call` pushed, which a CET shadow stack rejects with a
// SIGSEGV. rdsspq is a no-op that leaves 0 when shadow stacks are off (or unsupported).
void require_no_shadow_stack() {
  static const bool shadow_stack = [] {
    uint64_t ssp = 0;
    asm volatile("rdsspq %0" : "+r"(ssp));
    return ssp != 0;
  }();
  if (shadow_stack)
    throw std::runtime_error(
        "emulator: CET shadow stacks are enabled, which its fiber switch does not support "
        "(run with GLIBC_TUNABLES=glibc.cpu.hwcaps=-SHSTK)");
}
#else
// getcontext returns twice in general; keeping it out of the scheduler loop keeps that
// loop's locals out of its reach.
__attribute__((noinline)) void prepare_context(FiberContext& context, void* stack, size_t bytes,
                                               void (*entry)()) {
  getcontext(&context.context);
  context.context.uc_stack.ss_sp = stack;
  context.context.uc_stack.ss_size = bytes;
  context.context.uc_link = nullptr;
  makecontext(&context.context, entry, 0);
}

void require_no_shadow_stack() {}
#endif

}  // namespace pptrain::emu
