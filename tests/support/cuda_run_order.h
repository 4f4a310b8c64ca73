// How the tests that compare the cuda backend with the cpu backend run the cuda side. The
// same test files build two ways:
//  - emulated (the default: tests/test_cuda_backend*.cpp define PPTRAIN_EMULATED unless
//    PPTRAIN_REAL_DEVICE is given): kernels under the SIMT emulator, each comparison run
//    in both fiber orders so a missing barrier shows in one of them;
//  - real device (mk/gpu_tests.mk, -DPPTRAIN_REAL_DEVICE, build/gpu-tests/*): the same
//    comparisons once, on the GPU.
#pragma once
#include "backend/cuda/cuda_ops.h"
#ifdef PPTRAIN_EMULATED
#include "emu/emu.h"
#endif

namespace pptrain::testing {

#ifdef PPTRAIN_EMULATED
using RunOrder = emu::Order;
inline constexpr RunOrder kRunOrders[] = {emu::Order::forward, emu::Order::reverse};
inline const char* run_order_name(RunOrder o) {
  return o == emu::Order::forward ? "fiber order forward" : "fiber order reverse";
}
inline void set_run_order(Ops& ops, RunOrder o) { static_cast<cuda::CudaOps&>(ops).compute_stream()->order = o; }
// Kernel launches counted by the emulated stream.
inline long long launches(Ops& ops) { return static_cast<cuda::CudaOps&>(ops).compute_stream()->launches; }
#else
enum class RunOrder { device };
inline constexpr RunOrder kRunOrders[] = {RunOrder::device};
inline const char* run_order_name(RunOrder) { return "on the device"; }
inline void set_run_order(Ops&, RunOrder) {}  // the hardware schedules the threads
#endif

}  // namespace pptrain::testing
