// The harness of the tests that run one body on the cpu backend and on CudaOps and compare
// what each computed (test_cuda_backend in fp32, test_cuda_backend_bf16 in bf16):
//   BackendRun            named tensors on one backend: put from host values, read back
//                         by name (bf16 widened to float), released with the run
//   for_each_cuda_order   a fresh CudaOps per run order (both fiber orders under the
//                         emulator, once on a device: support/cuda_run_order.h)
// Each test keeps only its own comparison rule (fp32: one relative tolerance; bf16: a bound
// per output counting its roundings).
#pragma once
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/ops.h"
#include "core/bf16.h"
#include "support/cuda_run_order.h"

namespace pptrain::testing {

class BackendRun {
 public:
  explicit BackendRun(Ops& ops) : ops_(ops) {}
  ~BackendRun() {
    for (auto& [name, t] : tensors_) ops_.release(t.p);
  }
  BackendRun(const BackendRun&) = delete;
  BackendRun& operator=(const BackendRun&) = delete;

  // A tensor named `name` holding `host` (float, bfloat16 or int32_t elements).
  template <typename T>
  T* put(const std::string& name, const std::vector<T>& host) {
    const size_t bytes = host.size() * sizeof(T);
    void* p = ops_.allocate(bytes);
    ops_.copy_to_device(p, host.data(), bytes);
    tensors_[name] = Tensor{p, bytes, std::is_same_v<T, bfloat16>};
    return static_cast<T*>(p);
  }
  float* zeros(const std::string& name, size_t n) { return put(name, std::vector<float>(n, 0.0f)); }
  template <typename T = float>
  T* at(const std::string& name) {
    return static_cast<T*>(tensors_.at(name).p);
  }
  float* f(const std::string& name) { return at<float>(name); }
  // The tensor's values as floats (a bf16 tensor widened exactly).
  std::vector<float> get(const std::string& name) {
    const Tensor& t = tensors_.at(name);
    if (!t.bf16) {
      std::vector<float> v(t.bytes / sizeof(float));
      ops_.copy_to_host(v.data(), t.p, t.bytes);
      return v;
    }
    std::vector<bfloat16> h(t.bytes / sizeof(bfloat16));
    ops_.copy_to_host(h.data(), t.p, t.bytes);
    std::vector<float> v(h.size());
    for (size_t i = 0; i < h.size(); ++i) v[i] = h[i].to_float();
    return v;
  }
  Ops& ops() { return ops_; }

 private:
  struct Tensor {
    void* p;
    size_t bytes;
    bool bf16;
  };
  Ops& ops_;
  std::map<std::string, Tensor> tensors_;
};

// Calls run(ops, order) with a fresh CudaOps on device 0 for each run order, under a
// SCOPED_TRACE naming the order; stops after the first order with a failure.
template <typename Run>
void for_each_cuda_order(Run&& run) {
  for (RunOrder order : kRunOrders) {
    SCOPED_TRACE(run_order_name(order));
    auto cuda_ops = make_cuda_ops(0);
    set_run_order(*cuda_ops, order);
    run(*cuda_ops, order);
    if (::testing::Test::HasFailure()) return;
  }
}

}  // namespace pptrain::testing
