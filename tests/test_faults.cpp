// Planted faults (core/faults.h): the PPTRAIN_FAULTS syntax, one-line errors for unknown
// names and malformed entries, and selection by rank. Where each fault acts, and that the
// suites reject it, is tested by the suites themselves (test_parallel_equivalence,
// test_checkpoint_train, test_resume_cli, test_cuda_backend_*).
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/faults.h"
#include "support/test_util.h"

using namespace pptrain;
using namespace pptrain::testing;

namespace {

std::string error_of(const std::string& spec) {
  try {
    Faults::parse(spec);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Faults, ParsesNameRankTargetAndValue) {
  const Faults f = Faults::parse("grad_scale@1:h.0.mlp.fc.weight:1.001,skip_tp_allreduce:row,skip_weight_decay");
  ASSERT_EQ(f.all().size(), 3u);
  const Fault& g = f.all()[0];
  EXPECT_EQ(g.name, "grad_scale");
  EXPECT_EQ(g.rank, 1);
  EXPECT_EQ(g.target, "h.0.mlp.fc.weight");
  ASSERT_TRUE(g.value.has_value());
  EXPECT_DOUBLE_EQ(*g.value, 1.001);
  EXPECT_EQ(g.text(), "grad_scale@1:h.0.mlp.fc.weight:1.001");
  EXPECT_EQ(f.all()[1].rank, -1);
  EXPECT_EQ(f.all()[1].target, "row");
  EXPECT_FALSE(f.all()[2].value.has_value());
  EXPECT_TRUE(Faults::parse("").empty());
}

TEST(Faults, SelectsTheFaultsOfOneRank) {
  const Faults f = Faults::parse("drop_microbatch@0:3,repeat_update@1,resume_zero:optim/m/wte.weight");
  const Faults zero = f.on_rank(0), one = f.on_rank(1), two = f.on_rank(2);
  EXPECT_NE(zero.find("drop_microbatch"), nullptr);
  EXPECT_EQ(zero.find("repeat_update"), nullptr);
  EXPECT_NE(one.find("repeat_update"), nullptr);
  EXPECT_EQ(two.all().size(), 1u);  // the fault on every rank
  EXPECT_EQ(f.find_all("resume_zero").size(), 1u);
}

TEST(Faults, BadEntriesAreOneLineErrors) {
  EXPECT_EQ(error_of("nan_guard"),
            "PPTRAIN_FAULTS: unknown fault 'nan_guard' (known: grad_scale, skip_tp_allreduce, skip_recompute, "
            "sync_each_action, drop_microbatch, skip_weight_decay, repeat_update, refresh_bf16, resume_zero, checkpoint_write_fail, "
            "checkpoint_abandon_desync, nan_grad, "
            "fail_at, checkpoint_crash, spike_update, freeze, freeze_save, zero_keep_stale, uncounted_release, blas_detected, "
            "cpu_topology, fma_rate, gemm_missing)");
  EXPECT_EQ(error_of("grad_scale:wte.weight"),
            "PPTRAIN_FAULTS: fault 'grad_scale:wte.weight' needs a value: grad_scale:TENSOR:VALUE");
  EXPECT_EQ(error_of("grad_scale:wte.weight:x"), "PPTRAIN_FAULTS: fault 'grad_scale:wte.weight:x': value 'x' is not a number");
  EXPECT_EQ(error_of("skip_tp_allreduce:diagonal"),
            "PPTRAIN_FAULTS: fault 'skip_tp_allreduce:diagonal': target 'diagonal' should be row|col");
  EXPECT_EQ(error_of("drop_microbatch:-1"),
            "PPTRAIN_FAULTS: fault 'drop_microbatch:-1': target '-1' should be a microbatch index");
  EXPECT_EQ(error_of("repeat_update@x"), "PPTRAIN_FAULTS: fault 'repeat_update@x': '@x' should be a world rank (an integer >= 0)");
  EXPECT_EQ(error_of("repeat_update:h.0"), "PPTRAIN_FAULTS: fault 'repeat_update:h.0' takes no target");
  EXPECT_EQ(error_of("resume_zero"), "PPTRAIN_FAULTS: fault 'resume_zero' needs a target: resume_zero:DATASET");
  EXPECT_EQ(error_of("resume_zero:optim/x/wte.weight"),
            "PPTRAIN_FAULTS: fault 'resume_zero:optim/x/wte.weight': target 'optim/x/wte.weight' should be "
            "model/NAME, optim/m/NAME or optim/v/NAME");
  EXPECT_EQ(error_of("repeat_update,,skip_weight_decay"), "PPTRAIN_FAULTS: empty fault in 'repeat_update,,skip_weight_decay'");
  EXPECT_EQ(error_of("freeze@1:0"), "PPTRAIN_FAULTS: fault 'freeze@1:0': target '0' should be a step (>= 1)");
  EXPECT_EQ(error_of("nan_grad:wte.weight"), "PPTRAIN_FAULTS: fault 'nan_grad:wte.weight' needs a value: nan_grad:TENSOR:VALUE");
  EXPECT_EQ(error_of("a:b:c:d"), "PPTRAIN_FAULTS: fault 'a:b:c:d' should be NAME[@RANK][:TARGET[:VALUE]]");
}

TEST(Faults, TheBinaryAnnouncesEachActiveFaultOnceAndRejectsUnknownOnes) {
  TempDir dir;
  auto r = prepare_markov_corpus(dir.file("d"), 11, 2000);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  write_file(dir.file("c.yaml"),
             "model: {n_layer: 2, n_head: 2, d_model: 8, seq_len: 4, vocab_size: 11}\n"
             "training: {steps: 1, micro_batch_size: 1, eval_every: 0}\n"
             "data: {train: '" + dir.file("d") + "/train_*.bin'}\n"
             "logging: {every: 1, sample_tokens: 0}\n");
  const std::string train = mpirun(2) + pptrain_bin() + " train " + dir.file("c.yaml") + " parallel.pp=2";
  r = run_command("PPTRAIN_FAULTS=skip_weight_decay,repeat_update@1 " + train);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto count = [&](const std::string& part) {
    int n = 0;
    for (size_t pos = r.output.find(part); pos != std::string::npos; pos = r.output.find(part, pos + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("warning: planted fault skip_weight_decay is active"), 1) << r.output;
  EXPECT_EQ(count("[rank 1] warning: planted fault repeat_update@1 is active"), 1) << r.output;

  r = run_command("PPTRAIN_FAULTS=bogus " + train);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(count("[rank 0] error: PPTRAIN_FAULTS: unknown fault 'bogus'"), 1) << r.output;

  // A tensor the model lacks would plant nothing, and the test it guards would pass for the
  // wrong reason.
  for (const std::string& entry : {std::string("grad_scale:h.0.mlp.fc.wieght:2"), std::string("resume_zero:optim/m/h.9.ln_1.bias")}) {
    r = run_command("PPTRAIN_FAULTS=" + entry + " " + train);
    EXPECT_NE(r.exit_code, 0) << r.output;
    const std::string name = entry.find("wieght") != std::string::npos ? "h.0.mlp.fc.wieght" : "h.9.ln_1.bias";
    EXPECT_EQ(count("[rank 0] error: PPTRAIN_FAULTS: fault '" + entry + "': the model has no tensor '" + name + "'"), 1)
        << r.output;
  }
}
