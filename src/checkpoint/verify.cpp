#include "checkpoint/verify.h"

#include <algorithm>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checksum.h"
#include "checkpoint/hdf5_io.h"
#include "core/input_file.h"

namespace pptrain {
namespace {

constexpr int64_t kBlockElements = int64_t(4) << 20;  // 16 MiB of float32 per read

herr_t collect_dataset(hid_t group, const char* name, const H5L_info_t*, void* out) {
  h5::QuietHdf5 quiet;
  hid_t obj = H5Oopen(group, name, H5P_DEFAULT);
  if (obj < 0) return 0;  // a dangling link: not a dataset
  if (H5Iget_type(obj) == H5I_DATASET) static_cast<std::vector<std::string>*>(out)->push_back(cat("/", name));
  H5Oclose(obj);
  return 0;
}

// The digest of a whole [rows, cols] dataset, read `block_rows` rows at a time.
SlabDigest digest_dataset(hid_t ds, int64_t rows, int64_t cols, const std::string& ctx) {
  const int64_t block_rows = std::max<int64_t>(1, kBlockElements / cols);
  h5::Dataspace file_space(h5::check(H5Dget_space(ds), ctx));
  std::vector<float> buf;  // [block_rows, cols]
  SlabDigest total;
  for (int64_t r0 = 0; r0 < rows; r0 += block_rows) {
    const int64_t n_rows = std::min(block_rows, rows - r0);
    const hsize_t start[2] = {hsize_t(r0), 0}, count[2] = {hsize_t(n_rows), hsize_t(cols)};
    h5::check_status(H5Sselect_hyperslab(file_space.id(), H5S_SELECT_SET, start, nullptr, count, nullptr), ctx);
    const hsize_t n = hsize_t(n_rows * cols);
    h5::Dataspace mem(h5::check(H5Screate_simple(1, &n, nullptr), ctx));
    buf.resize(n);
    h5::check_status(H5Dread(ds, H5T_NATIVE_FLOAT, mem.id(), file_space.id(), H5P_DEFAULT, buf.data()),
                     cat(ctx, ": read"));
    const SlabDigest d = digest_range(buf.data(), int64_t(n), r0 * cols);
    total.sum += d.sum;
    if (total.first_nonfinite < 0 && d.first_nonfinite >= 0) {
      total.first_nonfinite = d.first_nonfinite;
      total.nonfinite_value = d.nonfinite_value;
    }
  }
  return total;
}

// "" when the dataset passes, else its problem.
std::string verify_dataset(hid_t file, const std::string& name, const std::string& where) {
  const std::string ctx = cat(where, ": dataset ", name);
  try {
    h5::Dataset ds(h5::check(H5Dopen2(file, name.c_str(), H5P_DEFAULT), ctx));
    h5::Datatype type(h5::check(H5Dget_type(ds.id()), ctx));
    if (!h5::is_ieee_float32(type.id())) return cat(ctx, " is ", h5::type_name(type.id()), ", expected IEEE float32");
    const std::vector<int64_t> shape = h5::dataset_shape(ds.id());
    if (shape.empty() || shape.size() > 2) return cat(ctx, " has rank ", shape.size(), ", expected 1 or 2");
    const int64_t rows = shape[0], cols = shape.size() > 1 ? shape[1] : 1;
    if (!checked_product({rows, cols}) || cols > kBlockElements)
      return cat(ctx, " has shape ", h5::shape_text(shape), ", beyond what a checkpoint holds");
    const uint64_t stored = h5::read_uint_attribute(ds.id(), "checksum", ctx);
    const SlabDigest d = digest_dataset(ds.id(), rows, cols, ctx);
    if (d.sum != stored) return cat(ctx, " does not match its checksum (the file is damaged)");
    if (d.first_nonfinite >= 0)
      return cat(ctx, " holds a non-finite value (", d.nonfinite_value, " at element ", d.first_nonfinite,
                 " in row-major order)");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

VerifyReport verify_checkpoint_file(const std::string& path) {
  IoGroup io = IoGroup::single();
  h5::File file = open_checkpoint(path, io);
  h5::QuietHdf5 quiet;
  const std::string where = cat("checkpoint ", path);
  VerifyReport report;
  try {
    read_meta(file.id(), where);
  } catch (const Error& e) {
    report.problems.push_back(e.what());
  }
  std::vector<std::string> names;
  H5Lvisit(file.id(), H5_INDEX_NAME, H5_ITER_INC, collect_dataset, &names);
  h5::hdf5_error_text();  // clears what a damaged link may have left
  if (names.empty()) report.problems.push_back(cat(where, ": holds no dataset"));
  for (const std::string& name : names) {
    const std::string problem = verify_dataset(file.id(), name, where);
    if (problem.empty()) ++report.datasets_verified;
    else report.problems.push_back(problem);
  }
  return report;
}

}  // namespace pptrain
