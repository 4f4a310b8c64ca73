#include "checkpoint/verify.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>

#include "checkpoint/checkpoint_checks.h"
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
    if (total.first_negative < 0 && d.first_negative >= 0) {
      total.first_negative = d.first_negative;
      total.negative_value = d.negative_value;
    }
  }
  return total;
}

// The section a dataset path belongs to (its moments' checks differ).
Section section_of(const std::string& name) {
  if (name.rfind("/optim/v/", 0) == 0) return Section::OptimV;
  if (name.rfind("/optim/m/", 0) == 0) return Section::OptimM;
  return Section::Model;
}

// "" when the dataset passes, else its problem: the header checks a resume makes, then
// its values read whole (in blocks) against the checksum, as a resume reads them in shards.
std::string verify_dataset(hid_t file, const std::string& name, const std::vector<int64_t>& expected,
                           const CheckpointMeta& meta, const std::string& path) {
  const std::string ctx = cat("checkpoint ", path, ": dataset ", name);
  try {
    uint64_t stored = 0;
    if (std::string problem = check_dataset_header(file, name, expected, path, &stored); !problem.empty())
      return problem;
    const int64_t rows = expected[0], cols = expected.size() > 1 ? expected[1] : 1;
    if (!checked_product({rows, cols}) || cols > kBlockElements)
      return cat(ctx, " has shape ", h5::shape_text(expected), ", beyond what a checkpoint holds");
    h5::Dataset ds(h5::check(H5Dopen2(file, name.c_str(), H5P_DEFAULT), ctx));
    const SlabDigest d = digest_dataset(ds.id(), rows, cols, ctx);
    if (std::string problem = check_checksum(name, expected, d.sum, stored, meta, path); !problem.empty())
      return problem;
    return check_values(name, section_of(name), d, path);
  } catch (const Error& e) {
    return e.what();
  }
}

// The shape the file gives `name`, for a file whose model is unknown; empty when it has
// none that a checkpoint dataset could have.
std::vector<int64_t> stored_shape(hid_t file, const std::string& name) {
  h5::QuietHdf5 quiet;
  h5::Dataset ds(H5Dopen2(file, name.c_str(), H5P_DEFAULT));
  if (!ds.valid()) return {};
  std::vector<int64_t> shape = h5::dataset_shape(ds.id());
  if (shape.empty() || shape.size() > 2) return {};
  return shape;
}

}  // namespace

VerifyReport verify_checkpoint_file(const std::string& path) {
  IoGroup io = IoGroup::single();
  h5::File file = open_checkpoint(path, io);
  h5::QuietHdf5 quiet;
  const std::string where = cat("checkpoint ", path);
  VerifyReport report;
  auto problem = [&](const std::string& p) {
    if (!p.empty()) report.problems.push_back(p);
  };
  std::optional<CheckpointMeta> meta;
  try {
    meta = read_meta(file.id(), where);
  } catch (const Error& e) {
    problem(e.what());
  }
  // The model the file was written for, from its stored config, as a resume's job has it.
  std::optional<std::vector<std::pair<std::string, std::vector<int64_t>>>> model;
  if (meta) {
    try {
      const Config stored = parse_config(meta->config_yaml, cat(path, " (attribute 'config')"));
      model = checkpoint_tensors(stored.model, cat(path, " (attribute 'config')"));
    } catch (const Error& e) {
      problem(cat(where, ": the stored config does not parse: ", e.what()));
    }
  }
  Listing listing;
  if (H5Lvisit(file.id(), H5_INDEX_NAME, H5_ITER_INC, collect_dataset, &listing) < 0)
    problem(cat(where, ": the group structure is damaged: ", h5::hdf5_error_text()));
  for (const std::string& p : listing.unreadable) problem(cat(where, ": ", p));

  if (meta && model) {
    // Exactly a resume's checks (checkpoint_checks.h), over every section the file has.
    std::vector<Section> sections = {Section::Model};
    if (meta->has_optimizer_state) sections.insert(sections.end(), {Section::OptimM, Section::OptimV});
    std::vector<std::string> names;
    for (const auto& [name, shape] : *model) names.push_back(name);
    for (Section section : sections) {
      problem(check_group_members(file.id(), section, names, path));
      for (const auto& [name, shape] : *model) {
        const std::string p = verify_dataset(file.id(), cat(section_group(section), "/", name), shape, *meta, path);
        if (p.empty()) ++report.datasets_verified;
        problem(p);
      }
    }
    // What the checks above did not explain: an extra link elsewhere, a renamed group.
    if (report.problems.empty()) problem(check_contents(file.id(), *meta, path));
    return report;
  }
  // Without a model: whatever datasets the file holds, each of the shape it has.
  const std::vector<std::string>& names = listing.datasets;
  if (names.empty()) problem(cat(where, ": holds no dataset"));
  if (meta && meta->has_optimizer_state)
    for (const std::string& p : unmatched(names, where)) problem(p);
  // Root attributes unreadable: checksums as the current version binds them.
  const CheckpointMeta as_written = meta.value_or(CheckpointMeta{});
  for (const std::string& name : names) {
    const std::vector<int64_t> shape = stored_shape(file.id(), name);
    const std::string p = shape.empty() ? cat(where, ": dataset ", name, " has no shape a checkpoint tensor has (rank 1 or 2)")
                                        : verify_dataset(file.id(), name, shape, as_written, path);
    if (p.empty()) ++report.datasets_verified;
    problem(p);
  }
  return report;
}

}  // namespace pptrain
