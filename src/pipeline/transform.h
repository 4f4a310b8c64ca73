// Rewrites between the two forms of a backward: one B, or an I followed later by a W.
#pragma once
#include <string>

#include "pipeline/ir.h"

namespace pptrain::pipeline {

enum class BackwardForm {
  AsGenerated,  // keep what the generator or file says
  Split,        // every B becomes I then W
  Merged,       // every I directly followed by its own W becomes B
};
BackwardForm parse_backward_form(const std::string& text);  // as-is | split | merged
const char* backward_form_name(BackwardForm form);

// B(s, mb) -> I(s, mb), W(s, mb) in its place. In a lowered program the W goes after the
// B's own SEND_B when only communication lies between them (and after that communication),
// so the gradient leaves before W instead of after it.
Schedule split_backward(const Schedule& schedule);

// The form `pptrain train` runs a schedule in, and the planner plans it in: lowered (if it
// is not yet), then split_backward. A B's input gradient is ready after its I; the rank
// before waits for it, not for the weight gradient, so the SEND_B that lowering put after the
// B goes between its I and W. Nothing else moves (the receives stay where lowering put them),
// so no action starts later; the compute and the peak memory are the same. Measured: pp 2
// 1F1B, 8 microbatches, on a 2-core Zen 4 VM, 512.9 -> 489.0 ms a step (docs/PARALLELISM.md).
// Each rank's communication keeps its order, so the program still finishes with blocking sends.
Schedule runtime_form(const Schedule& schedule);

// I(s, mb) whose next compute action on the rank is W(s, mb) -> B(s, mb) at the I's place
// (SEND/RECV between them stay after it). Pairs with other work between them stay split:
// merging those would move work across it. Always valid.
Schedule merge_backward(const Schedule& schedule);

Schedule apply_backward_form(const Schedule& schedule, BackwardForm form);

// The compute actions only (SEND/RECV dropped).
Schedule compute_only(const Schedule& schedule);

}  // namespace pptrain::pipeline
