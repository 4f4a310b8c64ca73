#include "checkpoint/hf_arch.h"

#include <cmath>

#include "core/error.h"

namespace pptrain {

std::vector<HfPart> HfTensor::hf_parts() const {
  if (layout == HfLayout::RowStack) return stack;
  if (layout == HfLayout::Conv1D) return {{hf_name, {shape[1], shape[0]}}};
  return {{hf_name, shape}};
}

const std::vector<HfArchitecture>& hf_architectures() {
  static const std::vector<HfArchitecture> all = {hf_gpt2(), hf_llama(), hf_mistral(), hf_qwen2(), hf_qwen3()};
  return all;
}

namespace {

std::string known_classes() {
  std::string s;
  for (const HfArchitecture& a : hf_architectures()) s += cat(s.empty() ? "" : ", ", a.hf_class);
  return s;
}

}  // namespace

const HfArchitecture& hf_architecture_of_config(const YAML::Node& config, const std::string& where) {
  const auto classes = hf_config_value(config, "architectures", where);
  const auto type = hf_config_value(config, "model_type", where);
  if (classes && classes->IsSequence())
    for (const YAML::Node& c : *classes)
      for (const HfArchitecture& a : hf_architectures())
        if (json::is_string(c) && c.Scalar() == a.hf_class) {
          // transformers builds the class from model_type's config class: a file whose two
          // keys disagree was edited by hand, and which of them it meant is a guess.
          if (type && !(json::is_string(*type) && type->Scalar() == a.model_type))
            fail(where, ": architectures names ", a.hf_class, " but model_type is ", json::describe(*type),
                 " (expected \"", a.model_type, "\"); the two keys disagree");
          return a;
        }
  for (const HfArchitecture& a : hf_architectures())
    if (type && json::is_string(*type) && type->Scalar() == a.model_type) return a;
  std::string names = "missing";
  if (classes && classes->IsSequence()) {
    names = "[";
    for (const YAML::Node& c : *classes) names += cat(names.size() > 1 ? ", " : "", json::describe(c));
    names += "]";
  } else if (classes) {
    names = json::describe(*classes);
  }
  fail(where, ": architectures ", names, ", model_type ",
       type ? json::describe(*type) : "missing", ": pptrain imports ", known_classes());
}

const HfArchitecture& hf_architecture_of_arch(const std::string& arch, const std::string& where) {
  for (const HfArchitecture& a : hf_architectures())
    if (a.arch == arch) return a;
  fail(where, ": model.arch ", arch, " has no Hugging Face export (pptrain exports ", known_classes(), ")");
}

std::optional<YAML::Node> hf_config_value(const YAML::Node& config, const std::string& key,
                                          const std::string& where) {
  // A YAML::Node assigned to another writes into the node it refers to: found is bound
  // once, by construction.
  std::optional<YAML::Node> found;
  for (auto it = config.begin(); it != config.end(); ++it) {
    if (!json::is_string(it->first) || it->first.Scalar() != key) continue;
    if (found) fail(where, ": ", key, " is given twice");
    found.emplace(it->second);
  }
  return found;
}

int64_t hf_config_int(const YAML::Node& config, const std::string& key, int64_t min, int64_t max,
                      const std::string& where, std::optional<int64_t> fallback) {
  const auto n = hf_config_value(config, key, where);
  const std::string expected = cat("expected an integer in [", min, ", ", max, "]");
  if (fallback && (!n || json::is_null(*n))) return *fallback;
  if (!n) fail(where, ": ", key, " is missing (", expected, ")");
  const auto v = json::as_uint(*n);
  if (!v || *v > uint64_t(max) || int64_t(*v) < min) fail(where, ": ", key, " is ", json::describe(*n), ", ", expected);
  return int64_t(*v);
}

double hf_config_number(const YAML::Node& config, const std::string& key, double min_exclusive, double max,
                        double fallback, const std::string& where) {
  const auto n = hf_config_value(config, key, where);
  if (!n) return fallback;
  const auto v = json::as_number(*n);
  if (!v || !(*v > min_exclusive && *v <= max))
    fail(where, ": ", key, " is ", json::describe(*n), ", expected a number in (", json::number(min_exclusive), ", ",
         json::number(max), "]");
  return *v;
}

bool hf_config_bool(const YAML::Node& config, const std::string& key, bool fallback, const std::string& where) {
  const auto n = hf_config_value(config, key, where);
  if (!n) return fallback;
  const auto v = json::as_bool(*n);
  if (!v) fail(where, ": ", key, " is ", json::describe(*n), ", expected true or false");
  return *v;
}

std::string hf_number(double x) {
  if (x == std::floor(x) && std::fabs(x) < 1e15) return cat(int64_t(x), ".0");
  return json::number(x);
}

void hf_config_require(const YAML::Node& config, const std::string& key, const std::vector<std::string>& allowed,
                       const std::string& what, const std::string& where) {
  const auto n = hf_config_value(config, key, where);
  if (!n) return;
  const std::string value = json::describe(*n);
  for (const std::string& a : allowed)
    if (value == a) return;
  std::string expected;
  for (const std::string& a : allowed) expected += (expected.empty() ? "" : " or ") + a;
  fail(where, ": ", key, " is ", value, ", but ", what, " (expected ", expected, ")");
}

}  // namespace pptrain
