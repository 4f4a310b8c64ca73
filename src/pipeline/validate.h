// The validator: every generated or loaded program passes here before anything runs it.
// A rejection is one line naming the rank, the position in its list and the action.
#pragma once
#include <vector>

#include "pipeline/ir.h"

namespace pptrain::pipeline {

struct ValidateOptions {
  // Peak activations in flight allowed on any rank, in microbatches of a rank's share of
  // the model (a stage of a rank holding v stages counts 1/v); 0 = no limit.
  double max_in_flight = 0;
  // Also require the program to finish when every SEND waits until its RECV is posted.
  bool blocking_sends = false;
};

// Checks, in this order, and throws pptrain::Error at the first violation:
//  1. shape: pp rank lists; every action's stage and microbatch exist and the stage lives
//     on that rank; a SEND/RECV only where an edge crosses ranks;
//  2. no action appears twice;
//  3. each (stage, microbatch) has one F and either one B or one I and one W;
//  4. order on each rank: W after its I; every action after its same-rank dependencies;
//     with communication, a RECV before its consumer and a SEND after its producer;
//  5. with communication, every SEND has its RECV and every RECV its SEND;
//  6. no deadlock: the program is played with blocking receives (compute programs: an
//     action waits for its inputs on other ranks) and every rank reaches its end;
//  7. peak activations in flight (F done, I or B not yet) within opts.max_in_flight.
// Works on compute programs (cross-rank edges implicit) and on lowered ones (any SEND or
// RECV present: then every cross-rank edge must be explicit).
void validate(const Schedule& schedule, const ValidateOptions& opts = {});

// Peak microbatches in flight per rank, in the units of ValidateOptions::max_in_flight.
std::vector<double> peak_in_flight(const Schedule& schedule);

}  // namespace pptrain::pipeline
