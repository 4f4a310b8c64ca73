#include "checkpoint/hdf5_io.h"

#include <algorithm>
#include <sstream>

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
  return text.empty() ? "HDF5 call failed" : text;
}

hid_t check(hid_t id, const std::string& context) {
  if (id < 0) fail(context, ": ", hdf5_error_text());
  return id;
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

// Number of elements of an attribute's dataspace.
int64_t attribute_size(hid_t attribute) {
  Dataspace s(H5Aget_space(attribute));
  hssize_t n = H5Sget_simple_extent_npoints(s.id());
  return n < 0 ? 0 : int64_t(n);
}

template <typename T>
T read_scalar(hid_t object, const std::string& name, hid_t mem_type, H5T_class_t want,
              const std::string& where) {
  Attribute a = open_attribute(object, name, where);
  Datatype t(H5Aget_type(a.id()));
  if (H5Tget_class(t.id()) != want || attribute_size(a.id()) != 1)
    fail(where, ": attribute '", name, "' is a ", type_name(t.id()), " of ", attribute_size(a.id()),
         " elements, expected one integer");
  T value{};
  check_status(H5Aread(a.id(), mem_type, &value), cat(where, ": attribute '", name, "'"));
  return value;
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
  // Variable-length UTF-8: h5py reads it as str, h5dump prints it as text.
  Datatype type(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.id(), H5T_VARIABLE);
  H5Tset_cset(type.id(), H5T_CSET_UTF8);
  Dataspace scalar(H5Screate(H5S_SCALAR));
  const char* text = value.c_str();
  put_attribute(object, name, type.id(), scalar.id(), &text, where);
}

void write_attribute(hid_t object, const std::string& name, const std::vector<int64_t>& values,
                     const std::string& where) {
  hsize_t n = values.size();
  Dataspace space(H5Screate_simple(1, &n, nullptr));
  put_attribute(object, name, H5T_NATIVE_INT64, space.id(), values.data(), where);
}

bool has_attribute(hid_t object, const std::string& name) { return H5Aexists(object, name.c_str()) > 0; }

int64_t read_int_attribute(hid_t object, const std::string& name, const std::string& where) {
  return read_scalar<int64_t>(object, name, H5T_NATIVE_INT64, H5T_INTEGER, where);
}

uint64_t read_uint_attribute(hid_t object, const std::string& name, const std::string& where) {
  return read_scalar<uint64_t>(object, name, H5T_NATIVE_UINT64, H5T_INTEGER, where);
}

std::string read_string_attribute(hid_t object, const std::string& name, const std::string& where) {
  Attribute a = open_attribute(object, name, where);
  Datatype t(H5Aget_type(a.id()));
  if (H5Tget_class(t.id()) != H5T_STRING) fail(where, ": attribute '", name, "' is not a string");
  if (H5Tis_variable_str(t.id()) > 0) {
    // Read with the attribute's own type: HDF5 converts no string character sets.
    char* text = nullptr;
    check_status(H5Aread(a.id(), t.id(), &text), cat(where, ": attribute '", name, "'"));
    std::string out = text ? text : "";
    H5free_memory(text);
    return out;
  }
  std::string out(H5Tget_size(t.id()), '\0');
  check_status(H5Aread(a.id(), t.id(), out.data()), cat(where, ": attribute '", name, "'"));
  out.resize(out.find('\0') == std::string::npos ? out.size() : out.find('\0'));
  return out;
}

std::vector<int64_t> read_int_array_attribute(hid_t object, const std::string& name, const std::string& where) {
  Attribute a = open_attribute(object, name, where);
  Datatype t(H5Aget_type(a.id()));
  if (H5Tget_class(t.id()) != H5T_INTEGER) fail(where, ": attribute '", name, "' is not an integer array");
  std::vector<int64_t> out(attribute_size(a.id()));
  if (!out.empty()) check_status(H5Aread(a.id(), H5T_NATIVE_INT64, out.data()), cat(where, ": attribute '", name, "'"));
  return out;
}

std::string attribute_as_text(hid_t attribute) {
  Datatype t(H5Aget_type(attribute));
  const int64_t n = attribute_size(attribute);
  std::ostringstream out;
  switch (H5Tget_class(t.id())) {
    case H5T_INTEGER:
    case H5T_FLOAT: {
      const bool integer = H5Tget_class(t.id()) == H5T_INTEGER;
      std::vector<double> d(n);
      std::vector<int64_t> i(n);
      if (n > 0) {
        if (integer) H5Aread(attribute, H5T_NATIVE_INT64, i.data());
        else H5Aread(attribute, H5T_NATIVE_DOUBLE, d.data());
      }
      if (n != 1) out << "[";
      for (int64_t k = 0; k < n; ++k) {
        if (k) out << ", ";
        if (integer) out << i[k];
        else out << d[k];
      }
      if (n != 1) out << "]";
      break;
    }
    case H5T_STRING: {
      if (H5Tis_variable_str(t.id()) > 0) {
        char* text = nullptr;
        if (n == 1 && H5Aread(attribute, t.id(), &text) >= 0 && text) {
          out << text;
          H5free_memory(text);
        }
      } else if (n == 1) {
        std::string s(H5Tget_size(t.id()), '\0');
        if (H5Aread(attribute, t.id(), s.data()) >= 0) out << s.substr(0, s.find('\0'));
      } else {
        out << "(" << n << " strings)";
      }
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
  if (write)
    check_status(H5Dwrite(dataset, H5T_NATIVE_FLOAT, mem_space.id(), file_space.id(), transfer_plist, local), where);
  else
    check_status(H5Dread(dataset, H5T_NATIVE_FLOAT, mem_space.id(), file_space.id(), transfer_plist, local), where);
}

}  // namespace pptrain::h5
