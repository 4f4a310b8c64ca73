// Buffer<T>: RAII owner of n elements of backend memory.
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

#include "backend/ops.h"

namespace pptrain {

template <typename T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(Ops& ops, size_t n) : ops_(&ops), n_(n) {
    if (n) data_ = static_cast<T*>(ops.allocate(n * sizeof(T)));
  }
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      ops_ = o.ops_; data_ = o.data_; n_ = o.n_;
      o.data_ = nullptr; o.n_ = 0;
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void reset() {
    if (data_) ops_->release(data_);
    data_ = nullptr;
    n_ = 0;
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  void zero() { if (n_) ops_->zero(data_, n_ * sizeof(T)); }
  void upload(const T* src) { if (n_) ops_->copy_to_device(data_, src, n_ * sizeof(T)); }
  void download(T* dst) const { if (n_) ops_->copy_to_host(dst, data_, n_ * sizeof(T)); }
  std::vector<T> to_host() const { std::vector<T> v(n_); download(v.data()); return v; }

 private:
  Ops* ops_ = nullptr;
  T* data_ = nullptr;
  size_t n_ = 0;
};

}  // namespace pptrain
