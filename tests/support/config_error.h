// The message parse_config throws for `yaml` (read as the file exp.yaml) with `overrides`,
// or "" when it parses: how the config tests compare one-line errors whole.
#pragma once
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"

namespace pptrain::testing {

inline std::string config_error(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    parse_config(yaml, "exp.yaml", overrides);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace pptrain::testing
