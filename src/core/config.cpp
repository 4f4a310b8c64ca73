#include "core/config.h"

#include <yaml-cpp/yaml.h>

#include <sys/stat.h>

#include <cerrno>
#include <climits>
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

// The head sizes the handwritten flash kernels are instantiated for (kernels/flash_attention.cu;
// a kernel test checks that the two lists agree).
bool flash_kernel_head_dim(const ModelConfig& m) {
  if (m.n_head < 1 || m.d_model % m.n_head != 0) return false;
  const int hd = m.d_model / m.n_head;
  return hd == 32 || hd == 64 || hd == 128;
}

void require(bool ok, const Config& c, const std::string& key, const std::string& what) {
  if (!ok) fail(c.source, ": key '", key, "': ", what);
}

// An integer key within [lo, hi]; the bounds are stated in config.h and the message.
void require_range(const Config& c, const std::string& key, int64_t value, int64_t lo, int64_t hi) {
  require(value >= lo && value <= hi, c, key, cat("expected an integer in [", lo, ", ", hi, "], got ", value));
}

// A buffer of `elements` 4-byte values must have a byte count that fits in 63 bits (sizes
// are computed in int64 and size_t): a config-time check, so no product overflows later.
void require_size(const Config& c, const std::string& key, const char* what,
                  std::initializer_list<int64_t> factors) {
  auto elements = checked_product(factors);
  auto bytes = elements ? checked_mul(*elements, uint64_t(4)) : std::nullopt;
  require(bytes && *bytes <= uint64_t(INT64_MAX), c, key,
          cat(what, " overflows 64-bit sizes (expected a smaller model or batch)"));
}

// Sizes of the products later code forms from the keys (each factor already in range).
void validate_sizes(const Config& c) {
  const auto& m = c.model;
  const int64_t B = c.training.micro_batch_size, T = m.seq_len, C = m.d_model, V = m.vocab_size;
  const int64_t L = m.n_layer, NH = m.n_head;
  require(int64_t(c.parallel.pp) * c.parallel.tp * c.parallel.dp <= kMaxWorldSize, c, "parallel.dp",
          cat("pp x tp x dp = ", int64_t(c.parallel.pp) * c.parallel.tp * c.parallel.dp, " ranks, more than ",
              kMaxWorldSize));
  const int64_t global_batch = B * c.parallel.microbatches * c.parallel.dp;  // < 2^60 by the ranges
  require(global_batch <= INT32_MAX, c, "training.micro_batch_size",
          cat("micro_batch_size x microbatches x dp = ", global_batch, " sequences per step, more than ", INT32_MAX));
  require_size(c, "training.micro_batch_size", "micro_batch_size x seq_len x d_model (activations)", {B, T, C});
  require_size(c, "training.micro_batch_size", "micro_batch_size x seq_len x 4 d_model (MLP activations)", {B, T, 4, C});
  require_size(c, "training.micro_batch_size", "micro_batch_size x seq_len x vocab_size (logits)", {B, T, V});
  require_size(c, "training.micro_batch_size", "micro_batch_size x n_head x seq_len^2 (attention scores)", {B, NH, T, T});
  require_size(c, "model.d_model", "n_layer x 12 d_model^2 (block weights)", {L, 12, C, C});
  require_size(c, "training.micro_batch_size", "micro_batch_size x seq_len x 3 ffn_hidden (SwiGLU activations)",
               {B, T, 3, m.mlp_hidden()});
  require_size(c, "model.ffn_hidden", "n_layer x 3 d_model x ffn_hidden (SwiGLU weights)", {L, 3, C, m.mlp_hidden()});
  require_size(c, "model.vocab_size", "vocab_size x d_model (embedding)", {V, C});
}

