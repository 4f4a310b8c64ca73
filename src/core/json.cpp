#include "core/json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace pptrain::json {

YAML::Node parse_object(const std::string& text, const std::string& where) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail(where, ":", e.mark.line + 1, ": invalid JSON (", e.msg, ")");
  }
  if (!root.IsMap()) fail(where, ": expected a JSON object, got ", describe(root));
  return root;
}

std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char ch : s.substr(0, 40)) out += ch < 0x20 || ch == 0x7f ? '?' : char(ch);
  return s.size() > 40 ? out + "..." : out;
}

std::string describe(const YAML::Node& n) {
  if (!n.IsDefined()) return "nothing";
  if (n.IsMap()) return "an object";
  if (n.IsSequence()) return "an array";
  if (n.IsNull()) return "null";
  if (is_string(n)) return cat('"', printable(n.Scalar()), '"');
  return printable(n.Scalar());
}

bool is_string(const YAML::Node& n) { return n.IsScalar() && n.Tag() == "!"; }

bool is_null(const YAML::Node& n) { return n.IsNull(); }

std::optional<uint64_t> as_uint(const YAML::Node& n) {
  if (!n.IsScalar() || is_string(n)) return std::nullopt;
  const std::string& s = n.Scalar();
  if (s.empty() || s.size() > 20) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    if (__builtin_mul_overflow(v, uint64_t(10), &v) || __builtin_add_overflow(v, uint64_t(c - '0'), &v))
      return std::nullopt;
  }
  return v;
}

std::optional<double> as_number(const YAML::Node& n) {
  if (!n.IsScalar() || is_string(n)) return std::nullopt;
  const std::string& s = n.Scalar();
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const double x = std::strtod(s.c_str(), &end);
  // strtod also reads "inf", "nan" and hexadecimal, which JSON has not: require finite.
  if (end != s.c_str() + s.size() || !std::isfinite(x)) return std::nullopt;
  return x;
}

std::optional<bool> as_bool(const YAML::Node& n) {
  if (!n.IsScalar() || is_string(n)) return std::nullopt;
  if (n.Scalar() == "true") return true;
  if (n.Scalar() == "false") return false;
  return std::nullopt;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += char(ch);
    } else if (ch < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += char(ch);
    }
  }
  return out + "\"";
}

std::string number(double x) {
  char buf[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  return buf;
}

}  // namespace pptrain::json
