#include "pipeline/transform.h"

#include "core/error.h"
#include "pipeline/lower.h"
#include "pipeline/validate.h"

namespace pptrain::pipeline {

BackwardForm parse_backward_form(const std::string& text) {
  if (text == "as-is") return BackwardForm::AsGenerated;
  if (text == "split") return BackwardForm::Split;
  if (text == "merged") return BackwardForm::Merged;
  fail("backward form '", text, "' is not one of: as-is, split, merged");
}

const char* backward_form_name(BackwardForm form) {
  switch (form) {
    case BackwardForm::Split: return "split";
    case BackwardForm::Merged: return "merged";
    default: return "as-is";
  }
}

Schedule split_backward(const Schedule& schedule) {
  Schedule out = schedule;
  for (int r = 0; r < int(schedule.program.size()); ++r) {
    const auto& in = schedule.program[r];
    auto& actions = out.program[r];
    actions.clear();
    for (size_t i = 0; i < in.size(); ++i) {
      const Action& a = in[i];
      if (a.op != Op::B) {
        actions.push_back(a);
        continue;
      }
      actions.push_back({Op::I, a.stage, a.microbatch});
      // Lowered: the communication after the B up to its own SEND_B (receives lowering posted
      // there) goes before the W with it.
      size_t send = i + 1;
      while (send < in.size() && is_communication(in[send].op) && in[send] != Action{Op::SEND_B, a.stage, a.microbatch})
        ++send;
      if (send < in.size() && in[send] == Action{Op::SEND_B, a.stage, a.microbatch})
        while (i < send) actions.push_back(in[++i]);
      actions.push_back({Op::W, a.stage, a.microbatch});
    }
  }
  return out;
}

Schedule runtime_form(const Schedule& schedule) {
  const Schedule lowered = has_communication(schedule.program) ? schedule : lower(schedule);
  Schedule run = split_backward(lowered);  // each SEND_B that followed its B now precedes the W
  // Only a W moved, past communication: each rank's sends and receives keep their order, so
  // the lowered program's promise (it finishes even if every send blocks until its receive
  // is posted) still holds; checked all the same.
  validate(run, ValidateOptions{0, /*blocking_sends=*/true});
  return run;
}

Schedule merge_backward(const Schedule& schedule) {
  Schedule out = schedule;
  for (int r = 0; r < int(schedule.program.size()); ++r) {
    const auto& in = schedule.program[r];
    auto& actions = out.program[r];
    actions.clear();
    std::vector<bool> absorbed(in.size(), false);  // W's folded into an earlier B
    for (size_t i = 0; i < in.size(); ++i) {
      if (absorbed[i]) continue;
      const Action& a = in[i];
      if (a.op == Op::I) {
        size_t j = i + 1;
        while (j < in.size() && is_communication(in[j].op)) ++j;
        if (j < in.size() && in[j] == Action{Op::W, a.stage, a.microbatch}) {
          actions.push_back({Op::B, a.stage, a.microbatch});
          absorbed[j] = true;
          continue;
        }
      }
      actions.push_back(a);
    }
  }
  return out;
}

Schedule apply_backward_form(const Schedule& schedule, BackwardForm form) {
  if (form == BackwardForm::Split) return split_backward(schedule);
  if (form == BackwardForm::Merged) return merge_backward(schedule);
  return schedule;
}

Schedule compute_only(const Schedule& schedule) {
  Schedule out = schedule;
  for (auto& actions : out.program) std::erase_if(actions, [](const Action& a) {
    return is_communication(a.op);
  });
  return out;
}

}  // namespace pptrain::pipeline
