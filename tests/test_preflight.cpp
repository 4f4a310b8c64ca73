// The checks `pptrain train` runs before the Job allocates the model (job/preflight.h):
// each problem is one line naming the key, path or consumer, on every rank, with a
// non-zero exit and before any step; and the memory prediction (job/memory_estimate.h)
// against the bytes a real job allocates.
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <filesystem>
#include <regex>
#include <string>

#include "core/config.h"
#include "job/memory_estimate.h"
#include "job/preflight.h"
#include "pipeline/registry.h"
#include "pipeline/simulate.h"
#include "support/mpi_programs.h"
#include "support/single_rank_model.h"
#include "support/test_util.h"

using namespace pptrain;
using namespace pptrain::testing;
namespace fs = std::filesystem;

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// c.yaml's model as a Llama: grouped-query attention (4 heads, 2 key/value heads of 4),
// SwiGLU 48 wide, its own LM head.
const std::vector<std::string> kLlama = {"model.arch=llama", "model.n_head=4", "model.n_kv_head=2",
                                         "model.ffn_hidden=48"};

class Preflight : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto r = prepare_markov_corpus(dir_->file("data"), 16, 4000);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    write_file(dir_->file("c.yaml"),
               "model: {n_layer: 2, n_head: 2, d_model: 16, seq_len: 8, vocab_size: 16}\n"
               "parallel: {microbatches: 4}\n"
               "training: {steps: 2, micro_batch_size: 2, eval_every: 0}\n"
               "data: {train: '" + dir_->file("data") + "/train_*.bin', val: '" + dir_->file("data") + "/val_*.bin'}\n"
               "logging: {every: 1, sample_tokens: 0}\n");
  }
  static void TearDownTestSuite() { delete dir_; }

  // `pptrain train` on two ranks (pp 2: both read data, both write checkpoints and trace
  // parts) must fail with `message` on every rank, before training and within the timeout.
  static CommandResult expect_refusal(const std::string& overrides, const std::string& message) {
    const std::string cmd =
        mpirun(2) + pptrain_bin() + " train " + dir_->file("c.yaml") + " parallel.pp=2 " + overrides;
    CommandResult r = run_command(cmd, 60);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.exit_code, 124) << "timed out:\n" << r.output;
    // The agreed line on each rank, once: "[rank R] error: <message> ..."
    for (int rank : {0, 1}) {
      const std::regex line("\\[rank " + std::to_string(rank) + "\\] error: [^\n]*" +
                            std::regex_replace(message, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)"));
      EXPECT_TRUE(std::regex_search(r.output, line)) << "rank " << rank << " lacks '" << message << "':\n" << r.output;
    }
    EXPECT_EQ(count(r.output, message), 2u) << r.output;
    // The startup line is printed once the Job (the model) exists: it must not appear.
    EXPECT_EQ(r.output.find("pptrain: "), std::string::npos) << "the model was built:\n" << r.output;
    EXPECT_EQ(r.output.find("step 1"), std::string::npos) << r.output;
    return r;
  }
  static TempDir* dir_;
};
TempDir* Preflight::dir_ = nullptr;

}  // namespace

// ---- evaluation and data --------------------------------------------------------------

TEST_F(Preflight, EvaluationWithoutValidationDataIsAnError) {
  expect_refusal("training.eval_every=5 data.val=''", "data.val is empty but training.eval_every is 5");
}

// A 24-layer model of d_model 1024 would take seconds to allocate and initialise; the
// missing shards are reported before it exists.
TEST_F(Preflight, MissingShardsBeforeTheModelExists) {
  expect_refusal("model.n_layer=24 model.d_model=1024 model.n_head=16 data.train=" + dir_->file("none") + "/x_*.bin",
                 "data.train: no file matches");
}

TEST_F(Preflight, BadValidationShardWhenEvaluating) {
  write_file(dir_->file("bad_val.bin"), std::string(1024 + 20, '\1'));
  expect_refusal("training.eval_every=1 data.val=" + dir_->file("bad_val.bin"), "not a token shard");
}

