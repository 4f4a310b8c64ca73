// Programs as CSV, as torch.distributed.pipelining writes them (_dump_csv/_load_csv): one
// row per pipeline rank, one action per cell in <stage><OP><microbatch> notation
// ("0F0,0F1,1SEND_F0,..."). Empty cells are skipped; so are blank lines and lines that
// start with '#'.
#pragma once
#include <string>

#include "pipeline/ir.h"

namespace pptrain::pipeline {

std::string program_to_csv(const Program& program);
// Throws Error naming `source`, the line and the bad token.
Program parse_program_csv(const std::string& text, const std::string& source);

void save_schedule_csv(const Schedule& schedule, const std::string& path);  // throws Error
// Reads and parses `path`; the row count must be pp. The program is not validated here:
// pass it to validate() (prepare_schedule() does both). Throws Error (file, line, token).
Schedule load_schedule_csv(const std::string& path, int pp, int microbatches,
                           int stages_per_rank, Placement placement);

}  // namespace pptrain::pipeline
