// Grid: the dp x pp x tp layout of the ranks of a job and the communicators of its
// groups. TP is innermost so a TP group sits inside one node:
//
//   world rank = (dp_idx * pp + pp_idx) * tp + tp_idx
//
// Groups (each an MpiComm, ordered so the group rank is the index that varies in it):
//   pp        same dp_idx and tp_idx; group rank = pp_idx   (stage-to-stage p2p)
//   tp        same dp_idx and pp_idx; group rank = tp_idx   (Megatron all-reduces)
//   dp        same pp_idx and tp_idx; group rank = dp_idx   (gradient averaging)
//   embedding for one (dp_idx, tp_idx), the pp ranks listed in `embedding_pp_ranks`:
//             those holding the tied token embedding (first and last stage) whose
//             gradients are summed before the optimizer step. Ranks outside the list
//             get a group of their own (size 1), so calling it is always safe.
#pragma once
#include <vector>

#include "parallel/mpi_comm.h"
#include "parallel/parallel_context.h"

namespace pptrain {

class Grid {
 public:
  // Collective over `world`, whose size must be dp * pp * tp (else pptrain::Error on
  // every rank, before any communication). `embedding_pp_ranks` are pp indices in
  // [0, pp); duplicates are merged (with a V placement first and last stage share
  // pp index 0, giving a group of one); empty means no tied embedding.
  Grid(const MpiComm& world, int dp, int pp, int tp, std::vector<int> embedding_pp_ranks);
  Grid(const Grid&) = delete;
  Grid& operator=(const Grid&) = delete;

  int dp_size() const { return dp_; }
  int pp_size() const { return pp_; }
  int tp_size() const { return tp_; }
  int dp_idx() const { return dp_idx_; }
  int pp_idx() const { return pp_idx_; }
  int tp_idx() const { return tp_idx_; }
  int world_rank() const { return world_rank_; }
  int world_size() const { return dp_ * pp_ * tp_; }

  // World rank of coordinate (dp_idx, pp_idx, tp_idx). The rank of pipeline rank
  // `pp_idx` inside this rank's pp group is pp_idx itself.
  int world_rank_of(int dp_idx, int pp_idx, int tp_idx) const;

  MpiComm& pp_comm() { return pp_comm_; }
  MpiComm& tp_comm() { return tp_comm_; }
  MpiComm& dp_comm() { return dp_comm_; }
  MpiComm& embedding_comm() { return embedding_comm_; }

  // This rank's coordinates and groups as the Communicator interfaces the model and
  // trainer take; `world` is the job's world communicator. Valid while both live.
  ParallelContext context(Communicator& world);

  const std::vector<int>& embedding_pp_ranks() const { return embedding_pp_ranks_; }
  bool in_embedding_group() const { return in_embedding_group_; }

 private:
  // Checks the layout (throws pptrain::Error) and returns the sorted, deduplicated
  // embedding list. Runs first, in the initializer of the first member.
  static std::vector<int> validate(const MpiComm& world, int dp, int pp, int tp,
                                   std::vector<int> embedding_pp_ranks);

  std::vector<int> embedding_pp_ranks_;  // sorted, unique
  int dp_, pp_, tp_;
  int world_rank_;
  int dp_idx_, pp_idx_, tp_idx_;
  bool in_embedding_group_;
  MpiComm pp_comm_, tp_comm_, dp_comm_, embedding_comm_;
};

}  // namespace pptrain
