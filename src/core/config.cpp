#include "core/config.h"

#include <yaml-cpp/yaml.h>

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/input_file.h"

namespace pptrain {
namespace {

// One entry per key: how to read it from YAML and how to write it back.
struct Field {
  std::function<void(const YAML::Node&, const std::string& where)> read;
  std::function<void(YAML::Emitter&)> write;
};
using Section = std::map<std::string, Field>;  // key -> field (ordered for to_yaml)

std::string describe(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing";
}

template <typename T>
T scalar(const YAML::Node& n, const std::string& where, const char* expected) {
  if (!n.IsScalar()) fail(where, ": expected ", expected, ", got ", describe(n));
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    fail(where, ": expected ", expected, ", got ", describe(n));
  }
}

Field int_field(int* p) {
  return {[p](const YAML::Node& n, const std::string& w) { *p = scalar<int>(n, w, "an integer"); },
          [p](YAML::Emitter& e) { e << *p; }};
}
Field u64_field(uint64_t* p) {
  return {[p](const YAML::Node& n, const std::string& w) {
            *p = scalar<uint64_t>(n, w, "a non-negative integer");
          },
          [p](YAML::Emitter& e) { e << *p; }};
}
// Finite only: YAML spells infinity and NaN (.inf, .nan), which no key can use.
Field double_field(double* p) {
  return {[p](const YAML::Node& n, const std::string& w) {
            *p = scalar<double>(n, w, "a number");
            if (!std::isfinite(*p)) fail(w, ": expected a finite number, got ", describe(n));
          },
          [p](YAML::Emitter& e) { e << YAML::Precision(17) << *p; }};
}
Field bool_field(bool* p) {
  return {[p](const YAML::Node& n, const std::string& w) { *p = scalar<bool>(n, w, "true or false"); },
          [p](YAML::Emitter& e) { e << *p; }};
}
Field string_field(std::string* p) {
  return {[p](const YAML::Node& n, const std::string& w) {
            *p = n.IsNull() ? "" : scalar<std::string>(n, w, "a string");
          },
          [p](YAML::Emitter& e) { e << YAML::DoubleQuoted << *p; }};
}
// `auto` or a list of integers.
Field layers_field(std::vector<int>* p) {
  return {[p](const YAML::Node& n, const std::string& w) {
            p->clear();
            if (n.IsScalar() && n.Scalar() == "auto") return;
            if (!n.IsSequence()) fail(w, ": expected 'auto' or a list of integers, got ", describe(n));
            // [] would read as auto (an empty list is how auto is held): say so instead.
            if (n.size() == 0) fail(w, ": expected 'auto' or a list of one block count per stage, got []");
            for (size_t i = 0; i < n.size(); ++i)
              p->push_back(scalar<int>(n[i], cat(w, "[", i, "]"), "an integer"));
          },
          [p](YAML::Emitter& e) {
            if (p->empty()) { e << "auto"; return; }
            e << YAML::Flow << YAML::BeginSeq;
            for (int v : *p) e << v;
            e << YAML::EndSeq;
          }};
}

// training.recompute: a mode, or a list of one mode per stage (checked in validate()).
Field recompute_field(RecomputeConfig* p) {
  return {[p](const YAML::Node& n, const std::string& w) {
            p->per_stage.clear();
            if (n.IsSequence()) {
              p->every.clear();
              for (size_t i = 0; i < n.size(); ++i)
                p->per_stage.push_back(scalar<std::string>(n[i], cat(w, "[", i, "]"), "none, attention or full"));
              return;
            }
            p->every = scalar<std::string>(n, w, "none, attention, full, auto or a list of them per stage");
          },
          [p](YAML::Emitter& e) {
            if (p->per_stage.empty()) { e << p->every; return; }
            e << YAML::Flow << YAML::BeginSeq;
            for (const std::string& m : p->per_stage) e << m;
            e << YAML::EndSeq;
          }};
}

// The schema: every section and key pptrain knows, bound to the fields of `c`.
std::map<std::string, Section> schema(Config& c) {
  std::map<std::string, Section> s;
  auto& m = s["model"];
  m["arch"] = string_field(&c.model.arch);
  m["n_layer"] = int_field(&c.model.n_layer);
  m["n_head"] = int_field(&c.model.n_head);
  m["d_model"] = int_field(&c.model.d_model);
  m["seq_len"] = int_field(&c.model.seq_len);
  m["vocab_size"] = int_field(&c.model.vocab_size);
  m["tie_embeddings"] = bool_field(&c.model.tie_embeddings);
  m["attention"] = string_field(&c.model.attention);
  m["n_kv_head"] = int_field(&c.model.n_kv_head);
  m["ffn_hidden"] = int_field(&c.model.ffn_hidden);
  m["rope_theta"] = double_field(&c.model.rope_theta);
  m["rope_scaling"] = string_field(&c.model.rope_scaling.type);
  m["rope_factor"] = double_field(&c.model.rope_scaling.factor);
  m["rope_low_freq_factor"] = double_field(&c.model.rope_scaling.low_freq_factor);
  m["rope_high_freq_factor"] = double_field(&c.model.rope_scaling.high_freq_factor);
  m["rope_original_max_positions"] = int_field(&c.model.rope_scaling.original_max_positions);
  m["head_dim"] = int_field(&c.model.head_dim);
  m["norm_eps"] = double_field(&c.model.norm_eps);
  auto& p = s["parallel"];
  p["pp"] = int_field(&c.parallel.pp);
  p["tp"] = int_field(&c.parallel.tp);
  p["dp"] = int_field(&c.parallel.dp);
  p["schedule"] = string_field(&c.parallel.schedule);
  p["microbatches"] = int_field(&c.parallel.microbatches);
  p["stages_per_rank"] = int_field(&c.parallel.stages_per_rank);
  p["layers_per_stage"] = layers_field(&c.parallel.layers_per_stage);
  p["profile"] = string_field(&c.parallel.profile);
  p["profile_repeats"] = int_field(&c.parallel.profile_repeats);
  p["zero"] = int_field(&c.parallel.zero);
  p["comm"] = string_field(&c.parallel.comm);
  p["memory_per_rank_gib"] = double_field(&c.parallel.memory_per_rank_gib);
  auto& t = s["training"];
  t["steps"] = int_field(&c.training.steps);
  t["micro_batch_size"] = int_field(&c.training.micro_batch_size);
  t["lr"] = double_field(&c.training.lr);
  t["min_lr"] = double_field(&c.training.min_lr);
  t["warmup_steps"] = int_field(&c.training.warmup_steps);
  t["weight_decay"] = double_field(&c.training.weight_decay);
  t["grad_clip"] = double_field(&c.training.grad_clip);
  t["beta1"] = double_field(&c.training.beta1);
  t["beta2"] = double_field(&c.training.beta2);
  t["eps"] = double_field(&c.training.eps);
  t["seed"] = u64_field(&c.training.seed);
  t["precision"] = string_field(&c.training.precision);
  t["eval_every"] = int_field(&c.training.eval_every);
  t["eval_batches"] = int_field(&c.training.eval_batches);
  t["on_nonfinite"] = string_field(&c.training.on_nonfinite);
  t["max_skipped"] = int_field(&c.training.max_skipped);
  t["on_spike"] = string_field(&c.training.on_spike);
  t["spike_factor"] = double_field(&c.training.spike_factor);
  t["spike_window"] = int_field(&c.training.spike_window);
  t["max_rollbacks"] = int_field(&c.training.max_rollbacks);
  t["post_validation"] = bool_field(&c.training.post_validation);
  t["recompute"] = recompute_field(&c.training.recompute);
  auto& d = s["data"];
  d["train"] = string_field(&c.data.train);
  d["val"] = string_field(&c.data.val);
  d["shuffle"] = bool_field(&c.data.shuffle);
  auto& k = s["checkpoint"];
  k["dir"] = string_field(&c.checkpoint.dir);
  k["every"] = int_field(&c.checkpoint.every);
  k["keep_last"] = int_field(&c.checkpoint.keep_last);
  k["resume"] = string_field(&c.checkpoint.resume);
  auto& l = s["logging"];
  l["every"] = int_field(&c.logging.every);
  l["metrics"] = string_field(&c.logging.metrics);
  l["trace"] = string_field(&c.logging.trace);
  l["sample_tokens"] = int_field(&c.logging.sample_tokens);
  l["sample_every"] = int_field(&c.logging.sample_every);
  l["op_profile"] = int_field(&c.logging.op_profile);
  l["op_profile_file"] = string_field(&c.logging.op_profile_file);
  l["kernel_profile"] = bool_field(&c.logging.kernel_profile);
  auto& r = s["runtime"];
  r["watchdog_s"] = double_field(&c.runtime.watchdog_s);
  return s;
}

std::string known_keys(const Section& sec) {
  std::string out;
  for (auto& [k, f] : sec) out += (out.empty() ? "" : ", ") + k;
  return out;
}

// yaml-cpp keeps both entries of a key given twice in one mapping (and a lookup would
// silently take one of them): refuse it, naming the key path and both lines.
// A config's nodes, counting each once per path to it, as every walk over the tree does.
// YAML aliases let a kilobyte name billions of them (an alias of a list of aliases, nine
// levels deep, of a list of nine), so before any other walk the count is bounded: a real
// config has a few hundred nodes. Returns false once `budget` is spent.
bool within_node_budget(const YAML::Node& node, long& budget) {
  if (--budget < 0) return false;
  if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i)
      if (!within_node_budget(node[i], budget)) return false;
  } else if (node.IsMap()) {
    for (auto it = node.begin(); it != node.end(); ++it)
      if (!within_node_budget(it->first, budget) || !within_node_budget(it->second, budget)) return false;
  }
  return true;
}
constexpr long kMaxConfigNodes = 100000;

