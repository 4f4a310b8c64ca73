// Benchmark: checkpoint write and read bandwidth of a GPT-2-124M-shaped model (~500 MB of
// parameters, ~1.5 GB with the AdamW moments) against the raw sequential bandwidth of the
// same disk, measured in the same run (the machine is shared: ratios compare, absolute
// figures drift).
//   write: CheckpointManager::save, the whole protocol: collective HDF5 write, flush
//          (MPI_File_sync), close, fsync, rename, `latest`
//   read:  CheckpointManager::resume from that file with the page cache dropped for it
//          (posix_fadvise DONTNEED after the sync), every rank reading its hyperslabs
//   raw:   before the checkpoints, world rank 0 writes as many bytes in 8 MiB write()
//          calls and fdatasync()s, drops them from the cache and reads them back
// The ranks form pp x tp = world (1 -> 1x1, 2 -> 2x1, 4 -> 2x2, 8 -> 2x4), or with --dp D
// a dp group of D replicas (pp x tp = world / D as before) whose optimizer state is whole
// on every replica (--zero 0: replica 0 writes the file) or sharded (--zero 1, ZeRO-1: each
// replica writes its 1/D range of every dataset). Best of --reps repetitions. Prints one
// JSON line.
//   mpirun -np N bench_checkpoint [--dir DIR] [--reps 2] [--layers 12] [--dp 1] [--zero 0]
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "checkpoint/checkpoint_manager.h"
#include "core/log.h"
#include "model/optimizer_state.h"
#include "model/stage.h"
#include "parallel/mpi_comm.h"
#include "parallel/mpi_session.h"
#include "partition/partition.h"
#include "pipeline/ir.h"

using namespace pptrain;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void drop_from_page_cache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Sequential write (+ fdatasync) and cold read of `bytes` in 8 MiB blocks: MB/s each.
std::pair<double, double> raw_disk_bandwidth(const std::string& path, int64_t bytes) {
  const size_t block = size_t(8) << 20;
  std::vector<char> buf(block, 1);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail("bench_checkpoint: cannot create ", path);
  auto t0 = Clock::now();
  for (int64_t done = 0; done < bytes;) {
    ssize_t n = ::write(fd, buf.data(), size_t(std::min<int64_t>(int64_t(block), bytes - done)));
    if (n <= 0) fail("bench_checkpoint: write to ", path, " failed");
    done += n;
  }
  ::fdatasync(fd);
  const double write_s = seconds_since(t0);
  ::close(fd);
  drop_from_page_cache(path);
  fd = ::open(path.c_str(), O_RDONLY);
  t0 = Clock::now();
  while (::read(fd, buf.data(), block) > 0) {
  }
  const double read_s = seconds_since(t0);
  ::close(fd);
  std::filesystem::remove(path);
  return {bytes / 1e6 / write_s, bytes / 1e6 / read_s};
}

}  // namespace

