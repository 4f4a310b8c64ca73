#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>

#include "core/bf16.h"
#include "core/error.h"
#include "core/input_file.h"
#include "core/json.h"

namespace pptrain {

// The format is little-endian; pptrain reads and writes it with plain copies.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

namespace fs = std::filesystem;

// The format's dtypes and their element sizes (sub-byte ones, F4 and F6_*, are left out:
// a file holding them is refused at its header).
struct DtypeSize {
  const char* name;
  uint64_t bytes;
};
constexpr DtypeSize kDtypes[] = {{"BOOL", 1},    {"U8", 1},      {"I8", 1},      {"F8_E5M2", 1}, {"F8_E4M3", 1},
                                 {"F8_E8M0", 1}, {"I16", 2},     {"U16", 2},     {"F16", 2},     {"BF16", 2},
                                 {"I32", 4},     {"U32", 4},     {"F32", 4},     {"F64", 8},     {"I64", 8},
                                 {"U64", 8},     {"C64", 8}};

uint64_t dtype_size(const std::string& dtype) {
  for (const DtypeSize& d : kDtypes)
    if (dtype == d.name) return d.bytes;
  return 0;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += cat(i ? ", " : "", shape[i]);
  return s + "]";
}

// IEEE half to float, exactly (every half is a float).
float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa · 2^-24
    const float f = std::ldexp(float(mantissa), -24);
    return sign ? -f : f;
  }
  // Rebias the exponent (15 -> 127); all ones (inf, NaN) stays all ones.
  const uint32_t bits = sign | (exponent == 0x1f ? 0xffu << 23 : (exponent + 112) << 23) | (mantissa << 13);
  return std::bit_cast<float>(bits);
}

// The three keys of one header entry, each given once. (A YAML::Node assigned to another
// writes into the node it refers to, so each is bound once, by construction, after the
// keys were found.)
struct EntryNodes {
  YAML::Node dtype, shape, offsets;
};

EntryNodes entry_nodes(const YAML::Node& n, const std::string& ctx) {
  if (!n.IsMap()) fail(ctx, ": expected an object {dtype, shape, data_offsets}, got ", json::describe(n));
  const char* keys[3] = {"dtype", "shape", "data_offsets"};
  std::optional<YAML::Node> found[3];
  for (auto it = n.begin(); it != n.end(); ++it) {
    int k = 0;
    while (k < 3 && !(json::is_string(it->first) && it->first.Scalar() == keys[k])) ++k;
    if (k == 3) fail(ctx, ": unknown key ", json::describe(it->first), " (expected dtype, shape and data_offsets)");
    if (found[k]) fail(ctx, ": ", keys[k], " given twice");
    found[k].emplace(it->second);
  }
  for (int k = 0; k < 3; ++k)
    if (!found[k]) fail(ctx, ": ", keys[k], " is missing");
  return {*found[0], *found[1], *found[2]};
}