void reject_duplicate_keys(const YAML::Node& node, const std::string& path, const std::string& source) {
  if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) reject_duplicate_keys(node[i], cat(path, "[", i, "]"), source);
    return;
  }
  if (!node.IsMap()) return;
  std::map<std::string, int> line_of;  // key -> 1-based line of its first occurrence
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string key = it->first.IsScalar() ? it->first.Scalar() : "?";
    const std::string key_path = path.empty() ? key : path + "." + key;
    const int line = it->first.Mark().line + 1;
    auto [first, inserted] = line_of.emplace(key, line);
    if (!inserted)
      fail(source, ": key '", key_path, "' is given twice (lines ", first->second, " and ", line, "; expected once)");
    reject_duplicate_keys(it->second, key_path, source);
  }
}

void apply(Config& c, const YAML::Node& root, const std::string& source) {
  if (root.IsNull()) return;
  if (!root.IsMap()) fail(source, ": expected a mapping of sections at the top level");
  auto s = schema(c);
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (!it->first.IsScalar())
      fail(source, ":", it->first.Mark().line + 1, ": expected a section name, got ", describe(it->first), " as a key");
    std::string sec = it->first.Scalar();
    if (sec == "device") {
      string_field(&c.device).read(it->second, source + ": key 'device'");
      continue;
    }
    auto found = s.find(sec);
    if (found == s.end())
      fail(source, ": unknown section '", sec,
           "' (expected device, model, parallel, training, data, checkpoint, logging, runtime)");
    if (it->second.IsNull()) continue;
    if (!it->second.IsMap()) fail(source, ": section '", sec, "': expected a mapping, got ", describe(it->second));
    for (auto kv = it->second.begin(); kv != it->second.end(); ++kv) {
      if (!kv->first.IsScalar())
        fail(source, ":", kv->first.Mark().line + 1, ": section '", sec, "': expected a key name, got ",
             describe(kv->first), " as a key");
      std::string key = kv->first.Scalar();
      auto f = found->second.find(key);
      if (f == found->second.end())
        fail(source, ": unknown key '", sec, ".", key, "' (known in '", sec, "': ", known_keys(found->second), ")");
      f->second.read(kv->second, cat(source, ": key '", sec, ".", key, "'"));
    }
  }
}

