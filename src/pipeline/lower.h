// Lowering: makes every cross-rank edge of a compute program explicit.
#pragma once
#include "pipeline/ir.h"

namespace pptrain::pipeline {

// Returns `compute_only` with SEND_F/RECV_F/SEND_B/RECV_B added for every edge between
// stages on different ranks (none between stages on the same rank). The program is played
// with unit costs (F = I = W = 1, B = 2); when an action that feeds another rank finishes,
// its SEND goes into the sender's list (right after it, or after receives posted at that
// same moment) and the matching RECV into the receiver's list at that moment, i.e. as
// early as the data exists, so the runtime can post it ahead of the compute that waits for
// it. Every SEND and its RECV thus sit at the same point of one global order in which each
// compute action comes after its inputs exist, so the program finishes even when every
// send blocks until its receive is posted.
// A compute program that cannot finish is lowered naively (RECV right before the consumer)
// and left for validate() to report. Throws Error if the program already has SEND/RECV.
Schedule lower(const Schedule& compute_only);

}  // namespace pptrain::pipeline