int main(int argc, char** argv) {
  MpiSession mpi(&argc, &argv);
  try {
    std::string dir = "bench-checkpoint";
    int reps = 2, layers = 12, dp = 1, zero = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
      std::string a = argv[i];
      if (a == "--dir") dir = argv[i + 1];
      else if (a == "--reps") reps = std::stoi(argv[i + 1]);
      else if (a == "--layers") layers = std::stoi(argv[i + 1]);
      else if (a == "--dp") dp = std::stoi(argv[i + 1]);
      else if (a == "--zero") zero = std::stoi(argv[i + 1]);
      else fail("bench_checkpoint: unknown option ", a, " (expected --dir DIR, --reps N, --layers L, --dp D, --zero 0|1)");
    }
    const int world_size = mpi.world_size();
    if (dp < 1 || world_size % dp != 0) fail("bench_checkpoint: --dp ", dp, " does not divide ", world_size, " ranks");
    if (zero != 0 && zero != 1) fail("bench_checkpoint: --zero must be 0 or 1, got ", zero);
    const int replica_size = world_size / dp;
    const int pp = replica_size == 1 ? 1 : 2, tp = replica_size / pp;
    if (pp * tp != replica_size) fail("bench_checkpoint: run on dp times 1 or an even number of ranks");
    // Rank = (dp_idx · pp + pp_idx) · tp + tp_idx, as the training grid numbers them.
    MpiComm world = MpiComm::world();
    const int dp_rank = world.rank() / replica_size, in_replica = world.rank() % replica_size;
    MpiComm replica = world.split(dp_rank, in_replica, "replica");
    MpiComm dp_group = world.split(in_replica, dp_rank, "dp");
    MpiComm pp_group = replica.split(in_replica % tp, in_replica / tp, "pp");
    MpiComm tp_group = replica.split(in_replica / tp, in_replica % tp, "tp");
    const int pp_rank = pp_group.rank(), tp_rank = tp_group.rank();

    Config cfg;  // GPT-2 124M: 12 layers, 12 heads, C 768, T 1024, V 50257
    cfg.model.n_layer = layers;
    cfg.parallel.pp = pp;
    cfg.parallel.tp = tp;
    cfg.parallel.dp = dp;
    cfg.parallel.zero = zero;
    cfg.training.micro_batch_size = 1;
    cfg.checkpoint.dir = dir;
    cfg.source = "bench_checkpoint";
    auto ops = make_cpu_ops();
    const ModelDims dims = ModelDims::from(cfg.model, 1, tp, tp_rank);
    ParamStore params(*ops, tp, tp_rank, cfg.training.seed);
    std::vector<std::unique_ptr<Stage>> stages;
    for (const StageSpec& spec : stage_specs(cfg))
      if (pipeline::rank_of_stage(pipeline::Placement::Loop, spec.index, pp) == pp_rank)
        stages.push_back(make_stage(params, dims, spec, tp_group));
    params.flatten(dp);  // as the Job does: one arena, dp equal ranges
    const bool sharded = zero == 1 && dp > 1;
    OptimizerState optimizer = sharded ? OptimizerState(params, dp_rank) : OptimizerState(params);
    ParallelContext par{dp, pp, tp, dp_rank, pp_rank, tp_rank, &pp_group, &tp_group, &dp_group, nullptr, &world};
    log::set_quiet(true);

    // The raw disk first, best of `reps`, with as many bytes as the checkpoint will have
    // (parameters and both moments, 4 bytes each).
    double local_elements = 0;
    for (auto& [name, p] : params.all())
      if (!p->replicated_over_tp || tp_rank == 0) local_elements += double(p->numel());
    double elements = local_elements;
    tp_group.allreduce(&elements, 1, ReduceOp::Sum);
    pp_group.allreduce(&elements, 1, ReduceOp::Sum);  // one replica's: the file holds one copy
    double raw_write = 0, raw_read = 0;
    if (world.rank() == 0) {
      std::filesystem::create_directories(dir);
      for (int rep = 0; rep < reps; ++rep) {
        auto [w, r] = raw_disk_bandwidth(dir + "/raw.bin", int64_t(elements) * 3 * int64_t(sizeof(float)));
        raw_write = std::max(raw_write, w);
        raw_read = std::max(raw_read, r);
      }
    }
    world.barrier();

    double best_write = 1e30, best_read = 1e30;
    std::string path;
    for (int rep = 0; rep < reps; ++rep) {
      CheckpointManager saver(cfg, par);
      world.barrier();
      auto t0 = Clock::now();
      path = saver.save(params, optimizer, 1000 + rep);
      world.barrier();
      best_write = std::min(best_write, seconds_since(t0));

      if (world.rank() == 0) drop_from_page_cache(path);
      Config load_cfg = cfg;
      load_cfg.checkpoint.resume = path;
      CheckpointManager loader(load_cfg, par);
      world.barrier();
      t0 = Clock::now();
      loader.resume(params, optimizer);
      world.barrier();
      best_read = std::min(best_read, seconds_since(t0));
    }
    const int64_t bytes = int64_t(std::filesystem::file_size(path));
    if (world.rank() == 0) {
      std::filesystem::remove_all(dir);
      const double w = bytes / 1e6 / best_write, r = bytes / 1e6 / best_read;
      std::printf("{\"bench\": \"checkpoint\", \"ranks\": %d, \"pp\": %d, \"tp\": %d, \"dp\": %d, \"zero\": %d, \"file_mb\": %.1f, "
                  "\"write_mb_s\": %.1f, \"read_mb_s\": %.1f, \"raw_write_mb_s\": %.1f, \"raw_read_mb_s\": %.1f, "
                  "\"write_vs_raw\": %.2f, \"read_vs_raw\": %.2f}\n",
                  world_size, pp, tp, dp, zero, bytes / 1e6, w, r, raw_write, raw_read, w / raw_write, r / raw_read);
      std::fflush(stdout);
    }
  } catch (const Error& e) {
    log::error(e.what());
    mpi.abort_job(1);
  }
  return 0;
}
