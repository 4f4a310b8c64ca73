// Memory measured in a run: the backends' own accounting (Ops::memory_stats), the per-step
// mem_peak of the log and the metrics, and `pptrain train --dry-run`'s prediction.
//   - the cpu backend's peak and in-use bytes equal CountingOps' count of the same
//     allocations (tests/mpi/memory_accounting), on 1 and 2 ranks, and a planted
//     uncounted release shows that comparison bites;
//   - mem_peak after one real step agrees with --dry-run's total per rank, within the bound
//     stated at MemPeakOfTheFirstStepAgreesWithTheDryRun;
//   - --dry-run prints every rank of a 4-rank config from one process, without data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "support/mpi_programs.h"
#include "support/test_util.h"
#include "train/step_reduction.h"

using namespace pptrain;
using namespace pptrain::testing;

namespace {

constexpr double kMiB = 1 << 20;
// Reports print MiB with three decimals: each printed figure is within 0.0005 MiB of its
// value, a difference of two within 0.001 MiB, of the few summed here within 0.002 MiB.
constexpr double kPrintedMiB = 0.002;

class MemoryAccounting : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto r = prepare_markov_corpus(dir_->file("data"), 32, 20000);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    write_file(dir_->file("c.yaml"),
               "model: {n_layer: 2, n_head: 2, d_model: 32, seq_len: 16, vocab_size: 32}\n"
               "parallel: {microbatches: 4}\n"
               "training: {steps: 1, micro_batch_size: 2, eval_every: 0}\n"
               "data: {train: '" + dir_->file("data") + "/train_*.bin'}\n"
               "logging: {every: 1, sample_tokens: 0}\n");
  }
  static void TearDownTestSuite() { delete dir_; }
  static TempDir* dir_;
};
TempDir* MemoryAccounting::dir_ = nullptr;

// One line of tests/mpi/memory_accounting.
struct Accounting {
  int rank;
  std::string at;
  double counted_peak, backend_peak, counted_live, backend_in_use, reserved;
};

std::vector<Accounting> run_accounting(int ranks, const std::string& config, const std::string& overrides,
                                       const std::string& env = "") {
  const std::string program = mpi_test_program("memory_accounting");
  auto r = run_command(env + " " + mpirun(ranks) + program + " " + config + " " + overrides, 60);
  EXPECT_EQ(r.exit_code, 0) << overrides << "\n" << r.output;
  const std::regex line(
      R"(rank (\d+) at (\w+) counted_peak (\d+) backend_peak (\d+) counted_live (\d+) backend_in_use (\d+) reserved (\d+))");
  std::vector<Accounting> out;
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), line), end; it != end; ++it)
    out.push_back({std::stoi((*it)[1]), (*it)[2], std::stod((*it)[3]), std::stod((*it)[4]), std::stod((*it)[5]),
                   std::stod((*it)[6]), std::stod((*it)[7])});
  EXPECT_EQ(out.size(), size_t(4 * ranks)) << r.output;
  return out;
}

// A report line of --dry-run or of the log: "pp P tp T: ... | total X MiB ...".
struct ReportLine {
  double total = 0, workspace = 0, pending = 0;
  bool has_allocator = false;
  double outside = -1;  // the backend's scratch outside its allocator (the log's lines only)
};

// (pp, tp) -> its line, from the lines of `output` that start with "  pp ".
std::map<std::pair<int, int>, ReportLine> report_lines(const std::string& output) {
  std::map<std::pair<int, int>, ReportLine> out;
  const std::regex line(R"(  pp (\d+) tp (\d+): [^\n]*\(pending sends ([0-9.]+) MiB\)( \| workspace ([0-9.]+) MiB)? \| total ([0-9.]+) MiB([^\n]*))");
  for (std::sregex_iterator it(output.begin(), output.end(), line), end; it != end; ++it) {
    ReportLine r;
    r.pending = std::stod((*it)[3]);
    r.workspace = (*it)[5].matched ? std::stod((*it)[5]) : 0.0;
    r.total = std::stod((*it)[6]);
    const std::string allocator = (*it)[7];
    r.has_allocator = allocator.find("allocator: in use") != std::string::npos;
    std::smatch outside;
    if (std::regex_search(allocator, outside, std::regex(R"(outside it ([0-9.]+) MiB)")))
      r.outside = std::stod(outside[1]);
    out[{std::stoi((*it)[1]), std::stoi((*it)[2])}] = r;
  }
  return out;
}

// The numbers of the JSON array `key` in the first line of `jsonl` that has it.
std::vector<double> json_array(const std::string& jsonl, const std::string& key) {
  std::smatch m;
  const std::regex re("\"" + key + "\": \\[([^\\]]*)\\]");
  std::vector<double> out;
  if (!std::regex_search(jsonl, m, re)) return out;
  const std::string items = m[1];
  const std::regex number(R"([-0-9.eE+]+)");
  for (std::sregex_iterator it(items.begin(), items.end(), number), end; it != end; ++it)
    out.push_back(std::stod((*it)[0]));
  return out;
}

}  // namespace