StTensor parse_entry(const std::string& name, const YAML::Node& n, uint64_t data_bytes, const std::string& where) {
  const std::string ctx = cat(where, ": tensor ", json::printable(name));
  const EntryNodes e = entry_nodes(n, ctx);
  StTensor t;
  t.name = name;
  const uint64_t elem = json::is_string(e.dtype) ? dtype_size(e.dtype.Scalar()) : 0;
  if (elem == 0)
    fail(ctx, ": dtype ", json::describe(e.dtype), " is not a safetensors dtype (expected \"F32\", \"BF16\", \"F16\", ",
         "\"F64\", \"I64\", ...)");
  t.dtype = e.dtype.Scalar();

  const std::string shape_expected = cat("expected an array of at most ", kMaxSafetensorsDims, " integers >= 0");
  if (!e.shape.IsSequence() || e.shape.size() > kMaxSafetensorsDims)
    fail(ctx, ": shape is ", json::describe(e.shape), ", ", shape_expected);
  uint64_t numel = 1;
  for (const YAML::Node& d : e.shape) {
    const auto dim = json::as_uint(d);
    if (!dim || *dim > uint64_t(INT64_MAX)) fail(ctx, ": shape holds ", json::describe(d), ", ", shape_expected);
    t.shape.push_back(int64_t(*dim));
    const auto product = checked_mul(numel, *dim);
    if (!product) fail(ctx, ": shape ", shape_text(t.shape), "... overflows 64-bit arithmetic");
    numel = *product;
  }
  const auto bytes = checked_mul(numel, elem);
  if (!bytes || numel > uint64_t(INT64_MAX)) fail(ctx, ": shape ", shape_text(t.shape), " overflows 64-bit arithmetic");
  t.numel = int64_t(numel);
  t.bytes = *bytes;

  const std::string offsets_expected = "expected [BEGIN, END], integers with BEGIN <= END";
  if (!e.offsets.IsSequence() || e.offsets.size() != 2)
    fail(ctx, ": data_offsets is ", json::describe(e.offsets), ", ", offsets_expected);
  const auto begin = json::as_uint(e.offsets[0]), end = json::as_uint(e.offsets[1]);
  if (!begin || !end || *begin > *end)
    fail(ctx, ": data_offsets [", json::describe(e.offsets[0]), ", ", json::describe(e.offsets[1]), "], ",
         offsets_expected);
  if (*end > data_bytes)
    fail(ctx, ": data_offsets [", *begin, ", ", *end, "] run past the end of the data (", data_bytes,
         " bytes after the header; truncated or damaged file)");
  if (*end - *begin != t.bytes)
    fail(ctx, ": data_offsets [", *begin, ", ", *end, "] hold ", *end - *begin, " bytes, but ", t.dtype, " ",
         shape_text(t.shape), " needs ", t.bytes);
  t.offset = *begin;
  return t;
}

void parse_metadata(const YAML::Node& n, const std::string& where, std::map<std::string, std::string>* out) {
  if (!n.IsMap()) fail(where, ": __metadata__ is ", json::describe(n), ", expected an object of strings");
  for (auto it = n.begin(); it != n.end(); ++it) {
    if (!json::is_string(it->first) || !json::is_string(it->second))
      fail(where, ": __metadata__ holds ", json::describe(it->first), ": ", json::describe(it->second),
           ", expected string keys and values");
    if (out) (*out)[it->first.Scalar()] = it->second.Scalar();
  }
}

// The ranges must tile [0, data_bytes): sorted by offset, each starts where the last ended.
void check_tiling(const std::vector<StTensor>& tensors, uint64_t data_bytes, const std::string& where) {
  std::vector<const StTensor*> sorted;
  for (const StTensor& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](const StTensor* a, const StTensor* b) {
    return a->offset != b->offset ? a->offset < b->offset : a->bytes < b->bytes;
  });
  uint64_t at = 0;
  const StTensor* last = nullptr;
  auto range = [](const StTensor* t) { return cat(json::printable(t->name), " [", t->offset, ", ", t->offset + t->bytes, ")"); };
  for (const StTensor* t : sorted) {
    if (t->offset < at) fail(where, ": the data of tensors ", range(last), " and ", range(t), " overlap");
    if (t->offset > at)
      fail(where, ": bytes [", at, ", ", t->offset, ") of the data belong to no tensor (safetensors allows no holes)");
    at = t->offset + t->bytes;
    last = t;
  }
  if (at != data_bytes)
    fail(where, ": bytes [", at, ", ", data_bytes, ") of the data belong to no tensor (safetensors allows no holes)");
}

