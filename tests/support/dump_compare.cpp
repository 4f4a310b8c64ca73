#include "support/dump_compare.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

namespace pptrain::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

// Structural problems (a tensor missing or not covered, copies disagreeing) fail with an
// infinite ratio; the tensors present in both are then compared by `each`.
template <typename Each>
Verdict compare_tensors(const GlobalDump& got, const GlobalDump& want, Each each) {
  Verdict v;
  v.checks.push_back({"copies of one element on different ranks", got.max_replica_diff, 0.0});
  if (got.tensors.size() != want.tensors.size())
    v.checks.push_back({"number of tensors (" + std::to_string(got.tensors.size()) + " vs " +
                        std::to_string(want.tensors.size()) + ")", kInf, 0.0});
  for (const auto& [name, w] : want.tensors) {
    auto it = got.tensors.find(name);
    if (it == got.tensors.end()) {
      v.checks.push_back({name + " missing", kInf, 0.0});
      continue;
    }
    const GlobalTensor& g = it->second;
    if (g.shape != w.shape) {
      v.checks.push_back({name + " shape", kInf, 0.0});
      continue;
    }
    bool covered = true;
    for (char c : g.covered) covered = covered && c;
    if (!covered) {
      v.checks.push_back({name + " not fully covered by the ranks", kInf, 0.0});
      continue;
    }
    each(name, g, w, v);
  }
  return v;
}

}  // namespace

double Check::ratio() const {
  if (diff == 0) return 0;
  return bound > 0 ? diff / bound : kInf;
}

bool Verdict::passed() const {
  for (const Check& c : checks)
    if (!c.passed()) return false;
  return true;
}

Check Verdict::worst() const {
  // Among exact checks that failed (ratio +inf) the one with the largest difference.
  auto worse = [](const Check& a, const Check& b) {
    return a.ratio() > b.ratio() || (a.ratio() == b.ratio() && a.diff > b.diff);
  };
  Check w{"(nothing compared)", 0, 0};
  for (const Check& c : checks)
    if (w.what == "(nothing compared)" || worse(c, w)) w = c;
  return w;
}

Check Verdict::worst_bounded() const {
  Verdict bounded;
  for (const Check& c : checks)
    if (c.bound > 0) bounded.checks.push_back(c);
  return bounded.worst();
}

std::string Verdict::failures(const std::string& label) const {
  std::ostringstream out;
  for (const Check& c : checks)
    if (!c.passed()) out << label << ": " << c.what << " differs by " << c.diff << " (bound " << c.bound << ")\n";
  return out.str();
}

std::string Verdict::summary() const {
  const Check w = worst(), b = worst_bounded();
  std::ostringstream out;
  out << "worst diff/bound " << w.ratio() << ": " << w.what << " (" << w.diff << " vs " << w.bound << ")";
  if (b.bound > 0 && b.what != w.what)
    out << "; worst with a tolerance " << b.ratio() << ": " << b.what << " (" << b.diff << " vs " << b.bound << ")";
  return out.str();
}

Verdict compare_gradients(const GlobalDump& got, const GlobalDump& want, const StepBounds& bounds) {
  Verdict v = compare_tensors(got, want, [&](const std::string& name, const GlobalTensor& g,
                                             const GlobalTensor& w, Verdict& out) {
    const double scale = max_abs(w.grad);
    double diff = 0;
    for (size_t i = 0; i < w.grad.size(); ++i) diff = std::max(diff, double(std::fabs(g.grad[i] - w.grad[i])));
    // A tensor whose reference gradient is all zero has nothing to compare against.
    out.checks.push_back({name + " gradient", diff, scale > 0 ? bounds.gradient * scale : 0.0});
  });
  v.checks.push_back({"loss", std::fabs(got.loss - want.loss), bounds.loss * std::fabs(want.loss)});
  return v;
}

Verdict compare_adamw_values(const GlobalDump& got, const GlobalDump& want, const AdamWStep& step,
                             double gradient_bound) {
  return compare_tensors(got, want, [&](const std::string& name, const GlobalTensor& g, const GlobalTensor& w,
                                        Verdict& out) {
    const double noise = gradient_bound * max_abs(w.grad);
    const bool decays = w.shape.size() == 2;
    Check worst{name + " value", 0, 0};
    for (size_t i = 0; i < w.value.size(); ++i) {
      Check c{"", std::fabs(double(g.value[i]) - double(w.value[i])),
              adamw_value_allowance(step, decays, w.grad[i], noise, w.value[i])};
      if (c.ratio() > worst.ratio() || i == 0) {
        worst.diff = c.diff;
        worst.bound = c.bound;
        worst.what = name + " value [" + std::to_string(i) + "]";
      }
    }
    out.checks.push_back(worst);
  });
}

Verdict compare_exact(const GlobalDump& got, const GlobalDump& want) {
  Verdict v = compare_tensors(got, want, [&](const std::string& name, const GlobalTensor& g, const GlobalTensor& w,
                                             Verdict& out) {
    double diff = 0;
    for (size_t i = 0; i < w.value.size(); ++i) {
      // Bitwise: -0 against +0 or a NaN pattern counts, as a changed bit would.
      if (std::memcmp(&g.value[i], &w.value[i], sizeof(float)) != 0) {
        const double d = std::fabs(double(g.value[i]) - double(w.value[i]));
        diff = std::max(diff, std::isnan(d) ? kInf : std::max(d, 1e-300));
      }
    }
    out.checks.push_back({name + " value", diff, 0.0});
  });
  v.checks.push_back({"loss", got.loss == want.loss ? 0.0 : std::fabs(got.loss - want.loss), 0.0});
  return v;
}

}  // namespace pptrain::testing