// "training.lr=3e-4" -> {training: {lr: 3e-4}}
YAML::Node override_node(const std::string& arg) {
  auto eq = arg.find('=');
  if (eq == std::string::npos || eq == 0) fail("command line: override '", arg, "': expected section.key=value");
  std::string path = arg.substr(0, eq), value = arg.substr(eq + 1);
  YAML::Node v;
  try {
    v = YAML::Load(value);
  } catch (const YAML::Exception& e) {
    fail("command line: override '", arg, "': value is not valid YAML: ", e.msg);
  }
  reject_duplicate_keys(v, path, "command line override '" + arg + "'");
  YAML::Node root;
  auto dot = path.find('.');
  if (dot == std::string::npos) {
    root[path] = v;
  } else {
    root[path.substr(0, dot)][path.substr(dot + 1)] = v;
  }
  return root;
}

// Whether the YAML `root` sets `section.key` (a mapping that holds it).
bool gives_key(const YAML::Node& root, const char* section, const char* key) {
  if (!root.IsMap()) return false;
  const YAML::Node sec = root[section];
  return sec && sec.IsMap() && sec[key];
}

// The arch-dependent defaults: an unset tie_embeddings (true for gpt2, false for llama), an
// unset n_kv_head (n_head) and ffn_hidden (4C for gpt2, Llama's rounding for llama).
void resolve_model_defaults(ModelConfig& m, bool tie_given) {
  if (!tie_given) m.tie_embeddings = !m.llama();
  m.n_kv_head = m.kv_heads();
  m.ffn_hidden = m.mlp_hidden();
}

}  // namespace

