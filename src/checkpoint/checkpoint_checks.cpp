#include "checkpoint/checkpoint_checks.h"

#include <set>

#include "checkpoint/hdf5_handles.h"
#include "checkpoint/hdf5_io.h"
#include "checkpoint/hf_arch.h"

namespace pptrain {
namespace {

std::string link_kind(H5L_type_t type) {
  switch (type) {
    case H5L_TYPE_SOFT: return "a soft link";
    case H5L_TYPE_EXTERNAL: return "an external link";
    default: return "a user-defined link";
  }
}

herr_t collect_member(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::set<std::string>*>(out)->insert(name);
  return 0;
}

herr_t collect_link(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(cat("/", name));
  return 0;
}

// "" when `name` is a hard link (and so are the groups on its path).
std::string check_hard_link(hid_t file, const std::string& name, const std::string& path) {
  for (size_t slash = name.find('/', 1);; slash = name.find('/', slash + 1)) {
    const std::string prefix = slash == std::string::npos ? name : name.substr(0, slash);
    H5L_info_t info;
    if (H5Lget_info(file, prefix.c_str(), &info, H5P_DEFAULT) < 0)
      return cat("checkpoint ", path, ": ", prefix, " is not a readable link: ", h5::hdf5_error_text());
    if (info.type != H5L_TYPE_HARD)
      return cat("checkpoint ", path, ": ", prefix, " is ", link_kind(info.type),
                 ", expected a dataset or group stored under that name");
    if (slash == std::string::npos) return "";
  }
}

}  // namespace

std::string check_dataset_header(hid_t file, const std::string& name, const std::vector<int64_t>& expected,
                                 const std::string& path, uint64_t* checksum) {
  const std::string ctx = cat("checkpoint ", path, ": dataset ", name);
  if (H5Lexists(file, name.c_str(), H5P_DEFAULT) <= 0)
    return cat(ctx, " is missing (the model expects shape ", h5::shape_text(expected), ")");
  if (std::string problem = check_hard_link(file, name, path); !problem.empty()) return problem;
  h5::Dataset ds(H5Dopen2(file, name.c_str(), H5P_DEFAULT));
  if (!ds.valid()) return cat("checkpoint ", path, ": ", name, " is not a readable dataset: ", h5::hdf5_error_text());
  H5O_info_t object;
  if (H5Oget_info2(ds.id(), &object, H5O_INFO_BASIC) < 0) return cat(ctx, ": ", h5::hdf5_error_text());
  if (object.rc != 1)
    return cat(ctx, " is linked under ", object.rc, " names, expected one (a checkpoint stores each tensor once)");
  h5::Datatype type(H5Dget_type(ds.id()));
  if (!type.valid()) return cat(ctx, " has an unreadable type");
  if (!h5::is_float32(type.id())) return cat(ctx, " is ", h5::type_name(type.id()), ", expected float32");
  if (!h5::is_ieee_float32(type.id()))
    return cat(ctx,
               " is a 32-bit float whose layout (byte order, precision, offset, exponent or mantissa) is not IEEE "
               "binary32, expected float32");
  const std::vector<int64_t> shape = h5::dataset_shape(ds.id());
  if (shape != expected)
    return cat(ctx, " has shape ", h5::shape_text(shape), " in the file but the model expects ",
               h5::shape_text(expected));
  try {
    *checksum = h5::read_uint_attribute(ds.id(), "checksum", ctx);
  } catch (const Error& err) {
    return err.what();
  }
  return "";
}

std::string check_group_members(hid_t file, Section section, const std::vector<std::string>& names,
                                const std::string& path) {
  const std::string group = section_group(section);
  if (!h5::path_exists(file, group)) return cat("checkpoint ", path, ": group ", group, " is missing");
  if (std::string problem = check_hard_link(file, group, path); !problem.empty()) return problem;
  std::set<std::string> present;
  h5::Group g(H5Gopen2(file, group.c_str(), H5P_DEFAULT));
  if (!g.valid()) return cat("checkpoint ", path, ": ", group, " is not a readable group: ", h5::hdf5_error_text());
  hsize_t index = 0;
  H5Literate(g.id(), H5_INDEX_NAME, H5_ITER_NATIVE, &index, collect_member, &present);
  for (const std::string& n : names) present.erase(n);
  if (!present.empty())
    return cat("checkpoint ", path, ": dataset ", group, "/", *present.begin(), " in the file is not part of the model");
  return "";
}

std::string check_contents(hid_t file, const CheckpointMeta& meta, const std::string& path) {
  if (!meta.binds_names()) return "";
  std::vector<std::string> links;
  if (H5Lvisit(file, H5_INDEX_NAME, H5_ITER_INC, collect_link, &links) < 0)
    return cat("checkpoint ", path, ": the group structure is damaged: ", h5::hdf5_error_text());
  if (checksum_text(contents_text(links)) != meta.contents_checksum)
    return cat("checkpoint ", path, ": its groups and datasets (", links.size(),
               " links) are not the ones it was written with (attribute 'contents_checksum'): a dataset was added, "
               "removed, linked or renamed");
  return "";
}

std::string check_checksum(const std::string& name, const std::vector<int64_t>& shape, uint64_t element_sum,
                           uint64_t stored, const CheckpointMeta& meta, const std::string& path) {
  const uint64_t binding = meta.binds_names() ? dataset_binding(name, shape) : 0;
  if (element_sum + binding == stored) return "";
  return cat("checkpoint ", path, ": dataset ", name,
             " does not match its checksum (the file is damaged, or the dataset was written under another name)");
}

std::string check_values(const std::string& name, Section section, const SlabDigest& d, const std::string& path) {
  const std::string ctx = cat("checkpoint ", path, ": dataset ", name);
  if (d.first_nonfinite >= 0)
    return cat(ctx, " holds a non-finite value (", d.nonfinite_value, " at element ", d.first_nonfinite,
               " in row-major order)");
  if (section == Section::OptimV && d.first_negative >= 0)
    return cat(ctx, " holds a negative second moment (", d.negative_value, " at element ", d.first_negative,
               " in row-major order): impossible for AdamW's running mean of squares");
  return "";
}

std::vector<std::pair<std::string, std::vector<int64_t>>> checkpoint_tensors(const ModelConfig& model,
                                                                             const std::string& where) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (const HfTensor& t : hf_architecture_of_arch(model.arch, where).tensors(model)) out.push_back({t.name, t.shape});
  return out;
}

}  // namespace pptrain
