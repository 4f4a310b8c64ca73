// The per-stage recompute choice (partition/recompute_choice.h): stages with more
// microbatches in flight recompute first; a limit between none and full recomputes just
// enough stages, on the partitioner's exact split for that choice; no limit is none, and
// a limit below every stage under full names the smallest that fits.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "partition/partitioner.h"
#include "partition/recompute_choice.h"
#include "pipeline/registry.h"
#include "support/layer_costs.h"
#include "support/test_util.h"

using namespace pptrain;
using pipeline::Schedule;
using pptrain::testing::layer;
using pptrain::testing::max_of;

namespace {

// A block whose recompute saves most of its bytes for one more forward in I.
CostProfile recompute_profile(const std::string& attention) {
  CostProfile p;
  p.attention = attention;
  p.embedding = layer(0.2, 0, 0.2, 0, 8, 300, 600);
  p.block = layer(1, 1.1, 0.7, 0, 40, 100, 200);
  p.block_attention = layer(1, 1.4, 0.7, 0, 30, 100, 200);
  p.block_full = layer(1, 2.1, 0.7, 0, 4, 100, 200);
  p.block_full.act_from_input_bytes = 30;
  p.head = layer(0.8, 0.9, 0.5, 0, 10, 300, 600);
  p.transfer_ms = 0.05;
  return p;
}

}  // namespace

TEST(RecomputeChoice, StagesWithMoreMicrobatchesInFlightComeFirst) {
  // 1F1B: stage s holds p - s microbatches at most.
  EXPECT_EQ(stages_by_microbatches_in_flight(pipeline::generate_schedule("1f1b", 4, 8, 1)),
            (std::vector<int>{0, 1, 2, 3}));
  // GPipe: all m on every stage; ties in stage order.
  EXPECT_EQ(stages_by_microbatches_in_flight(pipeline::generate_schedule("gpipe", 3, 4, 1)),
            (std::vector<int>{0, 1, 2}));
}

TEST(RecomputeChoice, ALimitBetweenNoneAndFullRecomputesTheFirstStageFirst) {
  const CostProfile p = recompute_profile("flash");  // fused: only full saves bytes
  const Schedule s = pipeline::generate_schedule("1f1b", 2, 4, 1);
  const int n_layer = 4;
  const StageRecompute none = {"none", "none"}, first = {"full", "none"}, full = {"full", "full"};
  const double least_none = max_of(min_memory_partition(p, s, n_layer, none).peak_bytes);
  const double least_first = max_of(min_memory_partition(p, s, n_layer, first).peak_bytes);
  const double least_full = max_of(min_memory_partition(p, s, n_layer, full).peak_bytes);
  ASSERT_LT(least_first, least_none);
  ASSERT_LE(least_full, least_first);
  const double limit = (least_first + least_none) / 2;

  const RecomputePlan chosen = choose_recompute(p, s, n_layer, limit);
  EXPECT_EQ(chosen.recompute, first) << recompute_text(chosen.recompute);
  EXPECT_LE(max_of(chosen.partition.peak_bytes), limit);
  // Exact for that choice: the partitioner's split under the limit.
  const Partition exact = partition_stages(p, s, n_layer, limit, first);
  EXPECT_EQ(chosen.partition.blocks_per_stage, exact.blocks_per_stage);
  EXPECT_EQ(chosen.partition.step_ms, exact.step_ms);
  // Slower than none with no limit (one more forward per block of stage 0), faster than
  // every stage recomputing under the same limit.
  const double unlimited = partition_stages(p, s, n_layer, 0).step_ms;
  EXPECT_GE(chosen.partition.step_ms, unlimited);
  EXPECT_LE(chosen.partition.step_ms, partition_stages(p, s, n_layer, limit, full).step_ms);
  EXPECT_GT(chosen.partition.step_ms, unlimited);  // the limit binds: the recompute costs time

  // With naive attention the cheaper mode is tried first on that stage: attention drops 10
  // of the 40 bytes; where that is not enough the stage goes on to full.
  const CostProfile naive = recompute_profile("naive");
  const RecomputePlan n = choose_recompute(naive, s, n_layer, limit);
  EXPECT_EQ(n.recompute[1], "none");
  EXPECT_NE(n.recompute[0], "none");
  if (n.recompute[0] == "full") {
    EXPECT_THROW(partition_stages(naive, s, n_layer, limit, {"attention", "none"}), Error);
  }
}

TEST(RecomputeChoice, NoLimitIsNoneAndAnInfeasibleLimitNamesTheSmallest) {
  const CostProfile p = recompute_profile("flash");
  const Schedule s = pipeline::generate_schedule("1f1b", 2, 4, 1);
  const RecomputePlan free = choose_recompute(p, s, 4, 0);
  EXPECT_EQ(free.recompute, (StageRecompute{"none", "none"}));
  EXPECT_EQ(free.partition.step_ms, partition_stages(p, s, 4, 0).step_ms);
  // A limit none fits: none.
  const double least_none = max_of(min_memory_partition(p, s, 4).peak_bytes);
  EXPECT_EQ(choose_recompute(p, s, 4, least_none * 1.01).recompute, (StageRecompute{"none", "none"}));
  // Below what every stage under full needs: one line naming that.
  const double least_full = max_of(min_memory_partition(p, s, 4, {"full", "full"}).peak_bytes);
  try {
    choose_recompute(p, s, 4, least_full * 0.9);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_NE(msg.find("even with every stage under full recompute"), std::string::npos) << msg;
    EXPECT_NE(msg.find(cat("the smallest limit that fits is ", std::llround(std::ceil(least_full)), " bytes")),
              std::string::npos)
        << msg;
  }
}
