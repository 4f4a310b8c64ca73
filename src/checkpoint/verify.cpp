#include "checkpoint/verify.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checksum.h"
#include "checkpoint/hdf5_io.h"
#include "core/input_file.h"

namespace pptrain {
namespace {

constexpr int64_t kBlockElements = int64_t(4) << 20;  // 16 MiB of float32 per read

struct Listing {
  std::vector<std::string> datasets;  // "/model/wte.weight", ...
  std::vector<std::string> unreadable;  // links HDF5 cannot open, with its reason
};

herr_t collect_dataset(hid_t group, const char* name, const H5L_info_t*, void* out) {
  auto* listing = static_cast<Listing*>(out);
  h5::QuietHdf5 quiet;
  hid_t obj = H5Oopen(group, name, H5P_DEFAULT);
  if (obj < 0) {
    listing->unreadable.push_back(cat("/", name, " is not a readable object: ", h5::hdf5_error_text()));
    return 0;
  }
  if (H5Iget_type(obj) == H5I_DATASET) listing->datasets.push_back(cat("/", name));
  H5Oclose(obj);
  return 0;
}

// Every tensor has its two moments and every moment its tensor (names after the group).
std::vector<std::string> unmatched(const std::vector<std::string>& datasets, const std::string& where) {
  std::set<std::string> sections[3];
  const char* groups[3] = {"/model/", "/optim/m/", "/optim/v/"};
  for (const std::string& d : datasets)
    for (int g = 0; g < 3; ++g)
      if (d.rfind(groups[g], 0) == 0 && d.find('/', std::strlen(groups[g])) == std::string::npos)
        sections[g].insert(d.substr(std::strlen(groups[g])));
  std::set<std::string> all;
  for (const auto& section : sections) all.insert(section.begin(), section.end());
  std::vector<std::string> problems;
  for (int g = 0; g < 3; ++g)
    for (const std::string& name : all)
      if (!sections[g].count(name))
        problems.push_back(cat(where, ": dataset ", groups[g], name, " is missing (the other groups hold ", name, ")"));
  return problems;
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
  bool meta_ok = true, has_optimizer_state = false;
  try {
    has_optimizer_state = read_meta(file.id(), where).has_optimizer_state;
  } catch (const Error& e) {
    report.problems.push_back(e.what());
    meta_ok = false;
  }
  Listing listing;
  if (H5Lvisit(file.id(), H5_INDEX_NAME, H5_ITER_INC, collect_dataset, &listing) < 0)
    report.problems.push_back(cat(where, ": the group structure is damaged: ", h5::hdf5_error_text()));
  for (const std::string& problem : listing.unreadable) report.problems.push_back(cat(where, ": ", problem));
  const std::vector<std::string>& names = listing.datasets;
  if (names.empty()) report.problems.push_back(cat(where, ": holds no dataset"));
  if (meta_ok && has_optimizer_state)
    for (const std::string& problem : unmatched(names, where)) report.problems.push_back(problem);
  for (const std::string& name : names) {
    const std::string problem = verify_dataset(file.id(), name, where);
    if (problem.empty()) ++report.datasets_verified;
    else report.problems.push_back(problem);
  }
  return report;
}

}  // namespace pptrain
