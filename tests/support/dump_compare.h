// Comparisons of two runs' parameter dumps (train/param_dump.h) against bounds, as
// values a test can inspect: the suites assert that clean runs pass, and that the same
// comparison rejects a run with a planted fault (core/faults.h) by a clear margin.
#pragma once
#include <string>
#include <vector>

#include "support/tolerances.h"
#include "train/param_dump.h"

namespace pptrain::testing {

// One quantity compared: passes when diff ≤ bound.
struct Check {
  std::string what;  // e.g. "h.0.mlp.fc.weight gradient"
  double diff = 0, bound = 0;
  double ratio() const;  // diff / bound (0 when both are 0, +inf when only the bound is)
  bool passed() const { return diff <= bound; }
};

struct Verdict {
  std::vector<Check> checks;
  bool passed() const;
  Check worst() const;  // the largest diff / bound
  // The same among the checks with a tolerance (bound > 0), leaving out the exact ones
  // (coverage, copies on different ranks) whose ratio is 0 or infinite.
  Check worst_bounded() const;
  // "LABEL: WHAT differs by D (bound B)" per failed check, one per line.
  std::string failures(const std::string& label) const;
  // "worst diff/bound R: WHAT (D vs B)", and the worst bounded one when that differs
  std::string summary() const;
  void add(const Verdict& other) { checks.insert(checks.end(), other.checks.begin(), other.checks.end()); }
};

// Loss (relative), coverage, copies of one element on different ranks (bitwise: every
// rank of a group receives the same bits from an all-reduce, and replicated tensors are
// then updated by identical arithmetic), and per tensor max|Δgrad| / max|grad want|.
Verdict compare_gradients(const GlobalDump& got, const GlobalDump& want, const StepBounds& bounds);

// The values after one AdamW step that both runs took from the same state: every element
// within adamw_value_allowance (tolerances.h), with the gradient noise the gradient
// bound allows (`gradient_bound` · max |grad| of the tensor). Per tensor the element with
// the largest ratio is reported. 2-D tensors decay (train/adamw.h).
Verdict compare_adamw_values(const GlobalDump& got, const GlobalDump& want, const AdamWStep& step,
                             double gradient_bound);

// Bitwise equality of every value (and the loss): for what is deterministic by
// construction. diff is max |Δ|, the bound 0.
Verdict compare_exact(const GlobalDump& got, const GlobalDump& want);

}  // namespace pptrain::testing
