// Fuzz target: the safetensors reader (`pptrain import-hf`): header length, JSON header
// and its validation, and the reads it then allows. The input is written to a temporary
// file and opened; every input either gives tensors that lie inside the file, tile its
// data and read back, or is rejected with a pptrain::Error naming the file.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "fuzz/temp_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static pptrain::fuzz::TempFile file(".safetensors");
  const std::string& path = file.write(data, size);
  try {
    const pptrain::SafetensorsFile f(path);
    uint64_t covered = 0;
    for (const pptrain::StTensor& t : f.tensors()) {
      if (t.offset > size || t.bytes > size - t.offset) {
        std::fprintf(stderr, "%s: bytes [%llu, +%llu) outside the %zu-byte file\n", t.name.c_str(),
                     (unsigned long long)t.offset, (unsigned long long)t.bytes, size);
        std::abort();
      }
      covered += t.bytes;
      if (!pptrain::st_dtype_readable(t.dtype)) continue;
      std::vector<float> values(size_t(t.numel));
      f.read(t, values.data());
    }
    if (covered > size) {
      std::fprintf(stderr, "tensors cover %llu bytes of a %zu-byte file\n", (unsigned long long)covered, size);
      std::abort();
    }
  } catch (const pptrain::Error&) {
  }
  return 0;
}