// The cpu backend counts the bytes asked of allocate() as CountingOps does, so both peaks
// and both in-use figures are equal at every point: after a step, after a reset and a
// second step, after the trainer's buffers were released, and after a new trainer's step.
// reserved adds each block's rounding up to 64 bytes.
TEST_F(MemoryAccounting, CpuBackendPeakEqualsCountingOpsHighWaterMark) {
  struct Case {
    int ranks;
    std::string overrides;
  };
  const Case cases[] = {
      {1, ""},
      {2, "parallel.pp=2 parallel.schedule=zbv parallel.stages_per_rank=2 model.n_layer=4"},
      {2, "parallel.tp=2"},
  };
  for (const Case& c : cases)
    for (const Accounting& a : run_accounting(c.ranks, dir_->file("c.yaml"), c.overrides)) {
      const std::string where = c.overrides + ", rank " + std::to_string(a.rank) + " at " + a.at;
      EXPECT_GT(a.counted_peak, 0) << where;
      EXPECT_EQ(a.backend_peak, a.counted_peak) << where;
      EXPECT_EQ(a.backend_in_use, a.counted_live) << where;
      EXPECT_GE(a.reserved, a.backend_in_use) << where;
      EXPECT_EQ(std::fmod(a.reserved, 64.0), 0.0) << where;
    }
}

// Planted: the first release stays counted. The backend's in-use figure then exceeds
// CountingOps' once the trainer's buffers are released, and the peak after a new trainer's
// step exceeds it by the same bytes: the comparison above rejects it.
TEST_F(MemoryAccounting, PlantedUncountedReleaseIsCaught) {
  const std::vector<Accounting> lines =
      run_accounting(1, dir_->file("c.yaml"), "", "PPTRAIN_FAULTS=uncounted_release");
  ASSERT_EQ(lines.size(), 4u);
  const Accounting& released = lines[2];
  const Accounting& again = lines[3];
  ASSERT_EQ(again.at, "again");
  const double leaked = released.backend_in_use - released.counted_live;
  EXPECT_GT(leaked, 0) << "the planted fault changed nothing";
  EXPECT_EQ(again.backend_peak - again.counted_peak, leaked);
}

