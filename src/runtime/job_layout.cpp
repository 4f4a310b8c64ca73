#include "runtime/job_layout.h"

#include "core/error.h"
#include "pipeline/ir.h"
#include "pipeline/registry.h"

namespace pptrain {
namespace {

// The pp ranks holding the tied token embedding: those of the first and last stage.
std::vector<int> embedding_pp_ranks(const Config& cfg, const MpiComm& world) {
  if (cfg.world_size() != world.size())
    fail(cfg.source, ": parallel.dp x pp x tp = ", cfg.parallel.dp, " x ", cfg.parallel.pp, " x ",
         cfg.parallel.tp, " = ", cfg.world_size(), " ranks, but the job has ", world.size(), " (rank ",
         world.rank(), ")");
  const pipeline::Schedule schedule = pipeline::prepare_schedule(cfg);
  return {pipeline::rank_of_stage(schedule.placement, 0, cfg.parallel.pp),
          pipeline::rank_of_stage(schedule.placement, cfg.total_stages() - 1, cfg.parallel.pp)};
}

}  // namespace

JobLayout::JobLayout(const Config& cfg)
    : world_(MpiComm::world()),
      grid_(world_, cfg.parallel.dp, cfg.parallel.pp, cfg.parallel.tp, embedding_pp_ranks(cfg, world_)),
      par_{grid_.dp_size(), grid_.pp_size(), grid_.tp_size(), grid_.dp_idx(), grid_.pp_idx(),
           grid_.tp_idx(), &grid_.pp_comm(), &grid_.tp_comm(), &grid_.dp_comm(),
           &grid_.embedding_comm(), &world_} {}

}  // namespace pptrain
