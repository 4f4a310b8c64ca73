// Grid under mpirun: `grid_layout DP PP TP [EMBEDDING]` (EMBEDDING: comma-separated pp
// indices, default "0,PP-1"). Each rank prints one line with its coordinate and the
// world ranks of each of its groups, read from MPI itself (MPI_Group_translate_ranks),
// not from Grid's own bookkeeping:
//   rank 5 coord 1 0 1 pp [5 7] tp [4 5] dp [1 5] embedding [5 7] member 1
// and checks that each group's collectives and p2p reach exactly those ranks.
// A layout error (e.g. world size != DP*PP*TP) is printed by every rank, then the job
// aborts with status 1.
#include <sstream>

#include "parallel/grid.h"
#include "support/mpi_program.h"

using namespace pptrain;
using pptrain::mpi_test::say;

namespace {

// World ranks of the members of `comm`, in group-rank order.
std::vector<int> members(const MpiComm& comm) {
  MPI_Group group, world_group;
  MPI_Comm_group(comm.handle(), &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  std::vector<int> group_ranks(comm.size()), world_ranks(comm.size());
  for (int i = 0; i < comm.size(); ++i) group_ranks[i] = i;
  MPI_Group_translate_ranks(group, comm.size(), group_ranks.data(), world_group,
                            world_ranks.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  return world_ranks;
}

std::string list(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ' ';
    s += std::to_string(v[i]);
  }
  return s + "]";
}

// The group really connects its members: the sum of their world ranks reaches everyone,
// and a value sent around the group's ring comes from the expected left neighbour.
void exercise(MpiComm& comm, const std::vector<int>& world_ranks) {
  double sum = MpiComm::world().rank(), want = 0;
  for (int w : world_ranks) want += w;
  comm.allreduce(&sum, 1, ReduceOp::Sum);
  MPI_EXPECT(sum == want, comm.where(), ": sum of member world ranks ", sum, ", want ", want);
  if (comm.size() < 2) return;
  const int n = comm.size(), r = comm.rank();
  float out = float(world_ranks[r]), in = -1;
  auto recv = comm.irecv(&in, sizeof in, (r + n - 1) % n, 3);
  auto send = comm.isend(&out, sizeof out, (r + 1) % n, 3);
  recv->wait();
  send->wait();
  MPI_EXPECT(in == float(world_ranks[(r + n - 1) % n]), comm.where(), ": ring got ", in);
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoi(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  return mpi_test::run_mpi_program(argc, argv, [](MpiSession& session, const auto& args) {
    MPI_EXPECT(args.size() == 3 || args.size() == 4, "usage: grid_layout DP PP TP [EMBEDDING]");
    const int dp = std::stoi(args[0]), pp = std::stoi(args[1]), tp = std::stoi(args[2]);
    std::vector<int> embedding = args.size() == 4 ? parse_list(args[3]) : std::vector<int>{0, pp - 1};
    MpiComm world = MpiComm::world();
    try {
      Grid grid(world, dp, pp, tp, embedding);
      const int w = world.rank();
      MPI_EXPECT(grid.world_rank() == w && grid.world_size() == world.size());
      MPI_EXPECT(grid.world_rank_of(grid.dp_idx(), grid.pp_idx(), grid.tp_idx()) == w);
      MPI_EXPECT(grid.pp_comm().rank() == grid.pp_idx() && grid.tp_comm().rank() == grid.tp_idx() &&
                 grid.dp_comm().rank() == grid.dp_idx(), "group rank is the varying index");
      // Peer stages: the pp group's rank p is world rank world_rank_of(dp_idx, p, tp_idx).
      for (int p = 0; p < pp; ++p)
        MPI_EXPECT(grid.pp_comm().world_rank_of(p) ==
                   grid.world_rank_of(grid.dp_idx(), p, grid.tp_idx()), "pp peer ", p);
      MPI_EXPECT(grid.pp_comm().name() == "pp" && grid.tp_comm().name() == "tp" &&
                 grid.dp_comm().name() == "dp" && grid.embedding_comm().name() == "embedding");

      std::vector<int> pp_members = members(grid.pp_comm()), tp_members = members(grid.tp_comm()),
                       dp_members = members(grid.dp_comm()),
                       embedding_members = members(grid.embedding_comm());
      say("rank ", w, " coord ", grid.dp_idx(), " ", grid.pp_idx(), " ", grid.tp_idx(), " pp ",
          list(pp_members), " tp ", list(tp_members), " dp ", list(dp_members), " embedding ",
          list(embedding_members), " member ", int(grid.in_embedding_group()));
      exercise(grid.pp_comm(), pp_members);
      exercise(grid.tp_comm(), tp_members);
      exercise(grid.dp_comm(), dp_members);
      exercise(grid.embedding_comm(), embedding_members);
      world.barrier();
      say("grid ok rank ", w);
    } catch (const Error& e) {
      // A layout error is seen by every rank (all see the same sizes). The barrier lets
      // each print before the first abort ends the job, so the test can check that every
      // rank detected it; a rank that did not would hang here and fail the test's timeout.
      log::error(e.what());
      world.barrier();
      session.abort_job(1);
    }
  });
}
