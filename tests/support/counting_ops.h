// CountingOps: a backend that forwards every call to another and counts the bytes it is
// asked to allocate (requested sizes, before the backend's own rounding), live and at the
// peak, so tests can compare a memory prediction with what the model really allocates, and
// the bytes it is asked to copy device to device (Ops::copy), so tests can prove a path
// copies nothing.
// memory_stats and reset_peak_memory are the inner backend's (its own accounting, which
// tests compare with these counts); reset_peak_memory restarts this object's peak too.
#pragma once
#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "backend/ops.h"
#include "support/forwarding_ops.h"

namespace pptrain::testing {

class CountingOps final : public ForwardingOps {
 public:
  explicit CountingOps(std::unique_ptr<Ops> inner) : ForwardingOps(std::move(inner)) {}

  void* allocate(size_t bytes) override {
    void* p = ForwardingOps::allocate(bytes);
    sizes_[p] = bytes;
    live_ += bytes;
    peak_ = std::max(peak_, live_);
    return p;
  }
  void release(void* p) override {
    auto it = sizes_.find(p);
    if (it != sizes_.end()) {
      live_ -= it->second;
      sizes_.erase(it);
    }
    ForwardingOps::release(p);
  }
  void copy(void* d, const void* s, size_t n) override {
    copied_ += n;
    ForwardingOps::copy(d, s, n);
  }
  void reset_peak_memory() override {
    ForwardingOps::reset_peak_memory();
    peak_ = live_;
  }

  size_t live_bytes() const { return live_; }
  size_t peak_bytes() const { return peak_; }
  size_t copied_bytes() const { return copied_; }  // by Ops::copy since construction

 private:
  std::unordered_map<void*, size_t> sizes_;
  size_t live_ = 0, peak_ = 0, copied_ = 0;
};

}  // namespace pptrain::testing