TEST_F(Preflight, TokenBeyondVocabularyIsFoundUpFront) {
  expect_refusal("model.vocab_size=8", ">= model.vocab_size 8");
}

// ---- output paths -----------------------------------------------------------------------

TEST_F(Preflight, UnwritableCheckpointFolders) {
  // As root chmod does not stop writes: pseudo file systems do.
  expect_refusal("checkpoint.dir=/proc", "checkpoint.dir: cannot write in '/proc'");
  expect_refusal("checkpoint.dir=/sys/kernel", "checkpoint.dir: cannot write in '/sys/kernel'");
  write_file(dir_->file("plain"), "a file where a folder should go\n");
  expect_refusal("checkpoint.dir=" + dir_->file("plain") + "/ck", "checkpoint.dir: cannot create directory");
}

TEST_F(Preflight, UnwritableLogFiles) {
  expect_refusal("logging.trace=/sys/kernel/t.json", "logging.trace: cannot write in '/sys/kernel'");
  expect_refusal("logging.metrics=/proc/m/metrics.jsonl", "logging.metrics: cannot create directory '/proc/m'");
  expect_refusal("logging.metrics=" + dir_->path(), "logging.metrics: '" + dir_->path() + "' is a directory");
}

TEST_F(Preflight, ReadOnlyMount) {
  TempDir mnt;
  if (::mount("tmpfs", mnt.path().c_str(), "tmpfs", MS_RDONLY, "size=1m") != 0)
    GTEST_SKIP() << "cannot mount a read-only tmpfs here (not root, or no mount permission)";
  expect_refusal("checkpoint.dir=" + mnt.path(),
                 "checkpoint.dir: cannot write in '" + mnt.path() + "': Read-only file system");
  ::umount(mnt.path().c_str());
}

// Checkpoints of 12·(5000·12·16384²) bytes cannot fit any disk this runs on.
TEST_F(Preflight, CheckpointsLargerThanTheFreeSpace) {
  expect_refusal("checkpoint.dir=" + dir_->file("ck") + " model.d_model=16384 model.n_head=16 model.n_layer=5000",
                 "free, but the run will write up to");
}

