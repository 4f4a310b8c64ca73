// pptrain profile CONFIG [--out FILE] [--repeats N] [section.key=value ...]
// Measures the config's layers on its backend and precision (partition/profile.h), prints
// a table and writes the cost file the planner reads (partition/cost_profile.h). Every
// rank of the job times the layers at once (the figures are the mean over ranks) and
// takes part in the transfer and all-reduce timing; world rank 0 prints and writes.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_backend.h"
#include "cli/commands.h"
#include "core/config.h"
#include "core/error.h"
#include "data/token_dataset.h"
#include "parallel/mpi_comm.h"
#include "parallel/mpi_session.h"
#include "partition/cost_profile.h"
#include "partition/profile.h"

namespace pptrain {
namespace {

const char* kProfileUsage = "usage: pptrain profile CONFIG [--out FILE] [--repeats N] [section.key=value ...]";

struct ProfileArgs {
  std::string config, out = "profile.json";
  std::vector<std::string> overrides;
  int repeats = 0;  // 0: parallel.profile_repeats
};

ProfileArgs parse_args(const Args& args) {
  ProfileArgs out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--out" || a == "--repeats") {
      if (i + 1 >= args.size()) fail("profile: ", a, " needs a value (", kProfileUsage, ")");
      const std::string& value = args[++i];
      if (a == "--out") {
        if (value.empty()) fail("profile: --out: expected a file name");
        out.out = value;
        continue;
      }
      char* end = nullptr;
      const long n = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || n < 1 || n > kMaxProfileRepeats)
        fail("profile: --repeats: expected an integer in [1, ", kMaxProfileRepeats, "], got '", value, "'");
      out.repeats = int(n);
    } else if (a.rfind("--", 0) == 0) {
      fail("profile: unknown option '", a, "' (", kProfileUsage, ")");
    } else if (out.config.empty() && a.find('=') == std::string::npos) {
      out.config = a;
    } else {
      out.overrides.push_back(a);
    }
  }
  if (out.config.empty()) fail("profile: missing CONFIG (", kProfileUsage, ")");
  return out;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

void print_table(const CostProfile& p, const ProfileArgs& args, int repeats, int ranks, const std::string& ids) {
  std::printf("profile: %s %s, attention %s; micro_batch_size %d x seq_len %d, d_model %d, %d heads, vocab %d\n",
              p.device.c_str(), p.precision.c_str(), p.attention.c_str(), p.micro_batch_size, p.seq_len, p.d_model,
              p.n_head, p.vocab_size);
  std::printf("per microbatch, median of %d; token ids: %s\n", repeats, ids.c_str());
  // Held between F and I, and between I and W (cost_profile.h).
  std::printf("  %-19s %9s %9s %9s %11s %11s %11s %11s\n", "layer", "F ms", "I ms", "W ms", "act F..I", "act I..W",
              "params", "optimizer");
  auto kinds = [](const auto& c) {
    return std::vector<std::pair<std::string, const LayerCost*>>{{"embedding", &c.embedding},
                                                                 {"block", &c.block},
                                                                 {"block (rc attention)", &c.block_attention},
                                                                 {"block (rc full)", &c.block_full},
                                                                 {"head", &c.head}};
  };
  std::vector<std::pair<std::string, const LayerCost*>> rows = kinds(p);
  for (const TpLayerCosts& t : p.other_tp)  // each rank its shard, the tp all-reduces included
    for (const auto& [kind, c] : kinds(t)) rows.push_back({cat(kind, " tp", t.tp), c});
  for (const auto& [name, c] : rows)
    std::printf("  %-19s %9.4f %9.4f %9.4f %11s %11s %11s %11s\n", name.c_str(), c->forward_ms, c->input_grad_ms,
                c->weight_grad_ms, human_bytes(c->act_fi_bytes + c->act_iw_bytes).c_str(),
                human_bytes(c->act_iw_bytes + c->act_from_input_bytes).c_str(), human_bytes(c->param_bytes).c_str(),
                human_bytes(c->optim_bytes).c_str());
  if (p.allreduce_measured) {
    std::printf("stage boundary: %s, %.4f ms rank 0 -> 1\n", human_bytes(p.transfer_bytes).c_str(), p.transfer_ms);
    std::printf("all-reduce over %d ranks: %.4f ms + bytes / %.3g GB/s\n", ranks, p.allreduce_latency_ms,
                p.allreduce_bytes_per_ms * 1e3 / 1e9);
  } else {
    std::printf("stage boundary: %s (one rank: transfer not measured)\n", human_bytes(p.transfer_bytes).c_str());
    std::printf("all-reduce: defaults %.4f ms + bytes / %.3g GB/s (one rank: not measured; run under mpirun)\n",
                p.allreduce_latency_ms, p.allreduce_bytes_per_ms * 1e3 / 1e9);
  }
  std::printf("wrote %s\n", args.out.c_str());
}

}  // namespace

ProfileOptions profile_options(const Config& cfg, std::string* source) {
  const data::TokenSample sample =
      data::profile_sample(cfg.data.train, cfg.model.seq_len, cfg.model.vocab_size, cfg.training.micro_batch_size,
                           cfg.data.shuffle, cfg.training.seed);
  ProfileOptions opts;
  opts.repeats = cfg.parallel.profile_repeats;
  opts.tokens = sample.tokens;
  opts.targets = sample.targets;
  if (source)
    *source = sample.tokens.empty() ? cat("uniform over the vocabulary (data.train ",
                                          cfg.data.train.empty() ? "unset" : "matches no file", ")")
                                    : "the first microbatch of data.train";
  return opts;
}

ProfileOptions measure_options(const Config& cfg) {
  return cfg.parallel.profile == "measure" ? profile_options(cfg) : ProfileOptions{};
}

int cmd_profile(const Args& raw_args, MpiSession& mpi) {
  const ProfileArgs args = parse_args(raw_args);
  const Config cfg = load_config(args.config, args.overrides, build_features());
  // An output that cannot be written fails now, not after the measurement.
  if (mpi.rank() == 0) {
    const std::string probe = args.out + ".tmp";
    std::FILE* f = std::fopen(probe.c_str(), "wb");
    if (!f) fail("profile: --out ", args.out, ": cannot create ", probe, " (", std::strerror(errno), ")");
    std::fclose(f);
    std::remove(probe.c_str());
  }
  MpiComm world = MpiComm::world();
  std::unique_ptr<Ops> ops = cfg.device == "cuda" ? make_cuda_ops(cfg) : make_cpu_ops();
  std::string ids;
  ProfileOptions opts = profile_options(cfg, &ids);
  if (args.repeats > 0) opts.repeats = args.repeats;
  const CostProfile profile = profile_costs(cfg, *ops, world, opts);
  if (mpi.rank() == 0) {
    write_cost_profile(profile, args.out);
    print_table(profile, args, opts.repeats, world.size(), ids);
  }
  return 0;
}

}  // namespace pptrain
