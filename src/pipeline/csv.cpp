#include "pipeline/csv.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/input_file.h"

namespace pptrain::pipeline {

std::string program_to_csv(const Program& program) {
  std::string text;
  for (const auto& actions : program) {
    // A rank with no actions is one quoted empty cell: an empty line would be skipped as
    // blank when read back, and the program would lose a rank.
    if (actions.empty()) text += "\"\"";
    for (size_t i = 0; i < actions.size(); ++i) {
      if (i) text += ',';
      text += to_string(actions[i]);
    }
    text += '\n';
  }
  return text;
}

namespace {

// torch.distributed.pipelining actions that are not compute and have no counterpart here:
// FSDP's UNSHARD/RESHARD, the data-parallel REDUCE_GRAD, and waits on communication. The
// microbatch number is optional for them ("1UNSHARD", "0REDUCE_GRAD").
bool is_pytorch_only_action(const std::string& cell) {
  size_t pos = cell.find_first_not_of("0123456789");
  if (pos == 0 || pos == std::string::npos) return false;
  size_t op_end = cell.find_first_of("0123456789", pos);
  const std::string op = cell.substr(pos, op_end == std::string::npos ? std::string::npos : op_end - pos);
  if (op_end != std::string::npos && cell.find_first_not_of("0123456789", op_end) != std::string::npos) return false;
  for (const char* name : {"UNSHARD", "RESHARD", "REDUCE_GRAD", "WAIT_SEND_F", "WAIT_SEND_B", "WAIT_RECV_F", "WAIT_RECV_B"})
    if (op == name) return true;
  return false;
}

std::string trimmed(const std::string& text) {
  size_t begin = text.find_first_not_of(" \t\r\n");
  size_t end = text.find_last_not_of(" \t\r\n");
  return begin == std::string::npos ? "" : text.substr(begin, end - begin + 1);
}

// Appends the actions of one cell: an action, a PyTorch-only action (counted, dropped), or
// PyTorch's "(0F3;1B2)OVERLAP_F_B", whose parts run in the order written.
void parse_cell(const std::string& raw, std::vector<Action>& actions, CsvNotes& notes) {
  const std::string cell = trimmed(raw);
  if (cell.starts_with("(")) {
    const size_t close = cell.find(')');
    if (close == std::string::npos || cell.substr(close + 1) != "OVERLAP_F_B")
      fail("action '", cell, "': expected (<action>;<action>...)OVERLAP_F_B");
    std::stringstream parts(cell.substr(1, close - 1));
    std::string part;
    int count = 0;
    while (std::getline(parts, part, ';')) {
      if (trimmed(part).empty()) continue;
      if (trimmed(part).starts_with("(")) fail("action '", cell, "': OVERLAP_F_B parts cannot nest");
      parse_cell(part, actions, notes);
      ++count;
    }
    if (count == 0) fail("action '", cell, "': OVERLAP_F_B with no actions");
    ++notes.split;
    return;
  }
  if (is_pytorch_only_action(cell)) {
    ++notes.ignored;
    return;
  }
  actions.push_back(parse_action(cell));
}

}  // namespace

Program parse_program_csv(const std::string& text, const std::string& source, CsvNotes* notes_out) {
  Program program;
  CsvNotes notes;
  std::istringstream lines(text);
  std::string line;
  for (int line_no = 1; std::getline(lines, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    std::vector<Action> actions;
    std::stringstream cells(line);
    std::string cell;
    for (int column = 1; std::getline(cells, cell, ','); ++column) {
      if (cell.find_first_not_of(" \t\"") == std::string::npos) continue;
      // Spreadsheet tools may quote cells.
      size_t q = cell.find('"');
      if (q != std::string::npos && cell.rfind('"') > q)
        cell = cell.substr(q + 1, cell.rfind('"') - q - 1);
      try {
        parse_cell(cell, actions, notes);
      } catch (const Error& e) {
        fail(source, ":", line_no, ": column ", column, ": ", e.what());
      }
    }
    program.push_back(std::move(actions));
  }
  // A PyTorch dump (it has actions only PyTorch runs): its sends and receives follow
  // PyTorch's own lowering, so they are dropped too and lowering re-derives them.
  if (notes.ignored > 0 || notes.split > 0) {
    for (auto& actions : program) {
      const size_t before = actions.size();
      std::erase_if(actions, [](const Action& a) { return is_communication(a.op); });
      notes.ignored += int(before - actions.size());
    }
  }
  if (notes_out) *notes_out = notes;
  return program;
}

std::string describe(const CsvNotes& notes) {
  if (notes.ignored == 0 && notes.split == 0) return "";
  return cat(notes.ignored, " non-compute action(s) ignored (UNSHARD, RESHARD, REDUCE_GRAD, WAIT_*, SEND_*, RECV_*: ",
             "communication is re-derived by lowering), ", notes.split, " OVERLAP_F_B split into its parts in order");
}

void save_schedule_csv(const Schedule& schedule, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  out << program_to_csv(schedule.program);
  if (!out) fail("schedule file '", path, "': cannot write");
}

Schedule load_schedule_csv(const std::string& path, int pp, int microbatches,
                           int stages_per_rank, Placement placement) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) fail("schedule file '", path, "': cannot open");
  // A regular file only: a FIFO would block, a directory read as nothing.
  const std::string text = read_small_file(path, "schedule file", kMaxScheduleCsvBytes);
  Schedule s;
  s.name = "file:" + path;
  s.pp = pp;
  s.microbatches = microbatches;
  s.stages_per_rank = stages_per_rank;
  s.placement = placement;
  CsvNotes notes;
  s.program = parse_program_csv(text, path, &notes);
  if (const std::string note = describe(notes); !note.empty()) s.note = path + ": " + note;
  if (int(s.program.size()) != pp)
    fail(path, ": ", s.program.size(), " rows of actions, expected one per pipeline rank (pp=", pp,
         ")");
  return s;
}

}  // namespace pptrain::pipeline