// A small folder's shortfall in units that show it (it was "0.01 GiB free ... up to 0.01 GiB").
TEST(OutputSpace, ASmallShortfallIsPrintedInAUnitThatShowsIt) {
  TempDir mnt;
  if (::mount("tmpfs", mnt.path().c_str(), "tmpfs", 0, "size=1m") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (not root, or no mount permission)";
  const std::string error = check_output_dir("checkpoint.dir", mnt.path(), 3.5 * 1024 * 1024);
  ::umount(mnt.path().c_str());
  EXPECT_EQ(error, "checkpoint.dir: '" + mnt.path() + "' has 1.00 MiB free, but the run will write up to 3.50 MiB");
}

// The files that coexist: E already there, S saves to come, keep_last K.
TEST(CheckpointSpace, CountsTheFilesThatCoexist) {
  Config cfg = parse_config("model: {n_layer: 2, n_head: 2, d_model: 16, seq_len: 8, vocab_size: 16}\n"
                            "training: {steps: 10}\ncheckpoint: {dir: x, every: 2, keep_last: 2}\n", "t");
  const double one = checkpoint_space_needed(cfg, 2);  // E = 2 = K: one more at a time
  EXPECT_GT(one, checkpoint_tensor_bytes(cfg.model));
  EXPECT_EQ(checkpoint_space_needed(cfg, 0), 3 * one);  // S = 5: K + 1 at once
  EXPECT_EQ(checkpoint_space_needed(cfg, 7), one);      // old files are pruned after the first save
  cfg.checkpoint.every = 0;                             // S = 1: the final save alone
  EXPECT_EQ(checkpoint_space_needed(cfg, 0), one);
}

// The prediction for a file bounds a real checkpoint of that model from above (and its
// tensors' bytes from below), for gpt2 and llama.
TEST_F(Preflight, CheckpointPredictionBoundsARealFile) {
  for (const std::vector<std::string>& model : {std::vector<std::string>{}, kLlama}) {
    TempDir out;
    const std::string ck = out.file("ck");
    std::string overrides;
    for (const std::string& o : model) overrides += " " + o;
    auto r = run_command(pptrain_bin() + " train " + dir_->file("c.yaml") + " checkpoint.dir=" + ck + overrides, 60);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::vector<std::string> all = model;
    all.push_back("checkpoint.dir=" + ck);
    Config cfg = load_config(dir_->file("c.yaml"), all);
    const double file = double(fs::file_size(ck + "/step_00000002.h5"));
    EXPECT_GE(file, checkpoint_tensor_bytes(cfg.model)) << overrides;
    // one file's prediction: what one more file needs next to an existing one
    EXPECT_LE(file, checkpoint_space_needed(cfg, 1)) << "an HDF5 file larger than its allowance" << overrides;
  }
}

// The parameter count is the elements the model allocates (tp = 1: no padding), gpt2 and
// llama, tied and untied, multi-head and grouped-query attention, heads wider than
// d_model / n_head (mistral) and q/k/v biases (qwen2).
TEST(MemoryEstimate, ParameterCountIsWhatTheModelHolds) {
  const char* models[] = {
      "model: {n_layer: 2, n_head: 2, d_model: 16, seq_len: 8, vocab_size: 16}",
      "model: {n_layer: 2, n_head: 2, d_model: 16, seq_len: 8, vocab_size: 16, tie_embeddings: false}",
      "model: {arch: llama, n_layer: 3, n_head: 4, n_kv_head: 2, d_model: 16, ffn_hidden: 40, seq_len: 8, "
      "vocab_size: 16}",
      "model: {arch: llama, n_layer: 2, n_head: 4, d_model: 16, seq_len: 8, vocab_size: 16, tie_embeddings: true}",
      "model: {arch: mistral, n_layer: 2, n_head: 4, n_kv_head: 2, head_dim: 8, d_model: 16, seq_len: 8, "
      "vocab_size: 16}",
      "model: {arch: qwen2, n_layer: 2, n_head: 4, n_kv_head: 2, d_model: 16, seq_len: 8, vocab_size: 16}",
      "model: {arch: qwen3, n_layer: 2, n_head: 4, n_kv_head: 2, head_dim: 8, d_model: 16, seq_len: 8, "
      "vocab_size: 16}",
  };
  for (const char* yaml : models) {
    const Config cfg = parse_config(yaml, "m.yaml");
    SingleRankModel model(cfg.model, 1, 1);
    double held = 0;
    for (const auto& [name, p] : model.params->all()) held += double(p->numel());
    EXPECT_EQ(global_parameter_count(cfg.model), held) << yaml;
    const std::vector<StageSpec> one_stage = {StageSpec{0, 0, cfg.model.n_layer, true, true}};
    EXPECT_EQ(rank_parameter_count(cfg, one_stage, 0), held) << yaml;
  }
}

// ---- memory -------------------------------------------------------------------------------

TEST_F(Preflight, AModelLargerThanMemoryIsRefusedNamingTheLargestConsumer) {
  // 2000 blocks of d_model 4096: 4e11 parameters, 16 bytes each (masters, gradients,
  // moments). (Not 100000 blocks: the partitioner's cut costs O(stages · layers²).)
  auto r = expect_refusal("model.n_layer=2000 model.d_model=4096 model.n_head=32",
                          "(largest: AdamW moments (fp32 m and v), ");
  EXPECT_NE(r.output.find("GiB of host memory is available"), std::string::npos) << r.output;
  expect_refusal("training.micro_batch_size=1000000", "(largest: activation slots (");
}

// Under an address-space limit (ulimit -v, as some batch systems set) the model cannot be
// allocated at all: without the checks, building it fails with bad_alloc; with them, the
// data and output problems come first, and a model that does not fit is refused by the
// prediction while one that fits trains. One process (mpirun's own mappings would count
// against the limit too), one OpenMP thread.
class AddressSpaceLimit : public Preflight {
 protected:
  // 1.5 GB of address space; the process maps about 0.5 GiB before the checks.
  static CommandResult train_limited(const std::string& overrides) {
    return run_command("ulimit -v 1500000 && OMP_NUM_THREADS=1 " + pptrain_bin() + " train " + dir_->file("c.yaml") +
                           " " + overrides,
                       60);
  }
  // 12 blocks of d_model 1024: 151 M parameters, 2.4 GB of masters, gradients and moments.
  static constexpr const char* kLarge = "model.n_layer=12 model.d_model=1024 model.n_head=16 ";
};

TEST_F(AddressSpaceLimit, DataAndOutputProblemsComeBeforeTheModel) {
  for (const auto& [overrides, message] :
       {std::pair<std::string, std::string>{"data.train=" + dir_->file("none") + "/x_*.bin",
                                            "data.train: no file matches"},
        {"checkpoint.dir=/proc", "checkpoint.dir: cannot write in '/proc'"}}) {
    CommandResult r = train_limited(kLarge + overrides);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("alloc"), std::string::npos) << "the model was allocated first:\n" << r.output;
  }
}

