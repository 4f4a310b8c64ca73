// The measured timeline: logging.trace writes one Chrome trace for all ranks (a track
// per rank, actions in IR notation, receive waits visible), and the log reports the
// measured bubble.
#include <gtest/gtest.h>

#include <regex>

#include "support/test_util.h"

using namespace pptrain::testing;

TEST(Trace, ChromeTraceHasATrackPerRankAndEveryAction) {
  TempDir dir;
  auto r = prepare_markov_corpus(dir.file("d"), 16, 5000);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  write_file(dir.file("c.yaml"),
             "model: {n_layer: 4, n_head: 2, d_model: 16, seq_len: 8, vocab_size: 16}\n"
             "parallel: {pp: 2, schedule: zbv, stages_per_rank: 2, microbatches: 4}\n"
             "training: {steps: 2, micro_batch_size: 2, eval_every: 0}\n"
             "data: {train: '" + dir.file("d") + "/train_*.bin'}\n"
             "logging: {every: 1, trace: '" + dir.file("trace.json") + "', metrics: '" + dir.file("m.jsonl") + "'}\n");
  r = run_command(mpirun(2) + pptrain_bin() + " train " + dir.file("c.yaml"), 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::string trace = read_file(dir.file("trace.json"));
  ASSERT_EQ(trace.rfind("{\"traceEvents\": [", 0), 0u) << trace.substr(0, 200);
  EXPECT_NE(trace.find("\"name\": \"rank 0 (dp 0 pp 0 tp 0)\""), std::string::npos);
  EXPECT_NE(trace.find("\"name\": \"rank 1 (dp 0 pp 1 tp 0)\""), std::string::npos);
  // every compute action of the zbv program appears, twice (two steps): F, I and W of
  // 4 stages x 4 microbatches
  for (const char* op : {"F", "I", "W"}) {
    std::regex re(std::string("\"name\": \"[0-3]") + op + "[0-3]\"");
    auto n = std::distance(std::sregex_iterator(trace.begin(), trace.end(), re), std::sregex_iterator());
    EXPECT_EQ(n, 2 * 16) << op;
  }
  EXPECT_NE(trace.find("\"name\": \"wait "), std::string::npos) << "receive waits are not in the trace";
  // Every transfer on its own track (2), from posting to completion. zbv on 2 ranks places
  // stages 0 and 3 on rank 0 and 1 and 2 on rank 1, so each microbatch crosses ranks at
  // 0 -> 1 and 2 -> 3 forward and back again: 4 transfers, each a send slice on one rank and
  // a receive slice on the other: 8 slices x 4 microbatches x 2 steps = 64.
  std::regex transfer("\"name\": \"[0-3](SEND|RECV)_[FB][0-3]\", \"cat\": \"comm\", \"ph\": \"X\", \"pid\": [01], "
                      "\"tid\": 2,");
  EXPECT_EQ(std::distance(std::sregex_iterator(trace.begin(), trace.end(), transfer), std::sregex_iterator()), 64)
      << trace.substr(0, 2000);
  EXPECT_NE(trace.find("\"name\": \"pipeline transfers, from posting to completion seen\""), std::string::npos);
  EXPECT_EQ(trace.find(".part"), std::string::npos);
  // no per-rank part files left behind
  EXPECT_NE(run_command("ls " + dir.path()).output.find("trace.json"), std::string::npos);
  EXPECT_EQ(run_command("ls " + dir.path()).output.find(".part"), std::string::npos);
  // the metrics carry the measured bubble, a fraction in [0, 1)
  std::string metrics = read_file(dir.file("m.jsonl"));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(metrics, m, std::regex("\"bubble\": ([0-9.]+)"))) << metrics;
  double bubble = std::stod(m[1]);
  EXPECT_GE(bubble, 0.0);
  EXPECT_LT(bubble, 1.0);
}
