#include "parallel/grid.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace pptrain {

std::vector<int> Grid::validate(const MpiComm& world, int dp, int pp, int tp,
                                std::vector<int> embedding_pp_ranks) {
  // Every rank sees the same sizes, so every rank throws here and none is left
  // waiting in MPI_Comm_split.
  if (dp < 1 || pp < 1 || tp < 1)
    fail("parallel.dp, pp and tp must be at least 1, got dp=", dp, " pp=", pp, " tp=", tp);
  if (long(dp) * pp * tp != world.size())
    fail("parallel.dp x pp x tp = ", dp, " x ", pp, " x ", tp, " = ", long(dp) * pp * tp,
         " but mpirun started ", world.size(), " rank", world.size() == 1 ? "" : "s");
  for (int p : embedding_pp_ranks)
    if (p < 0 || p >= pp)
      fail("embedding group: pipeline rank ", p, " is outside 0..", pp - 1, " (parallel.pp = ",
           pp, ")");
  std::sort(embedding_pp_ranks.begin(), embedding_pp_ranks.end());
  embedding_pp_ranks.erase(std::unique(embedding_pp_ranks.begin(), embedding_pp_ranks.end()),
                           embedding_pp_ranks.end());
  return embedding_pp_ranks;
}

Grid::Grid(const MpiComm& world, int dp, int pp, int tp, std::vector<int> embedding_pp_ranks)
    : embedding_pp_ranks_(validate(world, dp, pp, tp, std::move(embedding_pp_ranks))),
      dp_(dp), pp_(pp), tp_(tp),
      world_rank_(world.rank()),
      // Inverse of world rank = (dp_idx * pp + pp_idx) * tp + tp_idx.
      dp_idx_(world_rank_ / (pp * tp)),
      pp_idx_(world_rank_ / tp % pp),
      tp_idx_(world_rank_ % tp),
      in_embedding_group_(std::binary_search(embedding_pp_ranks_.begin(),
                                             embedding_pp_ranks_.end(), pp_idx_)),
      // Each split's color names the fixed coordinates, its key orders the group by the
      // coordinate that varies, so group rank == that index.
      pp_comm_(world.split(dp_idx_ * tp + tp_idx_, pp_idx_, "pp")),
      tp_comm_(world.split(dp_idx_ * pp + pp_idx_, tp_idx_, "tp")),
      dp_comm_(world.split(pp_idx_ * tp + tp_idx_, dp_idx_, "dp")),
      // Members share the color of their (dp_idx, tp_idx); every other rank takes a
      // color of its own (past the members' range), a group of one.
      embedding_comm_(world.split(in_embedding_group_ ? dp_idx_ * tp + tp_idx_
                                                      : dp * tp + world_rank_,
                                  pp_idx_, "embedding")) {}

ParallelContext Grid::context(Communicator& world) {
  return ParallelContext{dp_,       pp_,       tp_,       dp_idx_,          pp_idx_, tp_idx_,
                         &pp_comm_, &tp_comm_, &dp_comm_, &embedding_comm_, &world};
}

int Grid::world_rank_of(int dp_idx, int pp_idx, int tp_idx) const {
  PPTRAIN_CHECK(dp_idx >= 0 && dp_idx < dp_ && pp_idx >= 0 && pp_idx < pp_ && tp_idx >= 0 &&
                    tp_idx < tp_,
                "coordinate (", dp_idx, ", ", pp_idx, ", ", tp_idx, ") outside grid ", dp_, " x ",
                pp_, " x ", tp_);
  return (dp_idx * pp_ + pp_idx) * tp_ + tp_idx;
}

}  // namespace pptrain
