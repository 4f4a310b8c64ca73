// ForwardingOps: a backend that forwards every call to another (the cpu backend unless given
// one), the base of the tests' backends that watch or script a few calls and leave the rest
// to a real backend (counting_ops.h, test_op_profile's scripted clock, test_executor_prepare's
// log of the linear ops' weights): a derived class overrides what it watches and calls
// ForwardingOps's version for the work.
#pragma once
#include <memory>
#include <string>
#include <utility>

#include "backend/ops.h"

namespace pptrain::testing {

class ForwardingOps : public Ops {
 public:
  explicit ForwardingOps(std::unique_ptr<Ops> inner = make_cpu_ops()) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  std::unique_ptr<OpClock> make_op_clock() override { return inner_->make_op_clock(); }
  void* allocate(size_t bytes) override { return inner_->allocate(bytes); }
  void release(void* p) override { inner_->release(p); }
  void copy_to_device(void* d, const void* s, size_t n) override { inner_->copy_to_device(d, s, n); }
  void copy_to_host(void* d, const void* s, size_t n) override { inner_->copy_to_host(d, s, n); }
  void copy(void* d, const void* s, size_t n) override { inner_->copy(d, s, n); }
  void zero(void* p, size_t n) override { inner_->zero(p, n); }
  void synchronize() override { inner_->synchronize(); }
  MemoryStats memory_stats() const override { return inner_->memory_stats(); }
  void reset_peak_memory() override { inner_->reset_peak_memory(); }
  void hold_weights(int microbatches) override { inner_->hold_weights(microbatches); }
  bool prepare_linear_weight(ConstView w, int rows, int in, int out, bool dgrad) override {
    return inner_->prepare_linear_weight(w, rows, in, out, dgrad);
  }
#define PPTRAIN_FORWARD_OP(ret, name, params, args) \
  ret name params override { return inner_->name args; }
  PPTRAIN_EACH_OP(PPTRAIN_FORWARD_OP)
#undef PPTRAIN_FORWARD_OP

 protected:
  Ops& inner() { return *inner_; }

 private:
  std::unique_ptr<Ops> inner_;
};

}  // namespace pptrain::testing
