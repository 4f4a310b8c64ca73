// Fuzz target: the llm.c model file reader (`pptrain import-llmc`). The input is written to
// a temporary file and read; every input either gives a model whose tensors have the
// sizes their shapes say, or is rejected with a pptrain::Error naming the file.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "checkpoint/llmc_model.h"
#include "core/error.h"
#include "fuzz/temp_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static pptrain::fuzz::TempFile file(".bin");
  const std::string& path = file.write(data, size);
  try {
    const pptrain::LlmcModel m = pptrain::read_llmc_model(path);
    for (const pptrain::NamedTensor& t : m.tensors) {
      size_t elements = 1;
      for (int64_t d : t.shape) elements *= size_t(d);
      if (elements != t.values.size()) {
        std::fprintf(stderr, "%s: shape and values disagree\n", t.name.c_str());
        std::abort();
      }
    }
  } catch (const pptrain::Error&) {
  }
  return 0;
}