TEST_F(AddressSpaceLimit, AModelThatDoesNotFitIsRefusedOneThatFitsTrains) {
  CommandResult r = train_limited(kLarge);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("memory: this rank needs an estimated 2.2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(address-space limit, ulimit -v)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("alloc"), std::string::npos) << r.output;
  // 2 blocks of d_model 1024: 25 M parameters, 0.4 GB predicted, under ~0.9 GiB of headroom.
  r = train_limited("model.n_layer=2 model.d_model=1024 model.n_head=16 training.steps=1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step 1/1"), std::string::npos) << r.output;
}

// What a job allocates, counted by tests/mpi/memory_estimate: the prediction counts every
// buffer exactly, so peak <= predicted <= peak + slack, where the slack is the one stated
// upper bound (an io slot per sending stage for microbatches whose sends are pending).
TEST_F(Preflight, MemoryPredictionEqualsWhatTheJobAllocates) {
  const std::string cpu = mpi_test_program("memory_estimate"), cuda = mpi_test_program("memory_estimate_emu");
  for (const std::string& program : {cpu, cuda})
    ASSERT_TRUE(fs::exists(program)) << program << " is missing: build it with make (mk/mpi_tests.mk)";
  struct Case {
    int ranks;
    std::string overrides;
    bool emulated_cuda = false;
  };
  // The emulated cuda backend on one rank only: NcclComm needs the cuda backend itself,
  // not the counting wrapper around it.
  const std::string bf16 = "device=cuda training.precision=bf16";
  std::string llama;  // GQA (2 kv heads for 4), its own LM head
  for (const std::string& o : kLlama) llama += o + " ";
  const Case cases[] = {
      {1, "device=cuda", true},
      {1, bf16, true},
      {1, bf16 + " training.eval_every=1", true},
      {1, bf16 + " model.attention=flash model.d_model=64", true},  // head size 32
      {1, ""},
      {1, "parallel.schedule=gpipe"},
      {1, "training.eval_every=1"},  // evaluation keeps all m microbatches live
      {1, "model.attention=flash"},
      {2, "parallel.pp=2"},
      {2, "parallel.pp=2 parallel.schedule=zbv parallel.stages_per_rank=2 model.n_layer=4"},
      {2, "parallel.pp=2 parallel.schedule=interleaved-1f1b parallel.stages_per_rank=2 model.n_layer=4"
          " training.eval_every=1"},
      {2, "parallel.pp=2 parallel.schedule=zb-h2 parallel.microbatches=6"},
      // Stages of no block: only the embedding, only the head (one rank holds both under V).
      {2, "parallel.pp=2 parallel.layers_per_stage=[0,2]"},
      {2, "parallel.pp=2 parallel.layers_per_stage=[2,0] training.eval_every=1"},
      {2, "parallel.pp=2 parallel.schedule=zbv parallel.stages_per_rank=2 parallel.layers_per_stage=[0,1,1,0]"},
      {2, "parallel.tp=2"},
      {2, "parallel.dp=2"},
      {2, "parallel.dp=2 parallel.zero=1"},  // moments of one 1/dp range of the arena
      {2, "parallel.dp=2 parallel.zero=1 training.post_validation=true"},
      {1, llama},
      {1, llama + "model.attention=flash training.eval_every=1"},
      {2, llama + "parallel.pp=2 parallel.schedule=zbv parallel.stages_per_rank=2 model.n_layer=4"},
      {2, llama + "parallel.pp=2 parallel.layers_per_stage=[2,0] model.tie_embeddings=true"},
      {2, llama + "parallel.tp=2"},
      // training.recompute: full's block slots live from I to W, the stage's scratch once.
      {1, "training.recompute=attention"},
      {1, "training.recompute=full training.eval_every=1"},
      {1, bf16 + " training.recompute=full", true},
      {1, bf16 + " training.recompute=attention training.eval_every=1", true},
      {2, "parallel.pp=2 parallel.schedule=zbv parallel.stages_per_rank=2 model.n_layer=4 training.recompute=full"},
      {2, "parallel.pp=2 parallel.schedule=zb-h2 parallel.microbatches=6 training.recompute=attention"},
      {2, "parallel.tp=2 training.recompute=full"},
      {2, llama + "parallel.pp=2 parallel.schedule=zbv parallel.stages_per_rank=2 model.n_layer=4"
          " training.recompute=full"},
  };
  const std::regex line(R"(rank (\d+) peak (\d+) predicted (\d+) slack (\d+))");
  for (const Case& c : cases) {
    const std::string& program = c.emulated_cuda ? cuda : cpu;
    auto r = run_command(mpirun(c.ranks) + program + " " + dir_->file("c.yaml") + " " + c.overrides, 60);
    ASSERT_EQ(r.exit_code, 0) << c.overrides << "\n" << r.output;
    int ranks = 0;
    for (std::sregex_iterator it(r.output.begin(), r.output.end(), line), end; it != end; ++it, ++ranks) {
      const double peak = std::stod((*it)[2]), predicted = std::stod((*it)[3]), slack = std::stod((*it)[4]);
      EXPECT_LE(peak, predicted) << c.overrides << ", rank " << (*it)[1] << ": the job allocated more than predicted";
      EXPECT_LE(predicted, peak + slack) << c.overrides << ", rank " << (*it)[1] << ": predicted more than allocated";
    }
    EXPECT_EQ(ranks, c.ranks) << r.output;
  }
}

// The live microbatches read off a program agree with the simulator's peak activations
// (one stage per rank; memory held from F to W: act_i = 0, act_w = 1).
TEST(LivePeaks, AgreeWithTheSimulator) {
  for (const std::string name : {"gpipe", "1f1b", "zb-h1", "zb-h2"})
    for (int pp : {2, 3, 4})
      for (int m : {4, 8}) {
        const pipeline::Schedule s = pipeline::prepare_schedule(name, pp, m, 1);
        pipeline::CostModel cost;
        cost.act_input = 0;
        cost.act_weight = 1;
        const pipeline::SimResult sim = pipeline::simulate(s, cost);
        for (int r = 0; r < pp; ++r)
          EXPECT_EQ(peak_live_microbatches(s, r).layers[r], sim.peak_activations[r])
              << name << " pp " << pp << " m " << m << " rank " << r;
      }
}