// A file being written (RAII): pwrite at offsets, fsync and close in finish().
class OutputFile {
 public:
  explicit OutputFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail(path, ": cannot create (", std::strerror(errno), ")");
  }
  ~OutputFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write_at(uint64_t offset, const void* data, uint64_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (uint64_t done = 0; done < n;) {
      const ssize_t put = ::pwrite(fd_, p + done, size_t(std::min<uint64_t>(n - done, 1u << 30)), off_t(offset + done));
      if (put < 0 && errno == EINTR) continue;
      if (put <= 0) fail(path_, ": write failed at byte ", offset + done, " (", std::strerror(errno), ")");
      done += uint64_t(put);
    }
  }
  void finish() {
    if (::fsync(fd_) != 0) fail(path_, ": fsync failed (", std::strerror(errno), ")");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail(path_, ": close failed (", std::strerror(errno), ")");
  }

 private:
  std::string path_;
  int fd_ = -1;
};

// Writes specs[indices] as one safetensors file at `path`.
void write_file(const std::string& path, const std::vector<StTensorSpec>& specs, const std::vector<size_t>& indices,
                const StValuesFn& values, const std::map<std::string, std::string>& metadata) {
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (auto it = metadata.begin(); it != metadata.end(); ++it)
      header += cat(it == metadata.begin() ? "" : ",", json::quote(it->first), ":", json::quote(it->second));
    header += "},";
  }
  std::vector<uint64_t> offsets;
  uint64_t at = 0;
  for (size_t k = 0; k < indices.size(); ++k) {
    const StTensorSpec& s = specs[indices[k]];
    PPTRAIN_CHECK(s.dtype == "F32" || s.dtype == "BF16", "cannot write dtype ", s.dtype);
    uint64_t bytes = dtype_size(s.dtype);
    std::string dims;
    for (int64_t d : s.shape) {
      bytes *= uint64_t(d);
      dims += cat(dims.empty() ? "" : ",", d);
    }
    offsets.push_back(at);
    header += cat(k ? "," : "", json::quote(s.name), ":{\"dtype\":\"", s.dtype, "\",\"shape\":[", dims,
                  "],\"data_offsets\":[", at, ",", at + bytes, "]}");
    at += bytes;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // the data starts 8-byte aligned

  OutputFile out(path);
  const uint64_t length = header.size();
  out.write_at(0, &length, 8);
  out.write_at(8, header.data(), header.size());
  const uint64_t data_start = 8 + header.size();
  std::vector<float> buf;
  std::vector<bfloat16> narrow;
  for (size_t k = 0; k < indices.size(); ++k) {
    const StTensorSpec& s = specs[indices[k]];
    size_t numel = 1;
    for (int64_t d : s.shape) numel *= size_t(d);
    buf.assign(numel, 0.0f);
    values(indices[k], buf.data());
    if (s.dtype == "F32") {
      out.write_at(data_start + offsets[k], buf.data(), numel * sizeof(float));
    } else {
      narrow.resize(numel);
      for (size_t i = 0; i < numel; ++i) narrow[i] = bfloat16::from_float(buf[i]);
      out.write_at(data_start + offsets[k], narrow.data(), numel * sizeof(bfloat16));
    }
  }
  out.finish();
}

}  // namespace

bool st_dtype_readable(const std::string& dtype) { return dtype == "F32" || dtype == "BF16" || dtype == "F16"; }

