// Small typed helpers over the HDF5 C API: attributes (integers, strings, integer
// arrays), dataset shapes and types, transfers of one slab. Every failure throws
// pptrain::Error naming the file and object (callers pass `where`, e.g. the file path).
//
// In a file opened with MPI-IO, creating and writing attributes are collective: every
// rank calls them with identical values.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/hdf5_handles.h"
#include "model/param.h"

namespace pptrain::h5 {

void write_attribute(hid_t object, const std::string& name, int64_t value, const std::string& where);
void write_attribute(hid_t object, const std::string& name, uint64_t value, const std::string& where);
void write_attribute(hid_t object, const std::string& name, const std::string& value, const std::string& where);
void write_attribute(hid_t object, const std::string& name, const std::vector<int64_t>& values,
                     const std::string& where);

// The largest string attribute written or read (the resolved config is the largest).
inline constexpr size_t kMaxStringAttributeBytes = size_t(1) << 20;

bool has_attribute(hid_t object, const std::string& name);
// Read an attribute; a missing attribute or one of another kind is a pptrain::Error. The
// type (an 8-byte integer of the right sign, in full), the dataspace (scalar or 1-D, of
// the expected count) and the stored bytes are checked before anything is allocated or
// read. Strings must be fixed-length of at most `max_bytes`; variable-length strings are
// refused (HDF5 would follow a length and heap address from the file unchecked).
int64_t read_int_attribute(hid_t object, const std::string& name, const std::string& where);
uint64_t read_uint_attribute(hid_t object, const std::string& name, const std::string& where);
std::string read_string_attribute(hid_t object, const std::string& name, const std::string& where,
                                  size_t max_bytes = 256);
std::vector<int64_t> read_int_array_attribute(hid_t object, const std::string& name, size_t max_count,
                                              const std::string& where);

// Any attribute as text, whatever its type (integers, floats, strings, small arrays):
// for `pptrain inspect`.
std::string attribute_as_text(hid_t attribute);

// Whether `path` (e.g. "/model/wte.weight") names an existing link, each level checked.
bool path_exists(hid_t file, const std::string& path);

// Dimensions of a dataset's dataspace.
std::vector<int64_t> dataset_shape(hid_t dataset);
// "float32", "float64", "int32", "string"...: how messages and `inspect` name a type.
std::string type_name(hid_t type);
bool is_float32(hid_t type);
// Exactly IEEE binary32 (either byte order): class, size, order, precision, offset,
// padding, sign, exponent and mantissa positions and sizes, bias, normalisation.
bool is_ieee_float32(hid_t type);

// "[3, 768]"
std::string shape_text(const std::vector<int64_t>& shape);

// One collective transfer of float32 data between a dataset and a local buffer of
// `local_shape` (rank 1 or 2, the dataset's rank): `slab`'s rectangle of the global
// tensor <-> the same-shaped rectangle of the buffer at (local_row, local_col). HDF5
// moves equally shaped selections without repacking. With `slab` null the rank takes
// part with empty selections. `write`: buffer to file, else file to buffer.
void transfer_slab(hid_t dataset, const std::vector<int64_t>& local_shape, const Slab* slab, bool write,
                   float* local, hid_t transfer_plist, const std::string& where);

}  // namespace pptrain::h5
