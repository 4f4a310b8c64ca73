// pptrain inspect FILE.h5: what a checkpoint holds. Prints the root attributes, the
// stored config, and a table of every dataset with its shape, type and norms (read in
// blocks, so a large checkpoint needs little memory). Runs on world rank 0 only.
// pptrain inspect --verify FILE.h5: every dataset's type, checksum and finiteness
// (checkpoint/verify.h); one line per problem and exit 1, or "ok" with the count.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <climits>
#include <fstream>
#include <optional>
#include <sstream>

#include "checkpoint/checkpoint_format.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/hdf5_io.h"
#include "checkpoint/verify.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/input_file.h"
#include "core/log.h"

namespace pptrain {
namespace {

struct DatasetSummary {
  std::string path;
  std::vector<int64_t> shape;
  std::string type;
  double norm = 0, max_abs = 0;
  int64_t elements = 0;
};

herr_t collect_attribute(hid_t object, const char* name, const H5A_info_t*, void* out) {
  h5::Attribute a(H5Aopen(object, name, H5P_DEFAULT));
  if (a.valid()) static_cast<std::vector<std::pair<std::string, std::string>>*>(out)->push_back(
      {name, h5::attribute_as_text(a.id())});
  return 0;
}

herr_t collect_dataset(hid_t group, const char* name, const H5L_info_t*, void* out) {
  h5::QuietHdf5 quiet;
  hid_t obj = H5Oopen(group, name, H5P_DEFAULT);
  if (obj < 0) return 0;  // a dangling link
  if (H5Iget_type(obj) == H5I_DATASET) static_cast<std::vector<std::string>*>(out)->push_back(cat("/", name));
  H5Oclose(obj);
  return 0;
}

// L2 norm and max |x| of a numeric dataset, read in blocks of about 4M elements.
DatasetSummary summarize(hid_t file, const std::string& path, const std::string& where) {
  DatasetSummary s;
  s.path = path;
  h5::Dataset ds(h5::check(H5Dopen2(file, path.c_str(), H5P_DEFAULT), cat(where, ": ", path)));
  h5::Datatype type(H5Dget_type(ds.id()));
  s.type = h5::type_name(type.id());
  s.shape = h5::dataset_shape(ds.id());
  // Dimensions come from the file: their product is checked before it sizes anything.
  std::optional<uint64_t> elements = uint64_t(1);
  for (int64_t d : s.shape) elements = elements ? checked_product({int64_t(*elements), d}) : std::nullopt;
  if (!elements || *elements > uint64_t(INT64_MAX)) fail(where, ": ", path, " has shape ", h5::shape_text(s.shape),
                                                         ", too large to be a checkpoint tensor");
  s.elements = int64_t(*elements);
  const H5T_class_t cls = H5Tget_class(type.id());
  if ((cls != H5T_FLOAT && cls != H5T_INTEGER) || s.shape.empty() || s.elements == 0) return s;

  const int64_t rows = s.shape[0], row_elems = s.elements / rows;
  if (row_elems > (int64_t(4) << 20)) return s;  // a row beyond the block size: no norms
  const int64_t block_rows = std::max<int64_t>(1, (int64_t(4) << 20) / row_elems);
  std::vector<double> buf;
  double sum_sq = 0;
  h5::Dataspace file_space(H5Dget_space(ds.id()));
  for (int64_t r0 = 0; r0 < rows; r0 += block_rows) {
    const int64_t n_rows = std::min(block_rows, rows - r0);
    std::vector<hsize_t> start(s.shape.size(), 0), count(s.shape.begin(), s.shape.end());
    start[0] = hsize_t(r0);
    count[0] = hsize_t(n_rows);
    h5::check_status(H5Sselect_hyperslab(file_space.id(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
                     cat(where, ": ", path));
    const hsize_t n = hsize_t(n_rows * row_elems);
    h5::Dataspace mem(H5Screate_simple(1, &n, nullptr));
    buf.resize(n);
    h5::check_status(H5Dread(ds.id(), H5T_NATIVE_DOUBLE, mem.id(), file_space.id(), H5P_DEFAULT, buf.data()),
                     cat(where, ": reading ", path));
    for (double x : buf) {
      sum_sq += x * x;
      s.max_abs = std::max(s.max_abs, std::fabs(x));
    }
  }
  s.norm = std::sqrt(sum_sq);
  return s;
}


// A checkpoint directory or its `latest` pointer stands for the file `latest` names.
std::string checkpoint_file(const std::string& arg) {
  namespace fs = std::filesystem;
  fs::path pointer = fs::is_directory(arg) ? fs::path(arg) / "latest" : fs::path(arg);
  if (pointer.filename() != "latest") return arg;
  std::ifstream in(pointer);
  std::string name;
  if (!in || !std::getline(in, name) || name.empty())
    fail("inspect: ", pointer.string(), ": no latest checkpoint recorded there");
  return (pointer.parent_path() / name).string();
}

}  // namespace

int cmd_verify(const std::string& path) {
  const VerifyReport report = verify_checkpoint_file(path);
  for (const std::string& problem : report.problems) std::printf("%s\n", problem.c_str());
  if (!report.problems.empty()) return 1;
  std::printf("ok: %s: %d datasets verified (name, shape, type, checksum, values)\n", path.c_str(),
              report.datasets_verified);
  return 0;
}

int cmd_inspect(const Args& args) {
  const bool verify = !args.empty() && args[0] == "--verify";
  const Args rest(args.begin() + (verify ? 1 : 0), args.end());
  if (rest.size() != 1 || rest[0].rfind("--", 0) == 0)
    fail("inspect: usage: pptrain inspect [--verify] FILE.h5 | CHECKPOINT_DIR");
  if (log::rank() != 0) return 0;
  const std::string path = checkpoint_file(rest[0]);
  if (verify) return cmd_verify(path);
  IoGroup io = IoGroup::single();
  h5::File file = open_checkpoint(path, io);
  h5::QuietHdf5 quiet;
  const std::string where = cat("checkpoint ", path);

  std::ostringstream out;
  std::error_code ec;
  out << "file: " << path << " (" << std::filesystem::file_size(path, ec) / 1e6 << " MB)\n";

  std::vector<std::pair<std::string, std::string>> attributes;
  hsize_t index = 0;
  H5Aiterate2(file.id(), H5_INDEX_NAME, H5_ITER_INC, &index, collect_attribute, &attributes);
  out << "attributes:\n";
  std::string config;
  for (const auto& [name, value] : attributes) {
    if (name == "config") {
      config = value;
      continue;
    }
    char line[512];
    std::snprintf(line, sizeof line, "  %-20s %s\n", name.c_str(), value.c_str());
    out << line;
  }
  // A file that is not a pptrain checkpoint is listed as it is, and the command fails:
  // a script that asks `inspect` whether it has a checkpoint gets no.
  bool is_checkpoint = false;
  try {
    is_checkpoint = h5::has_attribute(file.id(), "format") &&
                    h5::read_string_attribute(file.id(), "format", where) == kCheckpointFormat;
  } catch (const Error&) {
  }
  if (!is_checkpoint) out << "  (no 'format' attribute '" << kCheckpointFormat << "': not a pptrain checkpoint)\n";
  if (!config.empty()) {
    Config cfg;
    std::string model_line;
    try {
      cfg = parse_config(config, where + " (attribute 'config')");
      const auto& m = cfg.model;
      model_line = cat(m.arch, ", ", m.n_layer, " layers, ", m.n_head, " heads, d_model ", m.d_model, ", seq_len ",
                       m.seq_len, ", vocab ", m.vocab_size);
    } catch (const Error& e) {
      model_line = cat("(config does not parse: ", e.what(), ")");
    }
    out << "model: " << model_line << "\nconfig:\n";
    std::istringstream lines(config);
    for (std::string line; std::getline(lines, line);) out << "  " << line << "\n";
  }

  std::vector<std::string> paths;
  H5Lvisit(file.id(), H5_INDEX_NAME, H5_ITER_INC, collect_dataset, &paths);
  int64_t model_elements = 0, total_elements = 0;
  std::vector<DatasetSummary> rows;
  size_t width = 8;
  for (const std::string& p : paths) {
    rows.push_back(summarize(file.id(), p, where));
    width = std::max(width, p.size());
    total_elements += rows.back().elements;
    if (p.rfind("/model/", 0) == 0) model_elements += rows.back().elements;
  }
  out << "datasets: " << rows.size() << ", " << total_elements << " elements (" << model_elements
      << " model parameters)\n";
  char line[1024];
  std::snprintf(line, sizeof line, "  %-*s  %-14s %-8s %14s %14s\n", int(width), "name", "shape", "dtype", "norm",
                "max|x|");
  out << line;
  for (const DatasetSummary& s : rows) {
    std::snprintf(line, sizeof line, "  %-*s  %-14s %-8s %14.6e %14.6e\n", int(width), s.path.c_str(),
                  h5::shape_text(s.shape).c_str(), s.type.c_str(), s.norm, s.max_abs);
    out << line;
  }
  std::fputs(out.str().c_str(), stdout);
  if (!is_checkpoint) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s: an HDF5 file but not a pptrain checkpoint (listed above as it is)\n",
                 path.c_str());
    return 1;
  }
  return 0;
}

}  // namespace pptrain
