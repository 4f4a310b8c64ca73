// Fuzz target: the token shard reader (llm.c format). The input is written to a temporary
// file and opened as a shard with a vocabulary of 256 (so token checks are exercised);
// what opens is scanned whole, then read back whole. Every input either reads or is rejected
// with a pptrain::Error naming the file.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "data/token_shard.h"
#include "fuzz/temp_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static pptrain::fuzz::TempFile file(".bin");
  const std::string& path = file.write(data, size);
  try {
    pptrain::data::TokenShard shard(path, 256);
    shard.check_all_tokens();
    std::vector<uint16_t> tokens(shard.num_tokens());
    shard.read(0, tokens.size(), tokens.data());
    for (uint16_t t : tokens)
      if (t >= 256) {
        std::fprintf(stderr, "token %u passed the vocabulary check\n", unsigned(t));
        std::abort();
      }
    // Reads past the end are refused, never performed.
    shard.read(shard.num_tokens(), 1, tokens.data());
    std::abort();
  } catch (const pptrain::Error&) {
  }
  return 0;
}