// mem_peak of step 1 (the backend's peak since the job was built: the model, the optimizer
// and the first step's slot pools) against --dry-run's total for the same rank. The
// prediction counts every buffer the job allocates through the backend exactly
// (test_preflight's MemoryPredictionEqualsWhatTheJobAllocates) but for two items, so
//   total - workspace - pending_sends <= mem_peak <= total - workspace
// up to printing (kPrintedMiB): the workspace (the cpu backend's attention scratch and
// packed weight copies) is not allocated through Ops::allocate, and pending sends are an
// upper bound (io buffers a microbatch keeps past its W while its send is in flight). For
// these configs the latter is within 5% of the rest, which is checked too: their dry runs
// put pending sends at 0 (one stage a rank) to 4.1% (pp 2 1F1B, 64 microbatches, rank 1) of
// total - workspace, so 5% also catches a config change that makes pending sends the bulk
// of the bound. The log's report after the first step,
// counted from the job's own buffers, has the same total as the prediction less its
// workspace, and what the backend holds outside its allocator after the step (the attention
// tiles and, where weights are packed, their copies) is at most the predicted workspace.
// With 64 microbatches of 32 rows the step packs the weights (PackedWeights::kMinRows) where
// the machine can: then the copies must show, above the workspace the same dry run predicts
// without them (PPTRAIN_CPU_GEMM=openblas packs nothing).
TEST_F(MemoryAccounting, MemPeakOfTheFirstStepAgreesWithTheDryRun) {
  struct Case {
    int ranks;
    std::string overrides;
  };
  const std::string packing = "parallel.microbatches=64";
  const Case cases[] = {
      {1, ""},
      {1, packing},
      {2, packing + " parallel.pp=2 parallel.schedule=1f1b model.attention=flash"},
      {2, "parallel.pp=2 parallel.schedule=zbv parallel.stages_per_rank=2 model.n_layer=4"},
      {2, "parallel.tp=2"},
      {1, "training.recompute=attention"},
      {2, "parallel.pp=2 parallel.schedule=zbv parallel.stages_per_rank=2 model.n_layer=4 training.recompute=full"},
      // One mode per stage: each stage's slots where its own mode places them.
      {2, "parallel.pp=2 parallel.schedule=zbv parallel.stages_per_rank=2 model.n_layer=4 "
          "'training.recompute=[full,none,attention,full]'"},
      {2, "parallel.dp=2 parallel.zero=1"},
  };
  int run = 0;
  for (const Case& c : cases) {
    const std::string metrics = dir_->file("m" + std::to_string(run++) + ".jsonl");
    const std::string args = " train " + dir_->file("c.yaml") + " " + c.overrides;
    auto dry = run_command(pptrain_bin() + args + " --dry-run", 60);
    ASSERT_EQ(dry.exit_code, 0) << dry.output;
    const int dp = c.overrides.find("parallel.dp=2") != std::string::npos ? 2 : 1;
    const auto predicted = report_lines(dry.output);
    ASSERT_EQ(predicted.size(), size_t(c.ranks / dp)) << dry.output;  // one line per (pp, tp)
    auto unpacked = run_command("PPTRAIN_CPU_GEMM=openblas " + pptrain_bin() + args + " --dry-run", 60);
    ASSERT_EQ(unpacked.exit_code, 0) << unpacked.output;
    const auto predicted_unpacked = report_lines(unpacked.output);

    auto real = run_command(mpirun(c.ranks) + pptrain_bin() + args + " logging.metrics=" + metrics, 60);
    ASSERT_EQ(real.exit_code, 0) << real.output;
    const bool packs = real.output.find("| weights packed from") != std::string::npos &&
                       c.overrides.find(packing) != std::string::npos;
    const std::string jsonl = read_file(metrics);
    const std::vector<double> peak = json_values(jsonl, "mem_peak_mb");
    const std::vector<double> ranks = json_array(jsonl, "mem_peak_mb_ranks");
    ASSERT_EQ(peak.size(), 1u) << jsonl;
    ASSERT_EQ(ranks.size(), size_t(c.ranks)) << jsonl;
    EXPECT_EQ(peak[0], *std::max_element(ranks.begin(), ranks.end())) << jsonl;
    EXPECT_NE(real.output.find("| mem_peak "), std::string::npos) << real.output;
    const auto measured = report_lines(real.output);
    ASSERT_EQ(measured.size(), size_t(c.ranks / dp)) << real.output;

    const int tp = c.overrides.find("parallel.tp=2") != std::string::npos ? 2 : 1;
    const int pp = c.overrides.find("parallel.pp=2") != std::string::npos ? 2 : 1;
    for (int rank = 0; rank < c.ranks; ++rank) {
      const std::pair<int, int> coords{rank / tp % pp, rank % tp};  // rank = (dp_rank · pp + pp_rank) · tp + tp_rank
      const ReportLine& p = predicted.at(coords);
      const double counted = p.total - p.workspace;
      const std::string where = c.overrides + ", rank " + std::to_string(rank);
      EXPECT_LE(ranks[rank], counted + kPrintedMiB) << where << ": the first step allocated more than predicted";
      EXPECT_GE(ranks[rank], counted - p.pending - kPrintedMiB) << where << ": predicted more than allocated";
      EXPECT_LE(std::abs(ranks[rank] - counted), 0.05 * counted) << where;
      const ReportLine& m = measured.at(coords);
      EXPECT_TRUE(m.has_allocator) << real.output;
      EXPECT_NEAR(m.total, counted, kPrintedMiB) << where << "\n" << real.output;
      ASSERT_GE(m.outside, 0) << real.output;
      EXPECT_LE(m.outside, p.workspace + kPrintedMiB) << where << ": more outside the allocator than predicted";
      if (packs) {
        EXPECT_GT(m.outside, predicted_unpacked.at(coords).workspace + kPrintedMiB)
            << where << ": the packed weight copies are not counted\n" << real.output;
      }
    }
  }
}

