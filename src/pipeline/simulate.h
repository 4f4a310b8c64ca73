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
  // The part taken by I (or B) and kept until W (or B): what a block under recompute
  // re-creates at the start of I for W. At an I the rank holds it before the I frees
  // act_input (the recompute runs while the input is still held).
  double act_from_input = 0;
  std::vector<double> stage_forward, stage_input_grad, stage_weight_grad;  // optional
  // Optional, given together, [num_stages], absolute: one microbatch's activation memory of
  // each stage (e.g. bytes), freed by I and kept until W, replacing act_input / act_weight.
  // peak_activations is then in these units (not divided by stages per rank).
  std::vector<double> stage_act_input, stage_act_weight;
  // Optional, [num_stages], absolute (with the two lists above): replaces act_from_input.
  std::vector<double> stage_act_from_input;
  // Optional, [num_stages]: memory a stage holds whatever the microbatches (parameters,
  // gradients, optimizer state); SimResult::peak_memory adds those of the rank's stages.
  std::vector<double> stage_static_memory;
};

// "f=1,i=1,w=0.5,comm=0.1,act_i=1,act_w=0,act_from_i=0"; unnamed keys keep their default. Throws Error
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
  std::vector<double> peak_memory;       // [pp] peak_activations + the rank's static memory
  double bubble_ratio = 0;             // 1 - sum(busy) / (pp * makespan)
  // 1 - sum(busy) / sum(spans): the bubble when steps run back to back with no
  // synchronization between them (what ZB-H2 and ZB-V call zero bubble).
  double span_bubble_ratio = 0;
  std::vector<std::vector<TimedAction>> timeline;  // [pp][position], lowered program order
};

// Lowers a compute program first (lower.h). Throws Error if the program cannot finish
// (validate() first to get a precise message) or the per-stage costs have the wrong size.
SimResult simulate(const Schedule& schedule, const CostModel& cost = {});

// ---- The simulator as formulas, for planners that optimise over the costs (partition/) ----
// For a fixed program, what simulate() computes depends on the costs in a fixed pattern:
// every compute action starts at the latest of a few earlier actions' ends (plus comm for
// a message), so the makespan is the longest path through a graph fixed by the program;
// and a rank's activation memory peaks right after one of its F's, where the microbatches
// still holding activations are fixed by the order alone.

// One compute action: it starts no earlier than the end of each `after` entry, plus the
// comm latency where that entry is the sender's or receiver's side of the message carrying
// its input (the time the message was sent, and the time its receive was posted).
struct TimingNode {
  struct After {
    int node;      // index into TimingGraph::nodes, or -1: the start of the step (time 0)
    bool message;  // + CostModel::comm
  };
  Action action;
  int rank;
  std::vector<After> after;  // the rank's previous compute action first, if any
};

struct TimingGraph {
  std::vector<TimingNode> nodes;  // every compute action, each after the nodes it waits for
  std::vector<int> last_of_rank;  // [pp] the node ending each rank's work, -1 for none
};

// Lowers a compute program first, as simulate(). Throws Error where simulate() does.
TimingGraph timing_graph(const Schedule& schedule);

// The start of every node ([nodes]) given each node's duration ([nodes]): simulate()'s
// time line of the same program (the makespan: the latest end of a last_of_rank node).
std::vector<double> earliest_starts(const TimingGraph& graph, const std::vector<double>& durations,
                                    double comm);

// A moment right after an F, or inside an I or B once it took its act_from_input, where
// rank `rank`'s activation memory may peak: per stage, the microbatches whose activations
// freed by I are still held, those taken by F and kept until W, and those taken by I and
// kept until W.
struct MemoryPoint {
  int rank;
  std::vector<int> input_live, weight_live, from_input_live;  // [num_stages]
};

// Every such moment of the program (lowered or not: only the compute order matters). The
// peak of a rank is the largest sum over its points of input_live·act_input +
// weight_live·act_weight + from_input_live·act_from_input (per stage), as simulate()
// computes it.
std::vector<MemoryPoint> memory_points(const Schedule& schedule);

}  // namespace pptrain::pipeline
