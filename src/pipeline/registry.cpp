#include "pipeline/registry.h"

#include <algorithm>

#include "core/error.h"
#include "core/log.h"
#include "pipeline/csv.h"
#include "pipeline/generators.h"
#include "pipeline/lower.h"
#include "pipeline/transform.h"
#include "pipeline/validate.h"

namespace pptrain::pipeline {

namespace {

struct Entry {
  const char* name;
  Schedule (*make)(int, int, int);
  int default_stages_per_rank;
};

const std::vector<Entry>& entries() {
  static const std::vector<Entry> table = {
      {"gpipe", make_gpipe, 1},
      {"1f1b", make_1f1b, 1},
      {"interleaved-1f1b", make_interleaved_1f1b, 2},
      {"looped-bfs", make_looped_bfs, 1},
      {"zb-h1", make_zb_h1, 1},
      {"zb-h2", make_zb_h2, 1},
      {"zbv", make_zbv, 2},
      {"dualpipev", make_dualpipev, 2},
  };
  return table;
}

const Entry& entry(const std::string& name) {
  for (const Entry& e : entries())
    if (name == e.name) return e;
  std::string known;
  for (const Entry& e : entries()) known += cat(known.empty() ? "" : ", ", e.name);
  fail("unknown schedule '", name, "' (known: ", known, ")");
}

}  // namespace

void check_size(const std::string& name, int pp, int stages_per_rank, int microbatches) {
  const long long size = 1LL * pp * stages_per_rank * microbatches;
  if (size > kMaxStageMicrobatches)
    fail(name, ": pp*stages_per_rank*microbatches = ", size, " is more than this tool builds (",
         kMaxStageMicrobatches, ")");
}

const std::vector<std::string>& schedule_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Entry& e : entries()) out.push_back(e.name);
    return out;
  }();
  return names;
}

int default_stages_per_rank(const std::string& name) { return entry(name).default_stages_per_rank; }

Schedule generate_schedule(const std::string& name, int pp, int microbatches,
                           int stages_per_rank) {
  const Entry& e = entry(name);
  if (pp < 1) fail(name, ": pp must be >= 1 (got ", pp, ")");
  if (microbatches < 1) fail(name, ": microbatches must be >= 1 (got ", microbatches, ")");
  if (stages_per_rank < 0) fail(name, ": stages per rank must be >= 1 (got ", stages_per_rank, ")");
  const int v = stages_per_rank == 0 ? e.default_stages_per_rank : stages_per_rank;
  check_size(name, pp, v, microbatches);
  return e.make(pp, microbatches, v);
}

Placement infer_placement(const Program& program, int pp, int stages_per_rank) {
  auto fits = [&](Placement placement) {
    for (int r = 0; r < int(program.size()); ++r)
      for (const Action& a : program[r])
        if (a.stage >= 0 && rank_of_stage(placement, a.stage, pp) != r) return false;
    return true;
  };
  if (fits(Placement::Loop)) return Placement::Loop;
  if (stages_per_rank == 2 && fits(Placement::V)) return Placement::V;
  return Placement::Loop;
}

Schedule load_or_generate(const std::string& spec, int pp, int microbatches, int stages_per_rank,
                          const PrepareOptions& opts) {
  if (spec.rfind("file:", 0) != 0) return generate_schedule(spec, pp, microbatches, stages_per_rank);
  Schedule s = load_schedule_csv(spec.substr(5), pp, microbatches, std::max(stages_per_rank, 1), Placement::Loop);
  if (stages_per_rank == 0) {
    int last = 0;
    for (const auto& actions : s.program)
      for (const Action& a : actions) last = std::max(last, a.stage);
    s.stages_per_rank = last / pp + 1;
  }
  // Before anything is sized by the shape (the validator's tables are stages x microbatches).
  check_size(s.name, pp, s.stages_per_rank, microbatches);
  s.placement = opts.placement ? *opts.placement : infer_placement(s.program, pp, s.stages_per_rank);
  if (!s.note.empty()) log::info("note: ", s.note);
  return s;
}

Schedule prepare_schedule(Schedule s, const PrepareOptions& opts) {
  s = apply_backward_form(s, opts.backward);
  ValidateOptions check{opts.max_in_flight, opts.blocking_sends};
  validate(s, check);
  if (!has_communication(s.program)) {
    // Our lowering promises more than the runtime needs: it must also survive blocking sends.
    s = lower(s);
    check.blocking_sends = true;
    validate(s, check);
  }
  return s;
}

Schedule prepare_schedule(const std::string& spec, int pp, int microbatches, int stages_per_rank,
                          const PrepareOptions& opts) {
  return prepare_schedule(load_or_generate(spec, pp, microbatches, stages_per_rank, opts), opts);
}

Schedule prepare_schedule(const Config& cfg) {
  const auto& p = cfg.parallel;
  try {
    return runtime_form(prepare_schedule(p.schedule, p.pp, p.microbatches, p.stages_per_rank));
  } catch (const Error& e) {
    fail(cfg.source, ": key 'parallel.schedule': ", e.what());
  }
}

}  // namespace pptrain::pipeline
