// JSON files from outside (Hugging Face config.json, safetensors headers and shard
// indexes), read through yaml-cpp: JSON is YAML 1.2's flow syntax, so the one YAML
// library the project depends on parses it. These helpers add what JSON's types need on
// top of yaml-cpp's untyped scalars (a quoted "1" is a string, a plain 1 a number) and
// write JSON text back. yaml-cpp bounds the nesting depth itself (YAML::DeepRecursion);
// callers bound the text's size before parsing.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <string>

namespace pptrain::json {

// Parses `text`, which must hold one JSON object. Throws pptrain::Error
// "WHERE: invalid JSON (...)" or "WHERE: expected a JSON object, got ...".
YAML::Node parse_object(const std::string& text, const std::string& where);

// How a value appears in one-line messages: a string in quotes, a number or word as
// written (control characters as '?', at most 40 characters), "an object", "an array".
std::string describe(const YAML::Node& n);
// Text from a file as it may appear in a message (control characters as '?', cut at 40).
std::string printable(const std::string& s);

bool is_string(const YAML::Node& n);  // a quoted scalar
bool is_null(const YAML::Node& n);    // null (or ~, YAML's spelling)
// A plain scalar of decimal digits only (no sign, exponent or fraction) that fits in 64
// bits; nullopt for anything else.
std::optional<uint64_t> as_uint(const YAML::Node& n);
// A plain scalar that parses as a finite number; nullopt for anything else.
std::optional<double> as_number(const YAML::Node& n);
// true / false; nullopt for anything else.
std::optional<bool> as_bool(const YAML::Node& n);

// `s` as a JSON string literal, quoted and escaped.
std::string quote(const std::string& s);
// The shortest "%g" text that reads back as the same double (1e-05, not 1.0000000000000001e-05).
std::string number(double x);

}  // namespace pptrain::json
