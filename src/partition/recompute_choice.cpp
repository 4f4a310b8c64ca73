#include "partition/recompute_choice.h"

#include <algorithm>

#include "core/error.h"
#include "pipeline/simulate.h"

namespace pptrain {

std::vector<int> stages_by_microbatches_in_flight(const pipeline::Schedule& program) {
  const int stages = program.num_stages();
  std::vector<int> most(size_t(stages), 0);
  for (const pipeline::MemoryPoint& p : pipeline::memory_points(program))
    for (int s = 0; s < stages; ++s) most[size_t(s)] = std::max(most[size_t(s)], p.weight_live[size_t(s)]);
  std::vector<int> order(static_cast<size_t>(stages));
  for (int s = 0; s < stages; ++s) order[size_t(s)] = s;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return most[size_t(a)] > most[size_t(b)]; });
  return order;
}

RecomputePlan choose_recompute(const PlanForRecompute& plan, const std::vector<int>& order, bool naive_attention,
                               double memory_limit_bytes) {
  StageRecompute choice(order.size(), "none");
  if (memory_limit_bytes <= 0) return plan(choice);
  try {
    return plan(choice);
  } catch (const Error&) {
    // Over the limit without recompute: recompute where it saves the most first.
  }
  const std::vector<std::string> modes =
      naive_attention ? std::vector<std::string>{"attention", "full"} : std::vector<std::string>{"full"};
  std::string last_error;
  for (int stage : order)
    for (const std::string& mode : modes) {
      choice[size_t(stage)] = mode;
      try {
        return plan(choice);
      } catch (const Error& e) {
        last_error = e.what();  // every stage full at the end: the smallest limit of all
      }
    }
  fail("training.recompute: even with every stage under full recompute, ", last_error);
}

RecomputePlan choose_recompute(const CostProfile& prof, const pipeline::Schedule& program, int n_layer,
                               double memory_limit_bytes) {
  const PlanForRecompute plan = [&](const StageRecompute& recompute) {
    return RecomputePlan{recompute, program,
                         partition_stages(prof, program, n_layer, memory_limit_bytes, recompute)};
  };
  return choose_recompute(plan, stages_by_microbatches_in_flight(program), prof.attention == "naive",
                          memory_limit_bytes);
}

bool any_recompute(const StageRecompute& recompute) {
  return std::any_of(recompute.begin(), recompute.end(), [](const std::string& m) { return m != "none"; });
}

std::string recompute_text(const StageRecompute& recompute) {
  std::string out = "[";
  for (size_t s = 0; s < recompute.size(); ++s) out += (s ? ", " : "") + recompute[s];
  return out + "]";
}

}  // namespace pptrain
