// Buffer<T>: RAII owner of n elements of backend memory, or (Buffer::view) a non-owning
// window onto n elements of memory something else owns (the parameter arenas of
// ParamStore::flatten), with the same interface so code reading a Buffer needs no change.
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
  // n elements at `data`, owned elsewhere: never released by this object, which must not
  // outlive the owner.
  static Buffer view(Ops& ops, T* data, size_t n) {
    Buffer b;
    b.ops_ = &ops;
    b.data_ = n ? data : nullptr;
    b.n_ = n;
    b.owned_ = false;
    return b;
  }
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      ops_ = o.ops_; data_ = o.data_; n_ = o.n_; owned_ = o.owned_;
      o.data_ = nullptr; o.n_ = 0; o.owned_ = true;
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void reset() {
    if (data_ && owned_) ops_->release(data_);
    data_ = nullptr;
    n_ = 0;
    owned_ = true;
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  bool owned() const { return owned_; }
  Ops* ops() const { return ops_; }  // the backend it lives on (nullptr when default-made)
  void zero() { if (n_) ops_->zero(data_, n_ * sizeof(T)); }
  void upload(const T* src) { if (n_) ops_->copy_to_device(data_, src, n_ * sizeof(T)); }
  void download(T* dst) const { if (n_) ops_->copy_to_host(dst, data_, n_ * sizeof(T)); }
  std::vector<T> to_host() const { std::vector<T> v(n_); download(v.data()); return v; }

 private:
  Ops* ops_ = nullptr;
  T* data_ = nullptr;
  size_t n_ = 0;
  bool owned_ = true;
};

}  // namespace pptrain
