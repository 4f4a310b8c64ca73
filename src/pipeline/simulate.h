// The simulator: plays a program against a cost model and reports the time line, the
// bubble and the activation memory. Same semantics as the runtime: a RECV posts the
// receive and costs no time; a compute action waits for its inputs; sends never block;
// communication overlaps compute.
#pragma once
#include <string>
#include <vector>

#include "pipeline/ir.h"

namespace pptrain::pipeline {

// Costs in arbitrary time units. forward, input_grad and weight_grad are per microbatch for
// a rank's share of the model (one stage when v = 1): a stage of a rank holding v stages
// costs 1/v of them, unless the per-stage lists are given ([num_stages], absolute). A full
// backward B costs input_grad + weight_grad.
struct CostModel {
  double forward = 1;      // T_F
  double input_grad = 1;   // T_I (dgrad)
  double weight_grad = 1;  // T_W (wgrad)
  double comm = 0;         // latency of one p2p message, from send (or posted receive) to arrival
  // Activation memory of one microbatch on a rank's share of the model, in the same
  // units as peak_activations: the part freed by I (or B) and the part kept until W (or B).
  double act_input = 1;
  double act_weight = 0;
  std::vector<double> stage_forward, stage_input_grad, stage_weight_grad;  // optional
};

// "f=1,i=1,w=0.5,comm=0.1,act_i=1,act_w=0"; unnamed keys keep their default. Throws Error
// naming the bad key or value.
CostModel parse_cost(const std::string& spec);
std::string to_string(const CostModel& cost);

struct TimedAction {
  Action action;
  double start;  // SEND/RECV: the moment it is issued (start == end)
  double end;
};

struct SimResult {
  double makespan = 0;                 // end of the last action (the first starts at 0)
  std::vector<double> busy;            // [pp] compute time
  std::vector<double> idle;            // [pp] makespan - busy
  std::vector<double> span_idle;       // [pp] idle between the rank's first and last compute
  std::vector<double> peak_activations;  // [pp] peak activation memory (CostModel units)
  double bubble_ratio = 0;             // 1 - sum(busy) / (pp * makespan)
  // 1 - sum(busy) / sum(spans): the bubble when steps run back to back with no
  // synchronization between them (what ZB-H2 and ZB-V call zero bubble).
  double span_bubble_ratio = 0;
  std::vector<std::vector<TimedAction>> timeline;  // [pp][position], lowered program order
};

// Lowers a compute program first (lower.h). Throws Error if the program cannot finish
// (validate() first to get a precise message) or the per-stage costs have the wrong size.
SimResult simulate(const Schedule& schedule, const CostModel& cost = {});

}  // namespace pptrain::pipeline
