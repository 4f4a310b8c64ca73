// RAII for HDF5 identifiers (files, groups, datasets, dataspaces, datatypes, property
// lists, attributes) and the translation of HDF5 failures into pptrain::Error.
//
// HDF5 prints its error stack to stderr by default; pptrain turns every failure into one
// line instead, so QuietHdf5 switches the printing off while checkpoint code runs and
// hdf5_error_text() fetches the most specific message of the stack for that line
// (e.g. "truncated file: eof = 4096, ..., stored_eof = 8192").
#pragma once
#include <hdf5.h>

#include <string>
#include <utility>

#include "core/error.h"

namespace pptrain::h5 {

// Owns one hid_t; `Close` is the matching H5?close.
template <herr_t (*Close)(hid_t)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t id() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now and reports the result (a file's close flushes and can fail).
  herr_t close() {
    herr_t rc = valid() ? Close(id_) : 0;
    id_ = H5I_INVALID_HID;
    return rc;
  }
  // Gives up ownership without closing.
  hid_t release() { return std::exchange(id_, H5I_INVALID_HID); }
  void reset() {
    if (valid()) Close(id_);
    id_ = H5I_INVALID_HID;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
};

using File = Handle<H5Fclose>;
using Group = Handle<H5Gclose>;
using Dataset = Handle<H5Dclose>;
using Dataspace = Handle<H5Sclose>;
using Datatype = Handle<H5Tclose>;
using PropertyList = Handle<H5Pclose>;
using Attribute = Handle<H5Aclose>;

// Switches HDF5's automatic error printing off for its lifetime, restoring it after.
class QuietHdf5 {
 public:
  QuietHdf5();
  ~QuietHdf5();
  QuietHdf5(const QuietHdf5&) = delete;
  QuietHdf5& operator=(const QuietHdf5&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// The most specific message on HDF5's current error stack ("" if empty).
std::string hdf5_error_text();

// Throws pptrain::Error "<context>: <HDF5 message>" when `id` is negative.
hid_t check(hid_t id, const std::string& context);
// Same for herr_t / htri_t results.
inline void check_status(herr_t rc, const std::string& context) { check(hid_t(rc), context); }
// Same for a call that touches the file system (set errno = 0 before it): adds errno's
// text when HDF5's message lacks it.
void io_check(herr_t rc, const std::string& context);

}  // namespace pptrain::h5
