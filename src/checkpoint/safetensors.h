// Hugging Face safetensors files: reading (one file, or a directory of shards with its
// index) and writing.
//
// Layout of a file (https://huggingface.co/docs/safetensors, the format's documentation):
//   bytes [0, 8)        N, the header's length, unsigned 64-bit little-endian
//   bytes [8, 8 + N)    the header: a JSON object (may end in spaces, which pad it), one
//                       entry per tensor, "NAME": {"dtype": "F32", "shape": [2, 3],
//                       "data_offsets": [BEGIN, END]}, and optionally "__metadata__", an
//                       object of string values
//   bytes [8 + N, end)  the data: each tensor's elements row-major, little-endian, at
//                       [BEGIN, END) counted from the data's start
// The file is untrusted: the header is validated whole before any tensor is read. N is
// at most kMaxSafetensorsHeaderBytes and inside the file; every entry has exactly those
// three keys; dtype is one of the format's; END - BEGIN is the shape's element count
// times the dtype's size (overflow-checked); the ranges tile the data exactly (no range
// past the end, no two overlapping, no bytes that belong to no tensor: the format allows
// no holes). Any problem is one line naming the file and the tensor.
//
// A model directory holds DIR/model.safetensors, or the shards model-0000N-of-0000M
// .safetensors with DIR/model.safetensors.index.json, {"metadata": {...}, "weight_map":
// {"NAME": "model-00001-of-00002.safetensors", ...}}, which must name every tensor of
// every shard it lists, each in the shard that holds it (shard names are plain file names
// inside DIR).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/read_only_file.h"

namespace pptrain {

// Far above any real header (a shard of a 400B-parameter model lists a few hundred
// tensors in about 100 KB), far below what parsing it could cost in memory.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = uint64_t(16) << 20;
// The shard index is a similar list of names.
inline constexpr uint64_t kMaxSafetensorsIndexBytes = uint64_t(16) << 20;
// Dimensions of one tensor (pptrain's tensors have 1 or 2).
inline constexpr size_t kMaxSafetensorsDims = 8;

// One tensor of a validated header.
struct StTensor {
  std::string name;
  std::string dtype;           // as in the file: "F32", "BF16", "F16", "I64", ...
  std::vector<int64_t> shape;  // [] for a scalar
  int64_t numel = 0;
  uint64_t offset = 0;         // of its first byte in the file (after the header)
  uint64_t bytes = 0;
};

// Whether pptrain reads tensors of `dtype` (F32, BF16, F16; widened to fp32).
bool st_dtype_readable(const std::string& dtype);

// Parses and validates a header (the JSON text) of a file whose data section holds
// `data_bytes` bytes. Offsets in the result count from the data's start. `where` names
// the file in messages. Throws pptrain::Error.
std::vector<StTensor> parse_safetensors_header(const std::string& header, uint64_t data_bytes,
                                               const std::string& where,
                                               std::map<std::string, std::string>* metadata = nullptr);

// One file, its header validated when opened.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::string& path() const { return file_.path(); }
  const std::vector<StTensor>& tensors() const { return tensors_; }  // in data order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const StTensor* find(const std::string& name) const;
  // out[t.numel] = the tensor's values widened to fp32 (exactly: F32, BF16 and F16 all
  // convert to fp32 without rounding). A dtype pptrain does not read is one line.
  void read(const StTensor& t, float* out) const;

 private:
  data::ReadOnlyFile file_;
  std::vector<StTensor> tensors_;
  std::map<std::string, size_t> by_name_;
  std::map<std::string, std::string> metadata_;
};

// A model directory (single file or shards, see above).
class SafetensorsDir {
 public:
  explicit SafetensorsDir(const std::string& dir);
  struct Found {
    const SafetensorsFile* file;
    const StTensor* tensor;
  };
  // The tensor `name` and its file; file and tensor are null when no file holds it.
  Found find(const std::string& name) const;
  // Every tensor of every file, by name.
  const std::map<std::string, Found>& all() const { return all_; }
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  // "DIR/model.safetensors" or "DIR/model.safetensors.index.json (3 shards)": for messages.
  const std::string& description() const { return description_; }

 private:
  void open_single(const std::string& path);
  void open_sharded(const std::string& dir, const std::string& index_path);
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Found> all_;
  std::string description_;
};

// ---- writing ---------------------------------------------------------------------------

// A tensor to write: F32 (the values as they are) or BF16 (rounded to nearest even).
struct StTensorSpec {
  std::string name;
  std::string dtype;           // "F32" or "BF16"
  std::vector<int64_t> shape;
};

// Fills out[numel of specs[index]] with the values of tensor `index`, row-major.
using StValuesFn = std::function<void(size_t index, float* out)>;

// Writes `specs` into the directory `dir` (which must exist) as model.safetensors, or,
// when their data is larger than `max_shard_bytes`, as model-0000N-of-0000M.safetensors
// (tensors in the given order, a new shard whenever the next tensor would overflow the
// current one) plus model.safetensors.index.json. Every file carries `metadata`
// (transformers wants {"format": "pt"}). Returns the file names written.
std::vector<std::string> write_safetensors_model(const std::string& dir, const std::vector<StTensorSpec>& specs,
                                                 const StValuesFn& values, uint64_t max_shard_bytes,
                                                 const std::map<std::string, std::string>& metadata);

}  // namespace pptrain