std::vector<StTensor> parse_safetensors_header(const std::string& header, uint64_t data_bytes,
                                               const std::string& where,
                                               std::map<std::string, std::string>* metadata) {
  // The format's own reader requires the object to open the header; so does this one,
  // which also keeps YAML's other syntaxes (block mappings, directives) out.
  if (header.empty() || header[0] != '{')
    fail(where, ": the header does not start with '{' (not a safetensors file)");
  const YAML::Node root = json::parse_object(header, where);
  std::vector<StTensor> tensors;
  std::set<std::string> names;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (!json::is_string(it->first)) fail(where, ": expected tensor names as keys, got ", json::describe(it->first));
    const std::string name = it->first.Scalar();
    if (!names.insert(name).second) fail(where, ": tensor ", json::printable(name), " is given twice");
    if (name == "__metadata__") {
      parse_metadata(it->second, where, metadata);
      continue;
    }
    tensors.push_back(parse_entry(name, it->second, data_bytes, where));
  }
  check_tiling(tensors, data_bytes, where);
  std::sort(tensors.begin(), tensors.end(), [](const StTensor& a, const StTensor& b) { return a.offset < b.offset; });
  return tensors;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path, "safetensors file") {
  const uint64_t size = file_.size();
  if (size < 8) fail(path, ": ", size, " bytes, shorter than the 8-byte header length (not a safetensors file)");
  uint64_t length = 0;
  file_.read_at(0, 8, &length);
  if (length > kMaxSafetensorsHeaderBytes)
    fail(path, ": header length ", length, " is more than the ", kMaxSafetensorsHeaderBytes,
         " bytes a safetensors header may have here (not a safetensors file, or a damaged one)");
  if (length > size - 8) fail(path, ": header length ", length, " runs past the end of the file (", size, " bytes)");
  std::string header(length, '\0');
  file_.read_at(8, length, header.data());
  tensors_ = parse_safetensors_header(header, size - 8 - length, path, &metadata_);
  for (size_t i = 0; i < tensors_.size(); ++i) {
    tensors_[i].offset += 8 + length;  // at most the file's size: checked above
    by_name_[tensors_[i].name] = i;
  }
}

const StTensor* SafetensorsFile::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::read(const StTensor& t, float* out) const {
  if (!st_dtype_readable(t.dtype))
    fail(path(), ": tensor ", json::printable(t.name), " is ", t.dtype, ", expected F32, BF16 or F16");
  if (t.dtype == "F32") {
    file_.read_at(t.offset, t.bytes, out);
    return;
  }
  // 16-bit values, widened a block at a time.
  constexpr int64_t kBlock = int64_t(1) << 20;
  std::vector<uint16_t> raw(size_t(std::min(t.numel, kBlock)));
  const bool bf16 = t.dtype == "BF16";
  for (int64_t i0 = 0; i0 < t.numel; i0 += kBlock) {
    const int64_t n = std::min(kBlock, t.numel - i0);
    file_.read_at(t.offset + uint64_t(i0) * 2, uint64_t(n) * 2, raw.data());
    for (int64_t i = 0; i < n; ++i) out[i0 + i] = bf16 ? bfloat16{raw[size_t(i)]}.to_float() : half_to_float(raw[size_t(i)]);
  }
}

// ---- directories ----------------------------------------------------------------------

SafetensorsDir::SafetensorsDir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail(dir, ": not a directory (expected a Hugging Face model directory with config.json and model.safetensors)");
  const std::string single = (fs::path(dir) / "model.safetensors").string();
  const std::string index = (fs::path(dir) / "model.safetensors.index.json").string();
  // transformers' order: the single file first, then the index.
  if (fs::exists(single, ec)) open_single(single);
  else if (fs::exists(index, ec)) open_sharded(dir, index);
  else
    fail(dir, ": holds neither model.safetensors nor model.safetensors.index.json (expected a model saved by ",
         "transformers with safetensors)");
}

void SafetensorsDir::open_single(const std::string& path) {
  files_.push_back(std::make_unique<SafetensorsFile>(path));
  for (const StTensor& t : files_[0]->tensors()) all_[t.name] = {files_[0].get(), &t};
  description_ = path;
}

