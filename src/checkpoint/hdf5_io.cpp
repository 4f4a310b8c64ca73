#include "checkpoint/hdf5_io.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <type_traits>

namespace pptrain::h5 {

QuietHdf5::QuietHdf5() {
  H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

QuietHdf5::~QuietHdf5() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

namespace {

// H5E_WALK_UPWARD visits the most specific error first; keep that one.
herr_t keep_first(unsigned n, const H5E_error2_t* err, void* out) {
  auto* text = static_cast<std::string*>(out);
  if (n == 0 && err->desc) *text = err->desc;
  return 0;
}

}  // namespace

std::string hdf5_error_text() {
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_first, &text);
  H5Eclear2(H5E_DEFAULT);
  if (text.empty()) return "HDF5 call failed";
  // The POSIX driver's message lists time (with ctime's newline), file, descriptor,
  // errno, buffer and sizes: keep its first clause and the system's reason, on one line.
  const std::string marker = "error message = '";
  if (const size_t at = text.find(marker); at != std::string::npos) {
    const size_t end = text.find('\'', at + marker.size());
    text = cat(text.substr(0, text.find(':')), ": ", text.substr(at + marker.size(), end - at - marker.size()));
  }
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

hid_t check(hid_t id, const std::string& context) {
  if (id < 0) fail(context, ": ", hdf5_error_text());
  return id;
}

void io_check(herr_t rc, const std::string& context) {
  if (rc >= 0) return;
  // MPI-IO reports a short write as "file write failed" and HDF5's message may carry no
  // errno at all: the system's reason (e.g. "No space left on device") is errno's.
  const int err = errno;
  std::string text = hdf5_error_text();
  if (err != 0 && text.find(std::strerror(err)) == std::string::npos) text += cat(": ", std::strerror(err));
  fail(context, ": ", text);
}

namespace {

// Creates (or replaces) attribute `name` of `type` over `space` and writes `data`.
void put_attribute(hid_t object, const std::string& name, hid_t type, hid_t space, const void* data,
                   const std::string& where) {
  const std::string ctx = cat(where, ": attribute '", name, "'");
  if (H5Aexists(object, name.c_str()) > 0) check_status(H5Adelete(object, name.c_str()), ctx);
  Attribute a(check(H5Acreate2(object, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT), ctx));
  check_status(H5Awrite(a.id(), type, data), ctx);
}

Attribute open_attribute(hid_t object, const std::string& name, const std::string& where) {
  if (H5Aexists(object, name.c_str()) <= 0) fail(where, ": attribute '", name, "' is missing");
  return Attribute(check(H5Aopen(object, name.c_str(), H5P_DEFAULT), cat(where, ": attribute '", name, "'")));
}

// Number of elements of an attribute's dataspace; -1 unless it is scalar or simple of
// rank <= 1 (pptrain writes nothing else).
int64_t attribute_size(hid_t attribute) {
  Dataspace s(H5Aget_space(attribute));
  if (!s.valid()) return -1;
  const H5S_class_t cls = H5Sget_simple_extent_type(s.id());
  if (cls != H5S_SCALAR && (cls != H5S_SIMPLE || H5Sget_simple_extent_ndims(s.id()) > 1)) return -1;
  hssize_t n = H5Sget_simple_extent_npoints(s.id());
  return n < 0 ? -1 : int64_t(n);
}

// An 8-byte integer of either byte order, nothing else (precision, offset and padding
// included: H5Tequal compares every property of the type).
bool is_int64(hid_t type, bool is_signed) {
  if (is_signed) return H5Tequal(type, H5T_STD_I64LE) > 0 || H5Tequal(type, H5T_STD_I64BE) > 0;
  return H5Tequal(type, H5T_STD_U64LE) > 0 || H5Tequal(type, H5T_STD_U64BE) > 0;
}

// Reads `count` 8-byte integers of an attribute after checking its type, its dataspace
// and the bytes it stores, so nothing is allocated or read on the file's word.
template <typename T>
std::vector<T> read_int64s(hid_t object, const std::string& name, int64_t min_count, int64_t max_count,
                           const std::string& where) {
  constexpr bool is_signed = std::is_signed_v<T>;
  Attribute a = open_attribute(object, name, where);
  Datatype t(H5Aget_type(a.id()));
  const int64_t n = attribute_size(a.id());
  if (!t.valid() || !is_int64(t.id(), is_signed) || n < min_count || n > max_count)
    fail(where, ": attribute '", name, "' is ", t.valid() ? type_name(t.id()) : std::string("unreadable"), " of ", n,
         " elements, expected ", min_count == max_count ? cat(min_count) : cat(min_count, "..", max_count), " ",
         is_signed ? "int64" : "uint64");
  if (H5Aget_storage_size(a.id()) != hsize_t(n) * 8)
    fail(where, ": attribute '", name, "' stores ", H5Aget_storage_size(a.id()), " bytes, expected ", n * 8);
  std::vector<T> out(static_cast<size_t>(n));
  if (n > 0)
    check_status(H5Aread(a.id(), is_signed ? H5T_NATIVE_INT64 : H5T_NATIVE_UINT64, out.data()),
                 cat(where, ": attribute '", name, "'"));
  return out;
}

}  // namespace

void write_attribute(hid_t object, const std::string& name, int64_t value, const std::string& where) {
  Dataspace scalar(H5Screate(H5S_SCALAR));
  put_attribute(object, name, H5T_NATIVE_INT64, scalar.id(), &value, where);
}

void write_attribute(hid_t object, const std::string& name, uint64_t value, const std::string& where) {
  Dataspace scalar(H5Screate(H5S_SCALAR));
  put_attribute(object, name, H5T_NATIVE_UINT64, scalar.id(), &value, where);
}

void write_attribute(hid_t object, const std::string& name, const std::string& value, const std::string& where) {
  // Fixed-length, NUL-terminated UTF-8 (format version 2): a reader knows the size from
  // the type and checks it before reading, where a variable-length string would make
  // HDF5 follow a length and heap address from the file unchecked.
  if (value.size() + 1 > kMaxStringAttributeBytes)
    fail(where, ": attribute '", name, "' is ", value.size(), " bytes, more than the ", kMaxStringAttributeBytes,
         " a checkpoint stores");
  Datatype type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.id(), value.size() + 1);
  H5Tset_strpad(type.id(), H5T_STR_NULLTERM);
  H5Tset_cset(type.id(), H5T_CSET_UTF8);
  Dataspace scalar(H5Screate(H5S_SCALAR));
  put_attribute(object, name, type.id(), scalar.id(), value.c_str(), where);
}

void write_attribute(hid_t object, const std::string& name, const std::vector<int64_t>& values,
                     const std::string& where) {
  hsize_t n = values.size();
  Dataspace space(H5Screate_simple(1, &n, nullptr));
  put_attribute(object, name, H5T_NATIVE_INT64, space.id(), values.data(), where);
}

bool has_attribute(hid_t object, const std::string& name) { return H5Aexists(object, name.c_str()) > 0; }

int64_t read_int_attribute(hid_t object, const std::string& name, const std::string& where) {
  return read_int64s<int64_t>(object, name, 1, 1, where)[0];
}

uint64_t read_uint_attribute(hid_t object, const std::string& name, const std::string& where) {
  return read_int64s<uint64_t>(object, name, 1, 1, where)[0];
}

std::string read_string_attribute(hid_t object, const std::string& name, const std::string& where,
                                  size_t max_bytes) {
  Attribute a = open_attribute(object, name, where);
  Datatype t(H5Aget_type(a.id()));
  const std::string ctx = cat(where, ": attribute '", name, "'");
  if (!t.valid() || H5Tget_class(t.id()) != H5T_STRING || attribute_size(a.id()) != 1)
    fail(ctx, " is not one string");
  if (H5Tis_variable_str(t.id()) != 0)
    fail(ctx, " is a variable-length string, which pptrain does not read (checkpoints of format version 2 and "
         "later store fixed-length strings)");
  const size_t bytes = H5Tget_size(t.id());
  if (bytes == 0 || bytes > max_bytes) fail(ctx, " is a string of ", bytes, " bytes, expected 1..", max_bytes);
  if (H5Aget_storage_size(a.id()) != bytes)
    fail(ctx, " stores ", H5Aget_storage_size(a.id()), " bytes but its type says ", bytes);
  std::string out(bytes, '\0');
  check_status(H5Aread(a.id(), t.id(), out.data()), ctx);
  out.resize(out.find('\0') == std::string::npos ? out.size() : out.find('\0'));
  return out;
}

std::vector<int64_t> read_int_array_attribute(hid_t object, const std::string& name, size_t max_count,
                                              const std::string& where) {
  return read_int64s<int64_t>(object, name, 0, int64_t(max_count), where);
}

std::string attribute_as_text(hid_t attribute) {
  // Bounded like the typed readers: at most kMaxTextValues numbers, fixed-length strings
  // of at most kMaxStringAttributeBytes whose stored size matches their type, no
  // variable-length data.
  constexpr int64_t kMaxTextValues = 64;
  Datatype t(H5Aget_type(attribute));
  if (!t.valid()) return "(unreadable type)";
  const int64_t n = attribute_size(attribute);
  const size_t type_bytes = H5Tget_size(t.id());
  if (n < 0) return "(unsupported dataspace)";
  const bool stored_matches = H5Aget_storage_size(attribute) == hsize_t(n) * type_bytes;
  std::ostringstream out;
  switch (H5Tget_class(t.id())) {
    case H5T_INTEGER:
    case H5T_FLOAT: {
      if (n > kMaxTextValues) return cat("(", n, " values)");
      if (!stored_matches || type_bytes > 8) return "(damaged: stored size does not match the type)";
      const bool integer = H5Tget_class(t.id()) == H5T_INTEGER;
      // Unsigned integers (the checksums) read as such: as int64 the library would clamp
      // one above INT64_MAX to 9223372036854775807.
      const bool is_unsigned = integer && H5Tget_sign(t.id()) == H5T_SGN_NONE;
      std::vector<double> d(n);
      std::vector<int64_t> i(n);
      std::vector<uint64_t> u(n);
      if (n > 0) {
        herr_t rc = is_unsigned ? H5Aread(attribute, H5T_NATIVE_UINT64, u.data())
                    : integer   ? H5Aread(attribute, H5T_NATIVE_INT64, i.data())
                                : H5Aread(attribute, H5T_NATIVE_DOUBLE, d.data());
        if (rc < 0) return "(unreadable)";
      }
      if (n != 1) out << "[";
      for (int64_t k = 0; k < n; ++k) {
        if (k) out << ", ";
        if (is_unsigned) out << u[k];
        else if (integer) out << i[k];
        else out << d[k];
      }
      if (n != 1) out << "]";
      break;
    }
    case H5T_STRING: {
      if (H5Tis_variable_str(t.id()) != 0) return "(variable-length string, not read)";
      if (n != 1) return cat("(", n, " strings)");
      if (!stored_matches || type_bytes == 0 || type_bytes > kMaxStringAttributeBytes)
        return "(damaged: stored size does not match the type)";
      std::string s(type_bytes, '\0');
      if (H5Aread(attribute, t.id(), s.data()) < 0) return "(unreadable)";
      out << s.substr(0, s.find('\0'));
      break;
    }
    default:
      out << "(" << type_name(t.id()) << ")";
  }
  return out.str();
}

bool path_exists(hid_t file, const std::string& path) {
  // H5Lexists needs every intermediate group to exist, so check each prefix in turn.
  size_t pos = 0;
  while (true) {
    pos = path.find('/', pos + 1);
    std::string prefix = path.substr(0, pos);
    if (!prefix.empty() && prefix != "/" && H5Lexists(file, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    if (pos == std::string::npos) return true;
  }
}

std::vector<int64_t> dataset_shape(hid_t dataset) {
  Dataspace s(H5Dget_space(dataset));
  int rank = H5Sget_simple_extent_ndims(s.id());
  if (rank < 0) return {};
  std::vector<hsize_t> dims(rank);
  H5Sget_simple_extent_dims(s.id(), dims.data(), nullptr);
  return std::vector<int64_t>(dims.begin(), dims.end());
}

std::string type_name(hid_t type) {
  const size_t bytes = H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_FLOAT: return cat("float", bytes * 8);
    case H5T_INTEGER: return cat(H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int", bytes * 8);
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    case H5T_ENUM: return "enum";
    case H5T_ARRAY: return "array";
    case H5T_OPAQUE: return "opaque";
    default: return "other";
  }
}

bool is_float32(hid_t type) { return H5Tget_class(type) == H5T_FLOAT && H5Tget_size(type) == 4; }

bool is_ieee_float32(hid_t type) {
  return H5Tequal(type, H5T_IEEE_F32LE) > 0 || H5Tequal(type, H5T_IEEE_F32BE) > 0;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += cat(i ? ", " : "", shape[i]);
  return s + "]";
}

void transfer_slab(hid_t dataset, const std::vector<int64_t>& local_shape, const Slab* slab, bool write,
                   float* local, hid_t transfer_plist, const std::string& where) {
  const int rank = int(local_shape.size());
  PPTRAIN_CHECK(rank == 1 || rank == 2, where);
  Dataspace file_space(check(H5Dget_space(dataset), where));
  std::vector<hsize_t> dims(local_shape.begin(), local_shape.end());
  for (hsize_t& d : dims) d = std::max<hsize_t>(d, 1);  // a rank holding nothing still needs a space
  Dataspace mem_space(check(H5Screate_simple(rank, dims.data(), nullptr), where));
  float dummy = 0.0f;
  if (slab) {
    const hsize_t file_start[2] = {hsize_t(slab->global_row), hsize_t(slab->global_col)};
    const hsize_t mem_start[2] = {hsize_t(slab->local_row), hsize_t(slab->local_col)};
    const hsize_t count[2] = {hsize_t(slab->rows), hsize_t(slab->cols)};
    check_status(H5Sselect_hyperslab(file_space.id(), H5S_SELECT_SET, file_start, nullptr, count, nullptr), where);
    check_status(H5Sselect_hyperslab(mem_space.id(), H5S_SELECT_SET, mem_start, nullptr, count, nullptr), where);
  } else {
    check_status(H5Sselect_none(file_space.id()), where);
    check_status(H5Sselect_none(mem_space.id()), where);
    local = &dummy;
  }
  errno = 0;  // so that a failure's errno is this call's (io_check)
  if (write)
    io_check(H5Dwrite(dataset, H5T_NATIVE_FLOAT, mem_space.id(), file_space.id(), transfer_plist, local), where);
  else
    io_check(H5Dread(dataset, H5T_NATIVE_FLOAT, mem_space.id(), file_space.id(), transfer_plist, local), where);
}

}  // namespace pptrain::h5
