#include "checkpoint/hf_import.h"

#include <cstring>
#include <filesystem>
#include <set>

#include "checkpoint/safetensors.h"
#include "checkpoint/weights_checkpoint.h"
#include "core/error.h"
#include "core/input_file.h"

namespace pptrain {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMaxHfConfigBytes = uint64_t(1) << 20;

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += cat(i ? ", " : "", shape[i]);
  return s + "]";
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The model's tensors as the directory names them: with the architecture's base prefix,
// unless the files were saved from the base model and no name carries it.
class Names {
 public:
  Names(const HfArchitecture& arch, const SafetensorsDir& st) : prefix_(arch.base_prefix) {
    for (const auto& [name, found] : st.all())
      if (!prefix_.empty() && name.rfind(prefix_, 0) == 0) prefixed_ = true;
  }
  std::string operator()(const std::string& hf_name) const {
    if (prefixed_ || prefix_.empty() || hf_name.rfind(prefix_, 0) != 0) return hf_name;
    return hf_name.substr(prefix_.size());
  }

 private:
  std::string prefix_;
  bool prefixed_ = false;
};

// The tensor `name` of the directory, checked: present, a dtype pptrain reads, `shape`.
SafetensorsDir::Found checked_tensor(const SafetensorsDir& st, const std::string& name,
                                     const std::vector<int64_t>& shape, const std::string& needed_by) {
  const SafetensorsDir::Found f = st.find(name);
  if (!f.tensor)
    fail(st.description(), ": tensor ", name, " is missing (", needed_by, " needs it, shape ", shape_text(shape), ")");
  if (!st_dtype_readable(f.tensor->dtype))
    fail(f.file->path(), ": tensor ", name, " is ", f.tensor->dtype, ", expected F32, BF16 or F16");
  if (f.tensor->shape != shape)
    fail(f.file->path(), ": tensor ", name, " has shape ", shape_text(f.tensor->shape), ", expected ",
         shape_text(shape), " (", needed_by, ")");
  return f;
}

std::vector<float> read_all(const SafetensorsDir::Found& f) {
  std::vector<float> v(size_t(f.tensor->numel));
  f.file->read(*f.tensor, v.data());
  return v;
}

}  // namespace

std::pair<const HfArchitecture*, ModelConfig> read_hf_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  const YAML::Node config = json::parse_object(read_small_file(path, "Hugging Face config", kMaxHfConfigBytes), path);
  const HfArchitecture& arch = hf_architecture_of_config(config, path);
  Config cfg;
  cfg.model = arch.read_config(config, path);
  cfg.source = path;
  // The bounds every pptrain model obeys (sizes of its tensors, ...), checked as a config
  // file's are: parsing resolves the defaults validation expects.
  parse_config(to_yaml(cfg), path);
  return {&arch, cfg.model};
}

std::string hf_model_section(const ModelConfig& m) {
  std::string s = cat("{arch: ", m.arch, ", n_layer: ", m.n_layer, ", n_head: ", m.n_head, ", d_model: ", m.d_model,
                      ", seq_len: ", m.seq_len, ", vocab_size: ", m.vocab_size);
  if (m.llama()) {
    s += cat(", n_kv_head: ", m.kv_heads(), ", ffn_hidden: ", m.mlp_hidden(), ", rope_theta: ", hf_number(m.rope_theta),
             ", norm_eps: ", hf_number(m.norm_eps), ", tie_embeddings: ", m.tie_embeddings ? "true" : "false");
    if (m.head_dim) s += cat(", head_dim: ", m.head_dim);
    const RopeScaling& r = m.rope_scaling;
    if (r.type != "none") s += cat(", rope_scaling: ", r.type, ", rope_factor: ", hf_number(r.factor));
    if (r.type == "llama3")
      s += cat(", rope_low_freq_factor: ", hf_number(r.low_freq_factor), ", rope_high_freq_factor: ",
               hf_number(r.high_freq_factor), ", rope_original_max_positions: ", r.original_max_positions);
  }
  return s + "}";
}

HfImportResult import_hf(const std::string& dir, const std::string& out_path) {
  check_new_output(out_path, "import-hf");  // before the model is read
  HfImportResult result;
  auto [arch, model] = read_hf_config(dir);
  result.arch = arch;
  result.model = model;
  const SafetensorsDir st(dir);
  result.files = st.description();
  const Names names(*arch, st);
  const std::string needed_by = cat(arch->hf_class, " with n_layer ", model.n_layer, ", d_model ", model.d_model,
                                    ", vocab_size ", model.vocab_size, ", seq_len ", model.seq_len);

  // Every tensor the model needs, checked before anything is written: found[i] holds the
  // HF tensors pptrain's tensors[i] is made of (one, or the parts of a RowStack).
  const std::vector<HfTensor> tensors = arch->tensors(model);
  std::vector<std::vector<SafetensorsDir::Found>> found(tensors.size());
  std::set<std::string> known, dtypes;
  for (size_t i = 0; i < tensors.size(); ++i) {
    for (const HfPart& part : tensors[i].hf_parts()) {
      found[i].push_back(checked_tensor(st, names(part.hf_name), part.hf_shape, needed_by));
      known.insert(names(part.hf_name));
      dtypes.insert(found[i].back().tensor->dtype);
    }
    result.parameters += numel(tensors[i].shape);
  }
  // Tied copies, when present, equal what they are tied to.
  for (const auto& [copy, original] : arch->tied(model)) {
    known.insert(names(copy));
    if (!st.find(names(copy)).tensor) continue;
    const SafetensorsDir::Found a = st.find(names(original));
    const SafetensorsDir::Found b = checked_tensor(st, names(copy), a.tensor->shape, "tied to " + names(original));
    const std::vector<float> va = read_all(a), vb = read_all(b);
    if (std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)) != 0)
      fail(b.file->path(), ": tensor ", names(copy), " differs from ", names(original), " (", arch->hf_class,
           " in pptrain ties them; a model with an untied LM head is another model)");
  }
  // Nothing else, but the known buffers.
  for (const auto& [name, f] : st.all()) {
    if (known.count(name)) continue;
    bool ignored = false;
    for (const std::string& suffix : arch->ignored_suffixes) ignored = ignored || ends_with(name, suffix);
    if (!ignored)
      fail(f.file->path(), ": unexpected tensor ", json::printable(name), " (", needed_by,
           " has no such tensor; another architecture or configuration?)");
  }
  for (const std::string& d : dtypes) result.dtypes += (result.dtypes.empty() ? "" : ", ") + d;

  std::vector<WeightTensor> weights;
  for (const HfTensor& t : tensors) weights.push_back({t.name, t.shape});
  std::vector<float> hf;  // [in, out] of a Conv1D weight
  auto values = [&](int i, float* out) {
    const HfTensor& t = tensors[size_t(i)];
    const std::vector<SafetensorsDir::Found>& parts = found[size_t(i)];
    if (t.layout == HfLayout::Conv1D) {
      hf.resize(size_t(numel(t.shape)));
      parts[0].file->read(*parts[0].tensor, hf.data());
      const int64_t rows = t.shape[0], cols = t.shape[1];  // pptrain's [out, in]
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = hf[size_t(c * rows + r)];
      return;
    }
    // Same, RowStack: the parts' elements one after another.
    for (const SafetensorsDir::Found& part : parts) {
      part.file->read(*part.tensor, out);
      out += part.tensor->numel;
    }
  };
  write_weights_checkpoint(out_path, model, (fs::path(dir) / "config.json").string(), weights, values,
                           "import-hf " + dir);
  return result;
}

}  // namespace pptrain
