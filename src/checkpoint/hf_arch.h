// The Hugging Face architectures pptrain imports and exports (import-hf, export-hf), each
// a table: which HF tensor (name, layout) is which pptrain checkpoint tensor, and how
// config.json maps to model.* both ways. Import and export know nothing of any one
// architecture; adding one (LlamaForCausalLM) is writing its HfArchitecture in its own
// file, as hf_gpt2.cpp does, and listing it in hf_architectures() (hf_arch.cpp).
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/json.h"

namespace pptrain {

// How an HF tensor's elements relate to the pptrain tensor's.
enum class HfLayout {
  Same,    // element for element, same shape
  Conv1D,  // GPT-2's Conv1D stores a linear layer's weight [in, out] (y = x W + b);
           // pptrain's linear weights are [out, in] (y = x Wᵀ + b): transposed
};

struct HfTensor {
  std::string hf_name;         // as save_pretrained writes it: "transformer.h.0.attn.c_attn.weight"
  std::string name;            // pptrain's: "h.0.attn.qkv.weight"
  std::vector<int64_t> shape;  // pptrain's (global), 1 or 2 dims
  HfLayout layout = HfLayout::Same;
  // The shape in the HF file: `shape`, reversed for Conv1D.
  std::vector<int64_t> hf_shape() const;
};

struct HfArchitecture {
  std::string hf_class;    // config.json "architectures": "GPT2LMHeadModel"
  std::string model_type;  // config.json "model_type": "gpt2"
  std::string arch;        // pptrain's model.arch: "gpt2"
  // A prefix of HF names that files saved from the bare base model lack ("transformer.":
  // the Hub's own gpt2 weights were saved from GPT2Model): import accepts both spellings.
  std::string base_prefix;
  // Tensors a file may or may not hold that must equal another one (a tied LM head):
  // {HF name, the HF name it is tied to}. Export leaves them out, as save_pretrained does.
  std::vector<std::pair<std::string, std::string>> tied;
  // Name suffixes of buffers that are not parameters (GPT-2's attention masks, which older
  // files hold): import skips them. Any other tensor the table lacks is refused.
  std::vector<std::string> ignored_suffixes;
  // config.json -> pptrain's model section. Refuses, with one line naming `where` and the
  // key, a value the pptrain model does not compute (another epsilon, activation, ...).
  std::function<ModelConfig(const YAML::Node& config, const std::string& where)> read_config;
  // pptrain's model section -> config.json text that transformers loads; `torch_dtype` is
  // "float32" or "bfloat16", what the weights are stored in.
  std::function<std::string(const ModelConfig& model, const std::string& torch_dtype)> write_config;
  // Every parameter of the model, in the order export writes them.
  std::function<std::vector<HfTensor>(const ModelConfig& model)> tensors;
};

// Every architecture, one HfArchitecture per file.
const std::vector<HfArchitecture>& hf_architectures();
HfArchitecture hf_gpt2();  // hf_gpt2.cpp

// The architecture of a config.json: the first of its "architectures" pptrain knows, else
// its "model_type". Throws pptrain::Error naming `where` and what pptrain imports.
const HfArchitecture& hf_architecture_of_config(const YAML::Node& config, const std::string& where);
// The architecture that exports pptrain's model.arch `arch`.
const HfArchitecture& hf_architecture_of_arch(const std::string& arch, const std::string& where);

// ---- reading config.json keys (for read_config) -------------------------------------------

// The value of `key` (nullopt when absent); a key given twice is an error.
std::optional<YAML::Node> hf_config_value(const YAML::Node& config, const std::string& key, const std::string& where);
// A required integer key in [min, max].
int64_t hf_config_int(const YAML::Node& config, const std::string& key, int64_t min, int64_t max,
                      const std::string& where);
// A key that, when present, must hold one of `allowed` (as json::describe writes values:
// "true", "\"gelu_new\""); `what` says what pptrain computes, for the message.
void hf_config_require(const YAML::Node& config, const std::string& key, const std::vector<std::string>& allowed,
                       const std::string& what, const std::string& where);

}  // namespace pptrain