int ModelConfig::mlp_hidden() const {
  if (ffn_hidden) return ffn_hidden;
  if (d_model < 1 || d_model > kMaxWidth) return 0;  // out of range: validate() says so
  return llama() ? llama_ffn_hidden(d_model) : 4 * d_model;
}

int llama_ffn_hidden(int d_model) {
  const int64_t hidden = 2 * (4 * int64_t(d_model)) / 3;
  return int((hidden + 255) / 256 * 256);
}

void resolve_default_attention(Config& c, const BuildFeatures& build) {
  ModelConfig& m = c.model;
  if (!m.attention.empty()) return;
  if (c.device != "cuda") {
    // The cpu's flash core is no faster there; naive keeps the cpu's figures and losses.
    m.attention = "naive";
    m.attention_default = "the cpu default";
    return;
  }
  if (m.n_head < 1 || m.d_model < 1 || m.d_model % m.n_head) {  // validate() names the key
    m.attention = "naive";
    return;
  }
  const int hd = m.attention_head_dim();
  // cuDNN's fused attention was measured the fastest core on Hopper (GPT-2 124M on an H200:
  // 35.2 ms a step against 54.9 ms with the flash kernels); it takes what validate() lets
  // model.attention: cudnn take.
  std::string no_cudnn;
  if (!build.cudnn) no_cudnn = "this binary has no cuDNN";
  else if (c.training.precision != "bf16") no_cudnn = "cuDNN's fused attention needs bf16";
  else if (hd % 8 || hd > 128) no_cudnn = cat("head size ", hd, " is not cuDNN's (a multiple of 8 up to 128)");
  if (no_cudnn.empty()) {
    m.attention = "cudnn";
    m.attention_default = cat("default on cuda: cuDNN's fused attention, bf16, head size ", hd);
  } else if (flash_kernel_head_dim(m)) {
    m.attention = "flash";
    m.attention_default = cat("default on cuda: ", no_cudnn, ", so the flash kernels");
  } else {
    m.attention = "naive";
    m.attention_default = cat("default on cuda: ", no_cudnn, ", and no flash kernel for head size ", hd);
  }
}

Config parse_config(const std::string& yaml_text, const std::string& source,
                    const std::vector<std::string>& overrides, const BuildFeatures& build) {
  Config c;
  c.source = source;
  // A second document (a '---' line after content) would be dropped by YAML::Load: refused.
  // (Not YAML::LoadAll: yaml-cpp 0.7's loops forever on some malformed input.)
  std::istringstream lines(yaml_text);
  bool content = false;
  int line_number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++line_number;
    const bool marker = line.rfind("---", 0) == 0 && (line.size() == 3 || line[3] == ' ' || line[3] == '\t' ||
                                                      line[3] == '\r');
    if (marker && content)
      fail(source, ":", line_number, ": a second YAML document ('---' after the first); a config is one document");
    const size_t first = line.find_first_not_of(" \t\r");
    content = content || (!marker && first != std::string::npos && line[first] != '#');
  }
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    fail(source, ":", e.mark.line + 1, ": invalid YAML: ", e.msg);
  }
  long budget = kMaxConfigNodes;
  if (!within_node_budget(root, budget))
    fail(source, ": the config expands to more than ", kMaxConfigNodes,
         " YAML nodes (aliases that repeat aliases); a config has a few hundred");
  reject_duplicate_keys(root, "", source);
  apply(c, root, source);
  bool tie_given = gives_key(root, "model", "tie_embeddings");
  for (const auto& o : overrides) {
    const YAML::Node node = override_node(o);
    apply(c, node, "command line override '" + o + "'");
    tie_given = tie_given || gives_key(node, "model", "tie_embeddings");
  }
  resolve_model_defaults(c.model, tie_given);
  resolve_default_attention(c, build);
  validate(c);
  return c;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides,
                   const BuildFeatures& build) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) fail(path, ": cannot open config file (", std::strerror(errno), ")");
  // A regular file only (a directory would read as an empty config, a FIFO block forever).
  return parse_config(read_small_file(path, "config", kMaxConfigBytes), path, overrides, build);
}

std::string to_yaml(const Config& c_in) {
  Config c = c_in;  // schema() binds to mutable fields
  auto s = schema(c);
  YAML::Emitter e;
  e << YAML::BeginMap;
  e << YAML::Key << "device" << YAML::Value << c.device;
  for (const char* name : {"model", "parallel", "training", "data", "checkpoint", "logging", "runtime"}) {
    e << YAML::Key << name << YAML::Value << YAML::BeginMap;
    for (auto& [key, f] : s[name]) {
      e << YAML::Key << key << YAML::Value;
      f.write(e);
    }
    e << YAML::EndMap;
  }
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

}  // namespace pptrain
