// The Hugging Face architectures pptrain imports and exports (import-hf, export-hf), each
// a table: which HF tensor (name, layout) is which pptrain checkpoint tensor, and how
// config.json maps to model.* both ways. Import and export know nothing of any one
// architecture; adding one is writing its HfArchitecture in its own file, as hf_gpt2.cpp
// and hf_llama.cpp do, and listing it in hf_architectures() (hf_arch.cpp).
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
  Same,      // element for element, same shape
  Conv1D,    // GPT-2's Conv1D stores a linear layer's weight [in, out] (y = x W + b);
             // pptrain's linear weights are [out, in] (y = x Wᵀ + b): transposed
  RowStack,  // several HF tensors, element for element, stacked along dim 0 in the order
             // listed (Llama's q_proj, k_proj, v_proj [rows_i, C] are pptrain's qkv rows):
             // row-major, so the pptrain tensor is their elements one after another
};

// One tensor of the HF file: its name as save_pretrained writes it and its shape there.
struct HfPart {
  std::string hf_name;
  std::vector<int64_t> hf_shape;
};

struct HfTensor {
  std::string hf_name;         // as save_pretrained writes it: "transformer.h.0.attn.c_attn.weight";
                               // RowStack: empty (the parts name themselves)
  std::string name;            // pptrain's: "h.0.attn.qkv.weight"
  std::vector<int64_t> shape;  // pptrain's (global), 1 or 2 dims
  HfLayout layout = HfLayout::Same;
  // RowStack only: the stacked HF tensors in order; their first dims add up to shape[0],
  // the others equal shape's.
  std::vector<HfPart> stack = {};
  // The tensors of the HF file this one is made of: {hf_name, `shape`}, {hf_name, `shape`
  // reversed} for Conv1D, `stack` for RowStack.
  std::vector<HfPart> hf_parts() const;
};

struct HfArchitecture {
  std::string hf_class;    // config.json "architectures": "GPT2LMHeadModel"
  std::string model_type;  // config.json "model_type": "gpt2"
  std::string arch;        // pptrain's model.arch: "gpt2"
  // A prefix of HF names that files saved from the bare base model lack ("transformer.":
  // the Hub's own gpt2 weights were saved from GPT2Model): import accepts both spellings.
  std::string base_prefix;
  // Tensors a file may or may not hold that must equal another one (a tied LM head) in the
  // model `m`: {HF name, the HF name it is tied to}. Export leaves them out, as
  // save_pretrained does.
  std::function<std::vector<std::pair<std::string, std::string>>(const ModelConfig& m)> tied;
  // Name suffixes of buffers that are not parameters (GPT-2's attention masks, Llama's
  // rotary inverse frequencies, which older files hold): import skips them. Any other tensor the table lacks is refused.
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
HfArchitecture hf_gpt2();   // hf_gpt2.cpp
HfArchitecture hf_llama();    // hf_llama.cpp
HfArchitecture hf_mistral();  // hf_mistral.cpp
HfArchitecture hf_qwen2();    // hf_qwen2.cpp
HfArchitecture hf_qwen3();    // hf_qwen3.cpp

// The architecture of a config.json: the first of its "architectures" pptrain knows, else
// its "model_type". Throws pptrain::Error naming `where` and what pptrain imports.
const HfArchitecture& hf_architecture_of_config(const YAML::Node& config, const std::string& where);
// The architecture that exports pptrain's model.arch `arch`.
const HfArchitecture& hf_architecture_of_arch(const std::string& arch, const std::string& where);

// ---- reading config.json keys (for read_config) -------------------------------------------

// The value of `key` (nullopt when absent); a key given twice is an error.
std::optional<YAML::Node> hf_config_value(const YAML::Node& config, const std::string& key, const std::string& where);
// A required integer key in [min, max]; with `fallback`, an absent (or null) key is that
// value, as transformers' config class defaults it.
int64_t hf_config_int(const YAML::Node& config, const std::string& key, int64_t min, int64_t max,
                      const std::string& where, std::optional<int64_t> fallback = std::nullopt);
// A number key, `fallback` when absent; `min_exclusive` < value <= `max`.
double hf_config_number(const YAML::Node& config, const std::string& key, double min_exclusive, double max,
                        double fallback, const std::string& where);
// A true/false key, `fallback` when absent.
bool hf_config_bool(const YAML::Node& config, const std::string& key, bool fallback, const std::string& where);
// `x` as config.json writes a float (Python's repr): 500000.0 and 10000.0 for whole
// numbers, else the shortest text that reads back the same (1e-05).
std::string hf_number(double x);
// A key that, when present, must hold one of `allowed` (as json::describe writes values:
// "true", "\"gelu_new\""); `what` says what pptrain computes, for the message.
void hf_config_require(const YAML::Node& config, const std::string& key, const std::vector<std::string>& allowed,
                       const std::string& what, const std::string& where);

}  // namespace pptrain