// training.precision: bf16 on the emulated cuda backend (pptrain-emu), on one rank and on
// dp 2 under ZeRO-1 (moments and fp32 masters of the rank's range, the bf16 copies whole).
// Its caching allocator counts requests rounded up to their size bucket (a quarter of the
// power of two below them, 512 bytes at least), so the peak is at least what the dry run
// counts and at most 1.25 times it plus 512 bytes per buffer; the config's few hundred
// buffers bound the latter by 0.25 MiB. The log's report after the first step, counted from
// the job's own buffers, has the dry run's total less its workspace (the cuBLASLt
// workspace is not the allocator's). The workspaces the backend holds outside its allocator
// after the step (this config's head size takes naive attention, whose backward's score
// gradients dominate them at T = 64) are the predicted workspace less cuBLASLt's 32 MiB (the
// emulated cuBLASLt runs its products on the host and takes none): at most that, and at least
// that less kOvercount, the prediction's 8 KiB for the reductions' partials (this model's few
// thousand parameters need one), and the printing.
TEST_F(MemoryAccounting, MemPeakOfTheEmulatedCudaBackendInBf16) {
  struct Case {
    int ranks;
    std::string overrides;
  };
  constexpr double kCublasLtMiB = 32, kOvercount = (8192.0 + 2048) / kMiB;
  const Case cases[] = {{1, ""}, {2, "parallel.dp=2 parallel.zero=1"}, {1, "model.seq_len=64 parallel.microbatches=2"}};
  int run = 0;
  for (const Case& c : cases) {
    const std::string args =
        " train " + dir_->file("c.yaml") + " device=cuda training.precision=bf16 " + c.overrides;
    const std::string metrics = dir_->file("emu" + std::to_string(run++) + ".jsonl");
    auto dry = run_command(pptrain_emu_bin() + args + " --dry-run", 60);
    ASSERT_EQ(dry.exit_code, 0) << dry.output;
    const auto predicted = report_lines(dry.output);
    ASSERT_EQ(predicted.size(), 1u) << dry.output;
    auto real = run_command(mpirun(c.ranks) + pptrain_emu_bin() + args + " logging.metrics=" + metrics, 120);
    ASSERT_EQ(real.exit_code, 0) << real.output;
    const std::string jsonl = read_file(metrics);
    const std::vector<double> ranks = json_array(jsonl, "mem_peak_mb_ranks");
    ASSERT_EQ(ranks.size(), size_t(c.ranks)) << jsonl;
    const ReportLine& p = predicted.begin()->second;
    const double counted = p.total - p.workspace;
    for (int rank = 0; rank < c.ranks; ++rank) {
      const std::string where = c.overrides + ", rank " + std::to_string(rank);
      EXPECT_GE(ranks[rank], counted - p.pending - kPrintedMiB) << where;
      EXPECT_LE(ranks[rank], 1.25 * counted + 0.25 + kPrintedMiB) << where;
    }
    const auto measured = report_lines(real.output);
    ASSERT_EQ(measured.size(), 1u) << real.output;
    EXPECT_NEAR(measured.begin()->second.total, counted, kPrintedMiB) << c.overrides << "\n" << real.output;
    const double outside = measured.begin()->second.outside;
    EXPECT_LE(outside, p.workspace - kCublasLtMiB + kPrintedMiB)
        << c.overrides << ": more outside the allocator than predicted\n" << real.output;
    EXPECT_GE(outside, p.workspace - kCublasLtMiB - kOvercount)
        << c.overrides << ": far less outside the allocator than predicted\n" << real.output;
  }
}

// --dry-run needs no mpirun and no data: a 4-rank config (pp 2 x tp 2) whose data does not
// exist prints one line per (pp, tp) rank and exits 0, before anything else is built.
TEST_F(MemoryAccounting, DryRunOfAFourRankConfigNeedsNoMpirunAndNoData) {
  auto r = run_command(pptrain_bin() + " train " + dir_->file("c.yaml") +
                           " parallel.pp=2 parallel.tp=2 data.train=/nonexistent/train_*.bin --dry-run",
                       60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto lines = report_lines(r.output);
  EXPECT_EQ(lines.size(), 4u) << r.output;
  for (int pp = 0; pp < 2; ++pp)
    for (int tp = 0; tp < 2; ++tp) EXPECT_TRUE(lines.count({pp, tp})) << "pp " << pp << " tp " << tp << "\n" << r.output;
  EXPECT_NE(r.output.find("4 ranks (dp 1 pp 2 tp 2)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("pptrain: "), std::string::npos) << "the model was built:\n" << r.output;
  // The same under mpirun with the config's 4 ranks: printed once.
  r = run_command(mpirun(4) + pptrain_bin() + " train " + dir_->file("c.yaml") +
                      " parallel.pp=2 parallel.tp=2 --dry-run",
                  60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(report_lines(r.output).size(), 4u) << r.output;
  size_t headers = 0;
  for (size_t at = r.output.find("dry run of"); at != std::string::npos; at = r.output.find("dry run of", at + 1))
    ++headers;
  EXPECT_EQ(headers, 1u) << r.output;
}

// The step reduction carries each rank's peak: the max and the per-rank values, from the
// one gather (no collective of its own).
TEST(StepReductionMemory, FoldsThePeakWithMaxAndKeepsEveryRank) {
  std::vector<double> all;
  const double peaks[3] = {5e6, 7e6, 6e6};
  for (double p : peaks) {
    StepContribution c;
    c.mem_peak_bytes = p;
    const std::vector<double> packed = pack(c);
    all.insert(all.end(), packed.begin(), packed.end());
  }
  const StepTotals t = fold(all, 1.0);
  EXPECT_EQ(t.mem_peak_bytes, 7e6);
  EXPECT_EQ(t.mem_peak_bytes_ranks, std::vector<double>(std::begin(peaks), std::end(peaks)));
}
