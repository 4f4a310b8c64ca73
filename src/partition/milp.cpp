#include "partition/milp.h"

#include <glpk.h>

#include <cmath>

#include "core/error.h"

namespace pptrain {

namespace {

// GLPK's bound kind for lower <= x <= upper.
int bound_kind(double lower, double upper) {
  const bool has_lower = std::isfinite(lower), has_upper = std::isfinite(upper);
  if (has_lower && has_upper) return lower == upper ? GLP_FX : GLP_DB;
  if (has_lower) return GLP_LO;
  return has_upper ? GLP_UP : GLP_FR;
}

double finite_or_zero(double x) { return std::isfinite(x) ? x : 0; }

void append_row(glp_prob* p, int columns, const Milp::Row& row) {
  PPTRAIN_CHECK(row.lower <= row.upper);
  const int i = glp_add_rows(p, 1);
  glp_set_row_bnds(p, i, bound_kind(row.lower, row.upper), finite_or_zero(row.lower), finite_or_zero(row.upper));
  std::vector<int> index{0};  // GLPK's arrays are 1-based: entry 0 is unused
  std::vector<double> coef{0};
  for (const Milp::Term& t : row.terms) {
    PPTRAIN_CHECK(t.column >= 0 && t.column < columns);
    if (t.coef == 0) continue;
    index.push_back(t.column + 1);
    coef.push_back(t.coef);
  }
  glp_set_mat_row(p, i, int(index.size()) - 1, index.data(), coef.data());
}

// What the branch and bound's callback serves: the incumbent, once, when it first asks
// for a heuristic solution (x is 1-based, as GLPK's columns), and the lazy rows.
struct Callback {
  int columns;
  std::vector<double> incumbent;
  bool given = false;
  const Milp::LazyRows* lazy;
};

void serve(glp_tree* tree, void* info) {
  Callback& cb = *static_cast<Callback*>(info);
  switch (glp_ios_reason(tree)) {
    case GLP_IHEUR:
      if (!cb.incumbent.empty() && !cb.given) {
        cb.given = true;
        glp_ios_heur_sol(tree, cb.incumbent.data());  // ignored if not better than the best so far
      }
      break;
    case GLP_IROWGEN:
      if (*cb.lazy) {
        glp_prob* p = glp_ios_get_prob(tree);  // the problem itself: GLPK's presolver is off
        std::vector<double> point(cb.columns);
        for (int j = 0; j < cb.columns; ++j) point[j] = glp_get_col_prim(p, j + 1);
        for (const Milp::Row& row : (*cb.lazy)(point)) append_row(p, cb.columns, row);
      }
      break;
    default:
      break;
  }
}

}  // namespace

void Milp::Deleter::operator()(glp_prob* p) const { glp_delete_prob(p); }

Milp::Milp() : prob_(glp_create_prob()) { glp_set_obj_dir(prob_.get(), GLP_MIN); }

Milp::~Milp() = default;

int Milp::add_column(double lower, double upper, bool integer, double objective) {
  PPTRAIN_CHECK(lower <= upper);
  const int j = glp_add_cols(prob_.get(), 1);
  glp_set_col_bnds(prob_.get(), j, bound_kind(lower, upper), finite_or_zero(lower), finite_or_zero(upper));
  glp_set_col_kind(prob_.get(), j, integer ? GLP_IV : GLP_CV);
  glp_set_obj_coef(prob_.get(), j, objective);
  return columns_++;
}

void Milp::add_row(const Row& row) { append_row(prob_.get(), columns_, row); }

bool Milp::minimize_relaxation() {
  glp_prob* p = prob_.get();
  integral_ = false;
  // The dual simplex: rows added since the last optimum leave its basis dual feasible.
  glp_smcp lp;
  glp_init_smcp(&lp);
  lp.msg_lev = GLP_MSG_OFF;
  lp.meth = GLP_DUALP;
  int error = glp_simplex(p, &lp);
  if (error != 0) {  // a basis GLPK could not use: once more from its own starting basis
    glp_adv_basis(p, 0);
    error = glp_simplex(p, &lp);
  }
  PPTRAIN_CHECK(error == 0, "glp_simplex returned ", error);
  const int status = glp_get_status(p);
  if (status == GLP_NOFEAS) return false;
  PPTRAIN_CHECK(status == GLP_OPT, "LP relaxation status ", status);
  return true;
}

bool Milp::minimize(const std::vector<double>& incumbent, const LazyRows& lazy) {
  PPTRAIN_CHECK(incumbent.empty() || int(incumbent.size()) == columns_);
  // GLPK's branch and bound starts from the relaxation's optimal basis. Its presolver,
  // which would not need one, stays off: it would hand the callback a transformed
  // problem, where the incumbent's and the lazy rows' columns mean nothing.
  if (!minimize_relaxation()) return false;
  Callback cb{columns_, {}, false, &lazy};
  if (!incumbent.empty()) {
    cb.incumbent.assign(1, 0);
    cb.incumbent.insert(cb.incumbent.end(), incumbent.begin(), incumbent.end());
  }
  glp_iocp mip;
  glp_init_iocp(&mip);
  mip.msg_lev = GLP_MSG_OFF;
  // Pseudocost branching and the best local bound first: on the partitioner's problems
  // (flat optima, a good incumbent to prove) by far the fewest branches of GLPK's choices.
  mip.br_tech = GLP_BR_PCH;
  mip.bt_tech = GLP_BT_BLB;
  mip.cb_func = serve;
  mip.cb_info = &cb;
  const int error = glp_intopt(prob_.get(), &mip);
  PPTRAIN_CHECK(error == 0, "glp_intopt returned ", error);
  const int status = glp_mip_status(prob_.get());
  if (status == GLP_NOFEAS) return false;
  PPTRAIN_CHECK(status == GLP_OPT, "branch and bound status ", status);
  integral_ = true;
  return true;
}

double Milp::objective() const {
  return integral_ ? glp_mip_obj_val(prob_.get()) : glp_get_obj_val(prob_.get());
}

double Milp::value(int column) const {
  PPTRAIN_CHECK(column >= 0 && column < columns_);
  return integral_ ? glp_mip_col_val(prob_.get(), column + 1) : glp_get_col_prim(prob_.get(), column + 1);
}

}  // namespace pptrain
