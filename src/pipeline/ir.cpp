#include "pipeline/ir.h"

#include <cctype>
#include <climits>
#include <cstdio>

#include "core/error.h"

namespace pptrain::pipeline {

int rank_of_stage(Placement placement, int stage, int pp) {
  if (placement == Placement::Loop) return stage % pp;
  return stage < pp ? stage : 2 * pp - 1 - stage;
}

std::vector<int> stages_of_rank(Placement placement, int rank, int pp, int stages_per_rank) {
  std::vector<int> stages;
  if (placement == Placement::Loop) {
    for (int chunk = 0; chunk < stages_per_rank; ++chunk) stages.push_back(chunk * pp + rank);
  } else {
    stages = {rank, 2 * pp - 1 - rank};
  }
  return stages;
}

bool is_compute(Op op) { return op == Op::F || op == Op::B || op == Op::I || op == Op::W; }
bool is_communication(Op op) { return !is_compute(op); }

const char* op_name(Op op) {
  switch (op) {
    case Op::F: return "F";
    case Op::B: return "B";
    case Op::I: return "I";
    case Op::W: return "W";
    case Op::SEND_F: return "SEND_F";
    case Op::RECV_F: return "RECV_F";
    case Op::SEND_B: return "SEND_B";
    case Op::RECV_B: return "RECV_B";
  }
  return "?";
}

const char* placement_name(Placement placement) {
  return placement == Placement::Loop ? "loop" : "V";
}

Placement parse_placement(const std::string& text) {
  std::string lower;
  for (char c : text) lower += char(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "loop") return Placement::Loop;
  if (lower == "v") return Placement::V;
  fail("placement '", text, "' is not one of: loop, v");
}

std::string to_string(const Action& action) {
  return cat(action.stage, op_name(action.op), action.microbatch);
}

namespace {
// Reads the decimal number at text[pos..]; returns -1 when there is none or it overflows.
int read_number(const std::string& text, size_t& pos) {
  size_t start = pos;
  long long value = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
    value = value * 10 + (text[pos] - '0');
    if (value > INT_MAX) return -1;
    ++pos;
  }
  return pos == start ? -1 : int(value);
}
}  // namespace

Action parse_action(const std::string& text) {
  size_t begin = text.find_first_not_of(" \t\r\n");
  size_t end = text.find_last_not_of(" \t\r\n");
  std::string token = begin == std::string::npos ? "" : text.substr(begin, end - begin + 1);
  auto bad = [&](const char* why) {
    fail("action '", token, "': ", why, " (expected <stage><OP><microbatch>, e.g. 2F0, 1SEND_B3)");
  };
  size_t pos = 0;
  int stage = read_number(token, pos);
  if (stage < 0) bad("no stage number in front");
  size_t op_start = pos;
  while (pos < token.size() && (std::isupper(static_cast<unsigned char>(token[pos])) || token[pos] == '_'))
    ++pos;
  std::string op_text = token.substr(op_start, pos - op_start);
  int microbatch = read_number(token, pos);
  if (op_text.empty()) bad("no operation");
  if (microbatch < 0) bad("no microbatch number at the end");
  if (pos != token.size()) bad("unexpected characters");
  for (Op op : {Op::F, Op::B, Op::I, Op::W, Op::SEND_F, Op::RECV_F, Op::SEND_B, Op::RECV_B})
    if (op_text == op_name(op)) return {op, stage, microbatch};
  bad("unknown operation (F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B)");
  return {};  // not reached
}

std::string format_number(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.4f", value);
  std::string text = buffer;
  while (text.size() > 1 && text.back() == '0') text.pop_back();
  if (text.back() == '.') text.pop_back();
  if (text == "-0") text = "0";
  return text;
}

bool has_communication(const Program& program) {
  for (const auto& actions : program)
    for (const Action& a : actions)
      if (is_communication(a.op)) return true;
  return false;
}

bool uses_split_backward(const Program& program) {
  for (const auto& actions : program)
    for (const Action& a : actions)
      if (a.op == Op::I || a.op == Op::W) return true;
  return false;
}

}  // namespace pptrain::pipeline
