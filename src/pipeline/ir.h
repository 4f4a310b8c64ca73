// The pipeline action IR: what each pipeline rank does in one optimizer step, as a list of
// actions. The runtime executes these lists as they are; generators, the validator and the
// simulator all speak this IR, so it is the single source of truth for a schedule.
//
// Stages are global, 0 .. pp*v-1 (v = stages per rank): stage 0 holds the embedding, the
// last stage the head and loss. Actions, in PyTorch's notation <stage><OP><microbatch>:
//
//   F(s, mb)       forward of stage s on microbatch mb
//   B(s, mb)       full backward (dgrad then wgrad) of stage s
//   I(s, mb)       input gradient only (dgrad); keeps what W needs
//   W(s, mb)       weight gradient only (wgrad); frees the microbatch's activations
//   SEND_F(s, mb)  send stage s's output to the rank of stage s+1
//   RECV_F(s, mb)  receive the activations stage s needs as input (from the rank of stage s-1)
//   SEND_B(s, mb)  send stage s's input gradient to the rank of stage s-1
//   RECV_B(s, mb)  receive the output gradient of stage s (from the rank of stage s+1)
//
// So the message carrying stage s's output is the pair SEND_F(s) -> RECV_F(s+1), and the one
// carrying the gradient of that output is SEND_B(s+1) -> RECV_B(s). Stages on the same rank
// hand tensors over locally and have no SEND/RECV. A RECV means "post the receive": the
// executor posts it when it reaches it and waits only when the compute action that consumes
// the tensor runs; sends never block it.
#pragma once
#include <string>
#include <vector>

namespace pptrain::pipeline {

enum class Op { F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B };

struct Action {
  Op op;
  int stage;
  int microbatch;
  bool operator==(const Action&) const = default;
};

using Program = std::vector<std::vector<Action>>;  // [pp rank] -> actions in execution order

// Where stages live. Loop: stage s on rank s mod p (GPipe, 1F1B, interleaved, looped BFS).
// V: stage s on rank s for s < p, else 2p-1-s (ZB-V, DualPipeV); needs 2 stages per rank.
enum class Placement { Loop, V };

int rank_of_stage(Placement placement, int stage, int pp);
// The global stages rank `rank` holds, in increasing order ([v]).
std::vector<int> stages_of_rank(Placement placement, int rank, int pp, int stages_per_rank);

struct Schedule {
  std::string name;
  int pp = 1;
  int microbatches = 1;
  int stages_per_rank = 1;
  Placement placement = Placement::Loop;
  Program program;  // [pp]
  std::string note;  // what loading a file changed (pipeline/csv.h), "" when nothing

  int num_stages() const { return pp * stages_per_rank; }
  int rank_of(int stage) const { return rank_of_stage(placement, stage, pp); }
};

bool is_compute(Op op);        // F, B, I, W
bool is_communication(Op op);  // SEND_*, RECV_*
const char* op_name(Op op);    // "F", "SEND_F", ...
const char* placement_name(Placement placement);  // "loop" | "V"
Placement parse_placement(const std::string& text);  // "loop" | "v" (any case); throws Error

std::string to_string(const Action& action);  // "2F0", "1SEND_B3"
// Parses "<stage><OP><microbatch>" (surrounding blanks ignored); throws Error naming the token.
Action parse_action(const std::string& text);

// A number for messages and reports: up to 4 decimals, trailing zeros dropped ("2.5", "3").
std::string format_number(double value);

// True when any rank's list holds a SEND/RECV (the program has been lowered or was loaded so).
bool has_communication(const Program& program);
// True when the program uses split backward (I and W) anywhere.
bool uses_split_backward(const Program& program);

}  // namespace pptrain::pipeline
