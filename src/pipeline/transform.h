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
// SEND_B that follows the B, so the gradient leaves as early as before. Always valid.
Schedule split_backward(const Schedule& schedule);

// I(s, mb) whose next compute action on the rank is W(s, mb) -> B(s, mb) at the I's place
// (SEND/RECV between them stay after it). Pairs with other work between them stay split:
// merging those would move work across it. Always valid.
Schedule merge_backward(const Schedule& schedule);

Schedule apply_backward_form(const Schedule& schedule, BackwardForm form);

// The compute actions only (SEND/RECV dropped).
Schedule compute_only(const Schedule& schedule);

}  // namespace pptrain::pipeline