// The keys of the Llama family: ranges for llama, their defaults for gpt2 (which has no
// grouped-query attention, a 4·d_model GELU MLP, learned positions and layernorm).
void validate_llama_keys(const Config& c) {
  const auto& m = c.model;
  if (m.arch != "llama") {
    const ModelConfig defaults;
    require(m.kv_heads() == m.n_head, c, "model.n_kv_head", "applies to arch: llama only (gpt2 has n_head key/value heads)");
    require(m.mlp_hidden() == 4 * int64_t(m.d_model), c, "model.ffn_hidden",
            "applies to arch: llama only (the gpt2 MLP is 4 x d_model wide)");
    require(m.rope_theta == defaults.rope_theta, c, "model.rope_theta",
            "applies to arch: llama only (gpt2 learns its positions)");
    require(m.norm_eps == defaults.norm_eps, c, "model.norm_eps", "applies to arch: llama only (gpt2's layernorm eps is 1e-5)");
    return;
  }
  require_range(c, "model.n_kv_head", m.kv_heads(), 1, m.n_head);
  require(m.n_head % m.kv_heads() == 0, c, "model.n_kv_head",
          cat("n_kv_head ", m.kv_heads(), " must divide n_head ", m.n_head, " (each key/value head serves a group of query heads)"));
  require((m.d_model / m.n_head) % 2 == 0, c, "model.n_head",
          cat("the head size d_model/n_head = ", m.d_model / m.n_head, " must be even (the rotary embedding turns pairs)"));
  require_range(c, "model.ffn_hidden", m.mlp_hidden(), 1, kMaxWidth * 4);
  require(m.rope_theta > 1 && m.rope_theta <= 1e12, c, "model.rope_theta",
          cat("expected 1 < rope_theta <= 1e12, got ", m.rope_theta));
  require(m.norm_eps > 0 && m.norm_eps <= 1, c, "model.norm_eps", cat("expected 0 < norm_eps <= 1, got ", m.norm_eps));
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

void validate(const Config& c) {
  const auto& m = c.model;
  const auto& p = c.parallel;
  const auto& t = c.training;
  require(c.device == "cpu" || c.device == "cuda", c, "device", "expected cpu or cuda, got '" + c.device + "'");
  require(m.arch == "gpt2" || m.arch == "llama", c, "model.arch", "expected gpt2 or llama, got '" + m.arch + "'");
  require_range(c, "model.n_layer", m.n_layer, 1, kMaxLayers);
  require_range(c, "model.n_head", m.n_head, 1, kMaxWidth);
  require_range(c, "model.d_model", m.d_model, 1, kMaxWidth);
  require(m.d_model % m.n_head == 0, c, "model.n_head",
          cat("n_head ", m.n_head, " must divide d_model ", m.d_model));
  require_range(c, "model.seq_len", m.seq_len, 1, kMaxSeqLen);
  require_range(c, "model.vocab_size", m.vocab_size, 2, kMaxVocab);
  require(m.attention == "flash" || m.attention == "cudnn" || m.attention == "naive", c, "model.attention",
          "expected flash, cudnn or naive, got '" + m.attention + "'");
  require(m.attention != "cudnn" || c.device == "cuda", c, "model.attention",
          "cudnn needs device: cuda (on the cpu expected naive or flash)");
  require(m.attention != "flash" || c.device != "cuda" || flash_kernel_head_dim(m), c, "model.attention",
          cat("flash on cuda needs a head size d_model/n_head of 32, 64 or 128 (its kernels' tiles), got ",
              m.d_model / m.n_head, "; naive takes any"));
  // cuDNN's fused attention takes 16-bit tensors only, and head sizes that are multiples of 8
  // up to 128 (its backward on Ampere; backend/cuda/cudnn_attention.h).
  require(m.attention != "cudnn" || t.precision == "bf16", c, "model.attention",
          "cudnn needs training.precision: bf16 (cuDNN's fused attention has no fp32 path)");
  require(m.attention != "cudnn" || (m.d_model / m.n_head % 8 == 0 && m.d_model / m.n_head <= 128), c,
          "model.attention",
          cat("cudnn needs a head size d_model/n_head that is a multiple of 8 and at most 128, got ",
              m.d_model / m.n_head));
  validate_llama_keys(c);
  // cuDNN's fused attention is wired for multi-head attention only (backend/cuda/cudnn_attention.h).
  require(m.attention != "cudnn" || m.kv_heads() == m.n_head, c, "model.attention",
          cat("cudnn runs multi-head attention only, got n_kv_head ", m.kv_heads(), " < n_head ", m.n_head,
              "; expected flash or naive"));
  require_range(c, "parallel.pp", p.pp, 1, kMaxWorldSize);
  require_range(c, "parallel.tp", p.tp, 1, kMaxWorldSize);
  require_range(c, "parallel.dp", p.dp, 1, kMaxWorldSize);
  require_range(c, "parallel.microbatches", p.microbatches, 1, kMaxMicrobatches);
  require_range(c, "parallel.stages_per_rank", p.stages_per_rank, 1, kMaxStagesPerRank);
  require_range(c, "parallel.profile_repeats", p.profile_repeats, 1, kMaxProfileRepeats);
  require(p.zero == 0 || p.zero == 1, c, "parallel.zero",
          cat("expected 0 or 1 (1: AdamW moments sharded over the dp ranks; with dp 1 it changes nothing), got ",
              p.zero));
  require(p.memory_per_rank_gib >= 0 && p.memory_per_rank_gib <= 1e6, c, "parallel.memory_per_rank_gib",
          cat("expected GiB in [0, 1e6] (0: no limit), got ", p.memory_per_rank_gib));
  require(m.n_head % p.tp == 0, c, "parallel.tp",
          cat("tp ", p.tp, " must divide model.n_head ", m.n_head));
  require(m.kv_heads() % p.tp == 0, c, "parallel.tp",
          cat("tp ", p.tp, " must divide model.n_kv_head ", m.kv_heads(), " (the key/value heads are split over tp)"));
  require(!m.llama() || m.mlp_hidden() % p.tp == 0, c, "parallel.tp",
          cat("tp ", p.tp, " must divide model.ffn_hidden ", m.mlp_hidden(), " (the SwiGLU columns are split over tp)"));
  require(!p.schedule.empty(), c, "parallel.schedule", "expected a schedule name, file:PATH.csv or auto");
  const int stages = c.total_stages();
  if (p.layers_per_stage.empty()) {
    require(m.n_layer >= stages, c, "parallel.stages_per_rank",
            cat("model.n_layer ", m.n_layer, " is fewer than the ", stages, " pipeline stages (pp ", p.pp,
                " x stages_per_rank ", p.stages_per_rank, ")"));
  } else {
    require(int(p.layers_per_stage.size()) == stages, c, "parallel.layers_per_stage",
            cat("expected ", stages, " entries (pp x stages_per_rank), got ", p.layers_per_stage.size()));
    // The first stage holds the embedding and the last the head, so either may hold no
    // block (a planner puts a costly head alone); a stage between them would be empty.
    int64_t sum = 0;
    for (int s = 0; s < stages; ++s) {
      const int n = p.layers_per_stage[s];
      const bool end = s == 0 || s == stages - 1;
      if (end)
        require(n >= 0, c, cat("parallel.layers_per_stage[", s, "]"), cat("expected 0 or more blocks, got ", n));
      else
        require(n >= 1, c, cat("parallel.layers_per_stage[", s, "]"),
                cat("expected at least 1 block (only the first and last stage, which hold the embedding and "
                    "the head, may hold none), got ", n));
      sum += n;
    }
    require(sum == m.n_layer, c, "parallel.layers_per_stage",
            cat("entries sum to ", sum, " but model.n_layer is ", m.n_layer));
  }
  require_range(c, "training.steps", t.steps, 0, INT32_MAX);
  require_range(c, "training.micro_batch_size", t.micro_batch_size, 1, kMaxMicroBatchSize);
  // Floats: finite (checked as they are read) and in the ranges of config.h.
  require(t.lr > 0 && t.lr <= kMaxLr, c, "training.lr", cat("expected 0 < lr <= ", kMaxLr, ", got ", t.lr));
  require(t.min_lr >= 0 && t.min_lr <= t.lr, c, "training.min_lr",
          cat("expected 0 <= min_lr <= lr (", t.lr, "), got ", t.min_lr));
  require_range(c, "training.warmup_steps", t.warmup_steps, 0, INT32_MAX);
  require(t.weight_decay >= 0 && t.weight_decay <= kMaxWeightDecay, c, "training.weight_decay",
          cat("expected 0 <= weight_decay <= ", kMaxWeightDecay, ", got ", t.weight_decay));
  require(t.grad_clip >= 0 && t.grad_clip <= kMaxGradClip, c, "training.grad_clip",
          cat("expected 0 <= grad_clip <= ", kMaxGradClip, " (0 disables clipping), got ", t.grad_clip));
  require(t.beta1 >= 0 && t.beta1 < 1, c, "training.beta1", cat("expected 0 <= beta1 < 1, got ", t.beta1));
  require(t.beta2 >= 0 && t.beta2 < 1, c, "training.beta2", cat("expected 0 <= beta2 < 1, got ", t.beta2));
  require(t.eps > 0 && t.eps <= kMaxEps, c, "training.eps", cat("expected 0 < eps <= ", kMaxEps, ", got ", t.eps));
  require(t.precision == "fp32" || t.precision == "bf16", c, "training.precision",
          "expected fp32 or bf16, got '" + t.precision + "'");
  require(t.precision == "fp32" || c.device == "cuda", c, "training.precision",
          "bf16 needs device: cuda (the cpu backend is fp32)");
  require_range(c, "training.eval_every", t.eval_every, 0, INT32_MAX);
  require_range(c, "training.eval_batches", t.eval_batches, 0, kMaxEvalBatches);
  require(t.on_nonfinite == "stop" || t.on_nonfinite == "skip", c, "training.on_nonfinite",
          "expected stop or skip, got '" + t.on_nonfinite + "'");
  require_range(c, "training.max_skipped", t.max_skipped, 1, INT32_MAX);
  const auto is_mode = [](const std::string& m) { return m == "none" || m == "attention" || m == "full"; };
  if (t.recompute.per_stage.empty()) {
    require(is_mode(t.recompute.every) || t.recompute.every == "auto", c, "training.recompute",
            "expected none, attention, full, auto or a list of one per stage, got '" + t.recompute.every + "'");
    // auto is the planner's choice against a memory limit: without costs and a limit there
    // is nothing to choose by (a silent none would surprise whoever asked for auto).
    require(!t.recompute.is_auto() || (!c.parallel.profile.empty() && c.parallel.memory_per_rank_gib > 0), c,
            "training.recompute",
            "auto needs parallel.profile (measure, or a cost file of pptrain profile) and "
            "parallel.memory_per_rank_gib (the limit the per-stage choice must fit)");
  } else {
    require(int(t.recompute.per_stage.size()) == c.total_stages(), c, "training.recompute",
            cat("expected ", c.total_stages(), " entries (pp x stages_per_rank), got ", t.recompute.per_stage.size()));
    for (size_t s = 0; s < t.recompute.per_stage.size(); ++s)
      require(is_mode(t.recompute.per_stage[s]), c, cat("training.recompute[", s, "]"),
              "expected none, attention or full, got '" + t.recompute.per_stage[s] + "'");
  }
  require_range(c, "checkpoint.every", c.checkpoint.every, 0, INT32_MAX);
  require_range(c, "checkpoint.keep_last", c.checkpoint.keep_last, 1, INT32_MAX);
  require(!c.checkpoint.resume.empty(), c, "checkpoint.resume", "expected auto, none or a path");
  require_range(c, "logging.every", c.logging.every, 1, INT32_MAX);
  require_range(c, "logging.sample_tokens", c.logging.sample_tokens, 0, kMaxSampleTokens);
  // std::isfinite: a YAML .nan or .inf parses as a double; an infinite wait is spelled 0.
  require(std::isfinite(c.runtime.watchdog_s) && c.runtime.watchdog_s >= 0, c, "runtime.watchdog_s",
          cat("expected a finite number of seconds >= 0 (0 disables the watchdog), got ", c.runtime.watchdog_s));
  validate_sizes(c);
}

Config parse_config(const std::string& yaml_text, const std::string& source,
                    const std::vector<std::string>& overrides) {
  Config c;
  c.source = source;
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    fail(source, ":", e.mark.line + 1, ": invalid YAML: ", e.msg);
  }
  reject_duplicate_keys(root, "", source);
  apply(c, root, source);
  bool tie_given = gives_key(root, "model", "tie_embeddings");
  for (const auto& o : overrides) {
    const YAML::Node node = override_node(o);
    apply(c, node, "command line override '" + o + "'");
    tie_given = tie_given || gives_key(node, "model", "tie_embeddings");
  }
  resolve_model_defaults(c.model, tie_given);
  if (c.model.attention.empty())
    c.model.attention = c.device == "cuda" && flash_kernel_head_dim(c.model) ? "flash" : "naive";
  validate(c);
  return c;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) fail(path, ": cannot open config file (", std::strerror(errno), ")");
  // A regular file only (a directory would read as an empty config, a FIFO block forever).
  return parse_config(read_small_file(path, "config", kMaxConfigBytes), path, overrides);
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
