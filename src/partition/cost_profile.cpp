#include "partition/cost_profile.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "core/input_file.h"
#include "core/json.h"

namespace pptrain {
namespace {

using json::describe;
using json::printable;

// A plain (unquoted) scalar: numbers and true/false; a quoted "1.5" is a string.
bool plain_scalar(const YAML::Node& n) { return n.IsScalar() && !json::is_string(n); }

// "%.17g": enough digits that strtod gives back the same double.
std::string number_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

// One key of the file: how to read its value (`file` and `path`, "block.forward_ms", name it
// in messages) and how to write it. Reading and writing walk the same list, so they cannot
// disagree.
struct Field {
  std::string key;
  std::function<void(const YAML::Node&, const std::string& file, const std::string& path)> read;
  std::function<std::string(int indent)> write;
};

// A leaf's reader from one that needs only "FILE: PATH" for its messages.
template <typename Read>
auto leaf(Read read) {
  return [read](const YAML::Node& n, const std::string& file, const std::string& path) {
    read(n, file + ": " + path);
  };
}

Field number_field(const std::string& key, double* p) {
  return {key,
          leaf([p](const YAML::Node& n, const std::string& where) {
            const char* expected = "expected a finite number >= 0";
            if (!plain_scalar(n)) fail(where, ": ", expected, ", got ", describe(n));
            double x;
            try {
              x = n.as<double>();
            } catch (const YAML::Exception&) {
              fail(where, ": ", expected, ", got ", describe(n));
            }
            if (!std::isfinite(x) || x < 0) fail(where, ": ", expected, ", got ", describe(n));
            *p = x;
          }),
          [p](int) { return number_text(*p); }};
}

// An integer in [1, max]: the bounds of the config key it describes (core/config.h), so
// products of them stay in 64 bits in whatever plans with the profile.
Field shape_field(const std::string& key, int* p, int max) {
  return {key,
          leaf([p, max](const YAML::Node& n, const std::string& where) {
            const std::string expected = cat("expected an integer in [1, ", max, "]");
            if (!plain_scalar(n)) fail(where, ": ", expected, ", got ", describe(n));
            int64_t x;
            try {
              x = n.as<int64_t>();
            } catch (const YAML::Exception&) {
              fail(where, ": ", expected, ", got ", describe(n));
            }
            if (x < 1 || x > max) fail(where, ": ", expected, ", got ", describe(n));
            *p = int(x);
          }),
          [p](int) { return std::to_string(*p); }};
}

Field choice_field(const std::string& key, std::string* p, std::vector<std::string> choices) {
  return {key,
          leaf([p, choices](const YAML::Node& n, const std::string& where) {
            std::string expected = "expected one of";
            for (const auto& c : choices) expected += " \"" + c + "\"";
            if (!n.IsScalar()) fail(where, ": ", expected, ", got ", describe(n));
            for (const auto& c : choices)
              if (n.Scalar() == c) {
                *p = c;
                return;
              }
            fail(where, ": ", expected, ", got ", describe(n));
          }),
          [p](int) { return json::quote(*p); }};
}

Field flag_field(const std::string& key, bool* p) {
  return {key,
          leaf([p](const YAML::Node& n, const std::string& where) {
            if (!plain_scalar(n) || (n.Scalar() != "true" && n.Scalar() != "false"))
              fail(where, ": expected true or false, got ", describe(n));
            *p = n.Scalar() == "true";
          }),
          [p](int) { return std::string(*p ? "true" : "false"); }};
}

// Reads the object `node` at `path` ("" for the top) of file `what` into `fields`: every key
// known, given once, and present.
void read_object(const YAML::Node& node, const std::vector<Field>& fields, const std::string& what,
                 const std::string& path) {
  const std::string where = path.empty() ? what : what + ": " + path;
  if (!node.IsMap()) fail(where, ": expected a JSON object, got ", describe(node));
  std::set<std::string> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    if (!it->first.IsScalar()) fail(where, ": expected string keys, got ", describe(it->first), " as a key");
    const std::string key = it->first.Scalar();
    const std::string key_path = path.empty() ? printable(key) : path + "." + printable(key);
    const Field* field = nullptr;
    for (const Field& f : fields)
      if (f.key == key) field = &f;
    if (!field) {
      std::string known;
      for (const Field& f : fields) known += (known.empty() ? "" : ", ") + f.key;
      fail(what, ": ", key_path, ": unknown key (expected ", known, ")");
    }
    if (!seen.insert(key).second) fail(what, ": ", key_path, ": given twice (expected once)");
    field->read(it->second, what, key_path);
  }
  // Keys a profile has held since recompute was profiled: an older file lacks them.
  const std::set<std::string> recompute_keys = {"act_from_input_bytes", "block_attention", "block_full"};
  for (const Field& f : fields)
    if (!seen.count(f.key))
      fail(what, ": ", path.empty() ? f.key : path + "." + f.key, ": missing",
           recompute_keys.count(f.key) ? " (a profile from before recompute costs were measured: take it again with "
                                         "pptrain profile)"
                                       : "");
}

std::string write_object(const std::vector<Field>& fields, int indent) {
  const std::string pad(size_t(indent) + 2, ' ');
  std::string out = "{\n";
  for (size_t i = 0; i < fields.size(); ++i)
    out += pad + json::quote(fields[i].key) + ": " + fields[i].write(indent + 2) + (i + 1 < fields.size() ? ",\n" : "\n");
  return out + std::string(size_t(indent), ' ') + "}";
}

std::vector<Field> layer_fields(LayerCost& l) {
  return {number_field("forward_ms", &l.forward_ms),       number_field("input_grad_ms", &l.input_grad_ms),
          number_field("weight_grad_ms", &l.weight_grad_ms), number_field("act_fi_bytes", &l.act_fi_bytes),
          number_field("act_iw_bytes", &l.act_iw_bytes),   number_field("act_from_input_bytes", &l.act_from_input_bytes),
          number_field("param_bytes", &l.param_bytes),
          number_field("optim_bytes", &l.optim_bytes)};
}

Field layer_field(const std::string& key, LayerCost* l) {
  return {key,
          [l](const YAML::Node& n, const std::string& file, const std::string& path) {
            read_object(n, layer_fields(*l), file, path);
          },
          [l](int indent) { return write_object(layer_fields(*l), indent); }};
}

// other_tp: an array of {"tp", "embedding", "block", "head"} objects, degrees ascending
// (that they exceed the profile's own tp is checked once the whole object is read).
Field other_tp_field(const std::string& key, std::vector<TpLayerCosts>* list) {
  auto fields = [](TpLayerCosts& t) {
    return std::vector<Field>{shape_field("tp", &t.tp, kMaxWorldSize),  layer_field("embedding", &t.embedding),
                              layer_field("block", &t.block),              layer_field("head", &t.head),
                              layer_field("block_attention", &t.block_attention), layer_field("block_full", &t.block_full)};
  };
  return {key,
          [=](const YAML::Node& n, const std::string& file, const std::string& path) {
            if (!n.IsSequence()) fail(file, ": ", path, ": expected a JSON array, got ", describe(n));
            list->clear();
            int previous = 0;
            for (size_t i = 0; i < n.size(); ++i) {
              const std::string at = cat(path, "[", i, "]");
              TpLayerCosts t;
              read_object(n[i], fields(t), file, at);
              if (t.tp <= previous)
                fail(file, ": ", at, ".tp: expected a degree above ", previous, " (ascending), got ", t.tp);
              previous = t.tp;
              list->push_back(t);
            }
          },
          [=](int indent) {
            if (list->empty()) return std::string("[]");
            const std::string pad(size_t(indent) + 2, ' ');
            std::string out = "[\n";
            for (size_t i = 0; i < list->size(); ++i)
              out += pad + write_object(fields((*list)[i]), indent + 2) + (i + 1 < list->size() ? ",\n" : "\n");
            return out + std::string(size_t(indent), ' ') + "]";
          }};
}

// The schema of the file: the members of CostProfile, in the order they are written.
std::vector<Field> profile_fields(CostProfile& p) {
  return {choice_field("device", &p.device, {"cpu", "cuda"}),
          choice_field("precision", &p.precision, {"fp32", "bf16"}),
          choice_field("attention", &p.attention, {"naive", "flash", "cudnn"}),
          shape_field("n_layer", &p.n_layer, kMaxLayers),
          shape_field("micro_batch_size", &p.micro_batch_size, kMaxMicroBatchSize),
          shape_field("seq_len", &p.seq_len, kMaxSeqLen),
          shape_field("d_model", &p.d_model, kMaxWidth),
          shape_field("n_head", &p.n_head, kMaxWidth),
          shape_field("vocab_size", &p.vocab_size, kMaxVocab),
          shape_field("tp", &p.tp, kMaxWorldSize),
          layer_field("embedding", &p.embedding),
          layer_field("block", &p.block),
          layer_field("head", &p.head),
          layer_field("block_attention", &p.block_attention),
          layer_field("block_full", &p.block_full),
          other_tp_field("other_tp", &p.other_tp),
          number_field("transfer_bytes", &p.transfer_bytes),
          number_field("transfer_ms", &p.transfer_ms),
          number_field("allreduce_latency_ms", &p.allreduce_latency_ms),
          number_field("allreduce_bytes_per_ms", &p.allreduce_bytes_per_ms),
          flag_field("allreduce_measured", &p.allreduce_measured),
          shape_field("allreduce_ranks", &p.allreduce_ranks, kMaxWorldSize),
          number_field("update_ns_per_param", &p.update_ns_per_param)};
}

// Elements of wte on one tp rank: [ceil(V / tp) · C] (the vocabulary padded to tp).
double tied_embedding_elements(const CostProfile& p) {
  const double tp = p.tp < 1 ? 1 : p.tp;
  return std::ceil(double(p.vocab_size) / tp) * double(p.d_model);
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

std::string to_json(const CostProfile& p_in) {
  CostProfile p = p_in;  // the fields bind to mutable members
  return write_object(profile_fields(p), 0) + "\n";
}

CostProfile parse_cost_profile(const std::string& json, const std::string& what) {
  YAML::Node root;
  try {
    root = YAML::Load(json);
  } catch (const YAML::Exception& e) {
    fail(what, ":", e.mark.line + 1, ": invalid JSON (", e.msg, ")");
  }
  CostProfile p;
  read_object(root, profile_fields(p), what, "");
  if (!p.other_tp.empty() && p.other_tp[0].tp <= p.tp)
    fail(what, ": other_tp[0].tp: expected a degree above the profile's tp ", p.tp, ", got ", p.other_tp[0].tp);
  return p;
}

CostProfile read_cost_profile(const std::string& path) {
  return parse_cost_profile(read_small_file(path, "cost profile", kMaxCostProfileBytes), path);
}

void write_cost_profile(const CostProfile& p, const std::string& path) {
  const std::string text = to_json(p), tmp = path + ".tmp";
  {
    std::unique_ptr<std::FILE, FileCloser> out(std::fopen(tmp.c_str(), "wb"));
    if (!out) fail(path, ": cannot create ", tmp, " (", std::strerror(errno), ")");
    const bool ok = std::fwrite(text.data(), 1, text.size(), out.get()) == text.size() && std::fflush(out.get()) == 0;
    if (!ok) {
      const int err = errno;
      out.reset();
      std::remove(tmp.c_str());
      fail(path, ": write failed (", std::strerror(err), ")");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    fail(path, ": cannot rename ", tmp, " to it (", std::strerror(err), ")");
  }
}

double tied_embedding_param_bytes(const CostProfile& p) {
  return tied_embedding_elements(p) * (p.precision == "bf16" ? 4 + 4 + 2 : 4 + 4);
}

double tied_embedding_optim_bytes(const CostProfile& p) { return tied_embedding_elements(p) * 8; }

}  // namespace pptrain
