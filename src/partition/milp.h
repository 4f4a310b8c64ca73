// A small mixed-integer linear program, minimised by GLPK: the simplex method for the LP
// relaxation, branch and bound for the integer columns. Rows may be added between solves
// (cutting planes: the next solve starts from the last optimal basis) and, lazily, during
// the branch and bound. The stage partitioner states its problems with it; nothing else
// of GLPK is visible outside milp.cpp.
#pragma once
#include <functional>
#include <limits>
#include <memory>
#include <vector>

// GLPK's problem object (glpk.h), owned by Milp.
struct glp_prob;

namespace pptrain {

class Milp {
 public:
  static constexpr double kInfinity = std::numeric_limits<double>::infinity();

  struct Term {
    int column;
    double coef;
  };
  // lower <= sum of coef·column <= upper (±kInfinity for none). Terms name distinct columns.
  struct Row {
    std::vector<Term> terms;
    double lower, upper;
  };
  // Rows that a point of a branch's relaxation ([columns]) violates and every feasible
  // point satisfies; none when the point is acceptable.
  using LazyRows = std::function<std::vector<Row>(const std::vector<double>& point)>;

  Milp();
  ~Milp();
  Milp(const Milp&) = delete;
  Milp& operator=(const Milp&) = delete;

  // A variable with bounds (±kInfinity for none) and its coefficient in the objective;
  // returns its index (0, 1, ...).
  int add_column(double lower, double upper, bool integer, double objective);
  void add_row(const Row& row);
  int columns() const { return columns_; }

  // Minimises the objective with the integer columns taken as continuous (a lower bound of
  // the integer optimum). False when no point satisfies the rows and bounds.
  bool minimize_relaxation();
  // Minimises the objective with integer columns integral. `incumbent` (every column, or
  // empty) is a feasible point the search starts from: branches that cannot beat it are
  // cut at once. `lazy` is asked at every branch whose relaxation could beat the best
  // point so far, before that point may count; the rows it returns hold below that
  // branch (GLPK drops them on leaving it, and after the search). False when infeasible.
  bool minimize(const std::vector<double>& incumbent = {}, const LazyRows& lazy = nullptr);

  // The optimum of the last minimize_relaxation() or minimize(), whichever came last.
  double objective() const;
  double value(int column) const;

 private:
  struct Deleter {
    void operator()(glp_prob* p) const;
  };
  std::unique_ptr<glp_prob, Deleter> prob_;
  int columns_ = 0;
  bool integral_ = false;  // the last solve was minimize()
};

}  // namespace pptrain
