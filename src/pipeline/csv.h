// Programs as CSV, as torch.distributed.pipelining writes them (_dump_csv/_load_csv): one
// row per pipeline rank, one action per cell in <stage><OP><microbatch> notation
// ("0F0,0F1,1SEND_F0,..."). Empty cells are skipped; so are blank lines and lines that
// start with '#'.
//
// PyTorch's own dumps also hold actions that are not compute and have no counterpart here
// (UNSHARD, RESHARD, REDUCE_GRAD, WAIT_*; microbatch optional) and fused cells
// "(0F3;1B2)OVERLAP_F_B". Such a file loads with those actions and its SEND/RECV ignored
// (lowering re-derives the communication) and each OVERLAP_F_B split into its actions in
// the order written; CsvNotes counts both for the one note line the loader prints.
#pragma once
#include <cstdint>
#include <string>

#include "pipeline/ir.h"

namespace pptrain::pipeline {

inline constexpr uint64_t kMaxScheduleCsvBytes = uint64_t(1) << 28;  // 256 MiB

struct CsvNotes {
  int ignored = 0;  // non-compute actions dropped
  int split = 0;    // OVERLAP_F_B cells split into their actions
};
// "N non-compute action(s) ignored (...), M OVERLAP_F_B split ...", or "" when none.
std::string describe(const CsvNotes& notes);

std::string program_to_csv(const Program& program);
// Throws Error naming `source`, the line and the bad token.
Program parse_program_csv(const std::string& text, const std::string& source, CsvNotes* notes = nullptr);

void save_schedule_csv(const Schedule& schedule, const std::string& path);  // throws Error
// Reads and parses `path` (a regular file); the row count must be pp; Schedule::note holds
// what loading ignored or split ("" when nothing). The program is not validated here:
// pass it to validate() (prepare_schedule() does both). Throws Error (file, line, token).
Schedule load_schedule_csv(const std::string& path, int pp, int microbatches,
                           int stages_per_rank, Placement placement);

}  // namespace pptrain::pipeline
