#include "pipeline/csv.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace pptrain::pipeline {

std::string program_to_csv(const Program& program) {
  std::string text;
  for (const auto& actions : program) {
    for (size_t i = 0; i < actions.size(); ++i) {
      if (i) text += ',';
      text += to_string(actions[i]);
    }
    text += '\n';
  }
  return text;
}

Program parse_program_csv(const std::string& text, const std::string& source) {
  Program program;
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
        actions.push_back(parse_action(cell));
      } catch (const Error& e) {
        fail(source, ":", line_no, ": column ", column, ": ", e.what());
      }
    }
    program.push_back(std::move(actions));
  }
  return program;
}

void save_schedule_csv(const Schedule& schedule, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  out << program_to_csv(schedule.program);
  if (!out) fail("schedule file '", path, "': cannot write");
}

Schedule load_schedule_csv(const std::string& path, int pp, int microbatches,
                           int stages_per_rank, Placement placement) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("schedule file '", path, "': cannot open");
  std::stringstream text;
  text << in.rdbuf();
  Schedule s;
  s.name = "file:" + path;
  s.pp = pp;
  s.microbatches = microbatches;
  s.stages_per_rank = stages_per_rank;
  s.placement = placement;
  s.program = parse_program_csv(text.str(), path);
  if (int(s.program.size()) != pp)
    fail(path, ": ", s.program.size(), " rows of actions, expected one per pipeline rank (pp=", pp,
         ")");
  return s;
}

}  // namespace pptrain::pipeline