void SafetensorsDir::open_sharded(const std::string& dir, const std::string& index_path) {
  const YAML::Node root =
      json::parse_object(read_small_file(index_path, "safetensors index", kMaxSafetensorsIndexBytes), index_path);
  std::optional<YAML::Node> found;  // bound once (see EntryNodes)
  for (auto it = root.begin(); it != root.end(); ++it)
    if (json::is_string(it->first) && it->first.Scalar() == "weight_map") {
      if (found) fail(index_path, ": weight_map is given twice");
      found.emplace(it->second);
    }
  if (!found) fail(index_path, ": weight_map is missing");
  const YAML::Node& weight_map = *found;
  if (!weight_map.IsMap() || weight_map.size() == 0)
    fail(index_path, ": weight_map is ", json::describe(weight_map), ", expected an object of tensor names and files");

  std::map<std::string, std::string> shard_of;  // tensor -> file name
  std::map<std::string, SafetensorsFile*> shards;
  for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
    if (!json::is_string(it->first) || !json::is_string(it->second))
      fail(index_path, ": weight_map holds ", json::describe(it->first), ": ", json::describe(it->second),
           ", expected tensor names and file names");
    const std::string name = it->first.Scalar(), file = it->second.Scalar();
    // Shards are files of this directory: no path, no "..", nothing hidden.
    if (file.empty() || file[0] == '.' || file.find('/') != std::string::npos || file.find('\0') != std::string::npos)
      fail(index_path, ": weight_map puts ", json::printable(name), " in ", json::describe(it->second),
           ", expected a file name in ", dir);
    if (!shard_of.emplace(name, file).second) fail(index_path, ": weight_map lists ", json::printable(name), " twice");
    if (!shards.count(file)) {
      files_.push_back(std::make_unique<SafetensorsFile>((fs::path(dir) / file).string()));
      shards[file] = files_.back().get();
    }
  }
  for (const auto& [name, file] : shard_of) {
    const StTensor* t = shards[file]->find(name);
    if (!t) fail(index_path, ": weight_map puts ", json::printable(name), " in ", file, ", which holds no such tensor");
    all_[name] = {shards[file], t};
  }
  for (const auto& [file, shard] : shards)
    for (const StTensor& t : shard->tensors()) {
      auto it = shard_of.find(t.name);
      if (it == shard_of.end() || it->second != file)
        fail(shard->path(), ": holds tensor ", json::printable(t.name), ", which the index ",
             it == shard_of.end() ? std::string("does not list") : "puts in " + it->second);
    }
  description_ = cat(index_path, " (", files_.size(), " shards)");
}

SafetensorsDir::Found SafetensorsDir::find(const std::string& name) const {
  auto it = all_.find(name);
  return it == all_.end() ? Found{nullptr, nullptr} : it->second;
}

// ---- writing ---------------------------------------------------------------------------

std::vector<std::string> write_safetensors_model(const std::string& dir, const std::vector<StTensorSpec>& specs,
                                                 const StValuesFn& values, uint64_t max_shard_bytes,
                                                 const std::map<std::string, std::string>& metadata) {
  // Tensors in order into shards of at most max_shard_bytes (a larger tensor alone).
  std::vector<std::vector<size_t>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    uint64_t bytes = dtype_size(specs[i].dtype);
    for (int64_t d : specs[i].shape) bytes *= uint64_t(d);
    if (!shards.back().empty() && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(i);
    in_shard += bytes;
    total += bytes;
  }
  if (shards.size() == 1) {
    write_file((fs::path(dir) / "model.safetensors").string(), specs, shards[0], values, metadata);
    return {"model.safetensors"};
  }
  std::vector<std::string> names;
  std::string weight_map;
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    write_file((fs::path(dir) / name).string(), specs, shards[s], values, metadata);
    names.push_back(name);
    for (size_t i : shards[s])
      weight_map += cat(weight_map.empty() ? "" : ",\n", "    ", json::quote(specs[i].name), ": ", json::quote(name));
  }
  const std::string index = cat("{\n  \"metadata\": {\"total_size\": ", total, "},\n  \"weight_map\": {\n", weight_map,
                                "\n  }\n}\n");
  OutputFile out((fs::path(dir) / "model.safetensors.index.json").string());
  out.write_at(0, index.data(), index.size());
  out.finish();
  names.push_back("model.safetensors.index.json");
  return names;
}

}  // namespace pptrain
