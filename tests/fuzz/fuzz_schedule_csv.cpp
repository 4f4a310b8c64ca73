// Fuzz target: the CSV program loader (PyTorch's action notation, with its non-compute
// actions and OVERLAP_F_B cells), then the validator and lowering on what parses. Every
// input either gives a program or a pptrain::Error; a program the parser wrote back as
// CSV must parse to itself.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "pipeline/csv.h"
#include "pipeline/registry.h"

using namespace pptrain::pipeline;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Program program;
  CsvNotes notes;
  try {
    program = parse_program_csv(text, "fuzz.csv", &notes);
  } catch (const pptrain::Error&) {
    return 0;
  }
  if (parse_program_csv(program_to_csv(program), "written.csv") != program) {
    std::fprintf(stderr, "CSV round trip changed the program\n");
    std::abort();
  }
  // As `pptrain schedule --load` would run it: the shape from the program itself.
  if (program.empty() || program.size() > 64) return 0;
  int last_stage = 0, last_microbatch = 0;
  for (const auto& actions : program)
    for (const Action& a : actions) {
      last_stage = std::max(last_stage, a.stage);
      last_microbatch = std::max(last_microbatch, a.microbatch);
    }
  const int pp = int(program.size());
  Schedule s;
  s.name = "fuzz";
  s.pp = pp;
  s.microbatches = last_microbatch + 1;
  s.stages_per_rank = last_stage / pp + 1;
  s.program = program;
  try {
    check_size("fuzz", pp, s.stages_per_rank, s.microbatches);
    s.placement = infer_placement(s.program, pp, s.stages_per_rank);
    prepare_schedule(s);
  } catch (const pptrain::Error&) {
  }
  return 0;
}
