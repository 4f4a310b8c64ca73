// Fuzz target: the config loader with overrides. Input: YAML text, then (after the first
// NUL byte, if any) override lines "section.key=value", one per line. Every input either
// parses or is rejected with a pptrain::Error; anything else (a crash, a sanitizer report,
// another exception) is a finding. What parses must survive its own round trip: the
// written config parses back to the same text.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string yaml = input.substr(0, nul);
  std::vector<std::string> overrides;
  if (nul != std::string::npos) {
    std::istringstream lines(input.substr(nul + 1));
    for (std::string line; std::getline(lines, line);) overrides.push_back(line);
  }
  pptrain::Config config;
  try {
    config = pptrain::parse_config(yaml, "fuzz.yaml", overrides);
  } catch (const pptrain::Error&) {
    return 0;  // rejected with a message: the expected outcome for bad input
  }
  const std::string written = pptrain::to_yaml(config);
  const std::string again = pptrain::to_yaml(pptrain::parse_config(written, "written.yaml"));
  if (again != written) {
    std::fprintf(stderr, "round trip changed the config:\n%s\n---\n%s\n", written.c_str(), again.c_str());
    std::abort();
  }
  return 0;
}
