// The validator: each rule is shown a good program broken in exactly that one way, and must
// reject it with a one-line message naming rank, position and action.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/error.h"
#include "pipeline/dependencies.h"
#include "pipeline/lower.h"
#include "pipeline/registry.h"
#include "pipeline/validate.h"

using namespace pptrain;
using namespace pptrain::pipeline;

namespace {

std::string rejection(const Schedule& s, ValidateOptions opts = {}) {
  try {
    validate(s, opts);
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return msg;
  }
  return "accepted";
}

Action parse(const char* text) { return parse_action(text); }

// Position of `text` on `rank`, asserting it is there.
size_t position(const Schedule& s, int rank, const char* text) {
  const auto& actions = s.program[rank];
  auto it = std::find(actions.begin(), actions.end(), parse(text));
  EXPECT_NE(it, actions.end()) << text;
  return size_t(it - actions.begin());
}

void erase(Schedule& s, int rank, const char* text) {
  s.program[rank].erase(s.program[rank].begin() + position(s, rank, text));
}

// Moves `text` on `rank` to `to` (an index in the list without it).
void move(Schedule& s, int rank, const char* text, size_t to) {
  erase(s, rank, text);
  s.program[rank].insert(s.program[rank].begin() + to, parse(text));
}

Schedule one_f_one_b(int pp, int m) { return generate_schedule("1f1b", pp, m, 1); }
Schedule zb_h1(int pp, int m) { return generate_schedule("zb-h1", pp, m, 1); }

}  // namespace

TEST(Validate, AcceptsTheGoodProgramsUsedBelow) {
  EXPECT_EQ(rejection(one_f_one_b(4, 4)), "accepted");
  EXPECT_EQ(rejection(zb_h1(3, 4)), "accepted");
  EXPECT_EQ(rejection(lower(one_f_one_b(2, 2))), "accepted");
  EXPECT_EQ(rejection(lower(one_f_one_b(2, 2)), {0, true}), "accepted");
}

TEST(Validate, WrongNumberOfRankLists) {
  Schedule s = one_f_one_b(4, 4);
  s.program.pop_back();
  EXPECT_EQ(rejection(s), "schedule '1f1b': 3 rank lists, expected one per rank (pp=4)");
}

TEST(Validate, StageOrMicrobatchThatDoesNotExist) {
  Schedule s = one_f_one_b(4, 4);
  s.program[1].push_back({Op::F, 9, 0});
  EXPECT_EQ(rejection(s), "rank 1, position 8, action 9F0: stage 9 does not exist (stages 0..3)");
  s = one_f_one_b(4, 4);
  s.program[2][0].microbatch = 4;
  EXPECT_EQ(rejection(s),
            "rank 2, position 0, action 2F4: microbatch 4 does not exist (microbatches 0..3)");
}

TEST(Validate, ActionOnTheWrongRank) {
  Schedule s = one_f_one_b(4, 4);
  s.program[1][0].stage = 2;
  EXPECT_EQ(rejection(s), "rank 1, position 0, action 2F0: stage 2 lives on rank 2 (loop placement)");
}

TEST(Validate, DuplicateF) {
  Schedule s = one_f_one_b(4, 4);
  s.program[0].push_back(parse("0F1"));
  EXPECT_EQ(rejection(s), "rank 0, position 8, action 0F1: duplicate (also at position 1)");
}

TEST(Validate, MissingF) {
  Schedule s = one_f_one_b(4, 4);
  erase(s, 2, "2F3");
  EXPECT_EQ(rejection(s), "rank 2: missing 2F3 (stage 2 microbatch 3 never runs forward)");
}

TEST(Validate, MissingB) {
  Schedule s = one_f_one_b(4, 4);
  erase(s, 1, "1B2");
  EXPECT_EQ(rejection(s),
            "rank 1: missing 1B2 (or 1I2 and 1W2): stage 1 microbatch 2 never runs backward");
}

TEST(Validate, BothBAndI) {
  Schedule s = one_f_one_b(4, 4);
  s.program[3].push_back(parse("3I1"));
  EXPECT_EQ(rejection(s), "rank 3, position 3, action 3B1: stage 3 microbatch 1 also has 3I1 at "
                          "position 8 (a backward is either B or I and W)");
}

TEST(Validate, MissingW) {
  Schedule s = zb_h1(3, 4);
  size_t at = position(s, 1, "1I0");
  erase(s, 1, "1W0");
  EXPECT_EQ(rejection(s), cat("rank 1, position ", at, ", action 1I0: its weight gradient 1W0 is missing"));
}

TEST(Validate, MissingI) {
  Schedule s = zb_h1(3, 4);
  erase(s, 1, "1I0");
  size_t at = position(s, 1, "1W0");
  EXPECT_EQ(rejection(s), cat("rank 1, position ", at, ", action 1W0: its input gradient 1I0 is missing"));
}

TEST(Validate, DuplicateW) {
  Schedule s = zb_h1(3, 4);
  s.program[2].push_back(parse("2W3"));
  size_t first = position(s, 2, "2W3");
  EXPECT_EQ(rejection(s), cat("rank 2, position ", s.program[2].size() - 1,
                              ", action 2W3: duplicate (also at position ", first, ")"));
}

TEST(Validate, ActionBeforeItsDependency) {
  // The last rank runs 3F0 then 3B0; swapped, the backward comes before its forward.
  Schedule s = one_f_one_b(4, 4);
  move(s, 3, "3B0", 0);
  EXPECT_EQ(rejection(s), "rank 3, position 0, action 3B0: runs before its dependency 3F0 (position 1)");
  // A forward edge inside one rank: with the V placement the last rank holds stages p-1
  // and p, and p's forward consumes p-1's output locally.
  Schedule v = generate_schedule("zbv", 2, 3, 2);  // rank 1 holds stages 1 and 2
  size_t f2 = position(v, 1, "2F0");
  move(v, 1, "1F0", f2);  // 1F0 now right after 2F0 (its consumer)
  EXPECT_EQ(rejection(v), cat("rank 1, position ", f2 - 1,
                              ", action 2F0: runs before its dependency 1F0 (position ", f2, ")"));
}

TEST(Validate, WBeforeItsI) {
  Schedule s = zb_h1(3, 4);
  size_t i = position(s, 2, "2I0");
  move(s, 2, "2W0", i);
  EXPECT_EQ(rejection(s), cat("rank 2, position ", i, ", action 2W0: W before its I (2I0 at position ",
                              i + 1, ")"));
}

TEST(Validate, UnmatchedSendAndRecv) {
  Schedule lowered = lower(one_f_one_b(2, 2));
  Schedule s = lowered;
  erase(s, 1, "1RECV_F1");
  EXPECT_EQ(rejection(s), cat("rank 0, position ", position(s, 0, "0SEND_F1"),
                              ", action 0SEND_F1: unmatched, rank 1 has no 1RECV_F1"));
  s = lowered;
  erase(s, 0, "0SEND_F1");
  EXPECT_EQ(rejection(s), cat("rank 1, position ", position(s, 1, "1RECV_F1"),
                              ", action 1RECV_F1: unmatched, rank 0 has no 0SEND_F1"));
  s = lowered;
  erase(s, 1, "1SEND_B0");
  erase(s, 0, "0RECV_B0");
  EXPECT_EQ(rejection(s), cat("rank 0, position ", position(s, 0, "0B0"),
                              ", action 0B0: its input from rank 1 is never exchanged (no 1SEND_B0 "
                              "on rank 1, no 0RECV_B0 here)"));
}

TEST(Validate, SendOrRecvInTheWrongPlace) {
  Schedule lowered = lower(one_f_one_b(2, 2));
  Schedule s = lowered;
  move(s, 1, "1RECV_F0", position(s, 1, "1F0") + 1);  // posted after its consumer ran
  EXPECT_EQ(rejection(s), cat("rank 1, position ", position(s, 1, "1F0"),
                              ", action 1F0: runs before its dependency 1RECV_F0 (position ",
                              position(s, 1, "1RECV_F0"), ")"));
  s = lowered;
  move(s, 0, "0SEND_F0", 0);  // sent before it was computed
  EXPECT_EQ(rejection(s), "rank 0, position 0, action 0SEND_F0: runs before its dependency 0F0 (position 1)");
  s = lowered;
  s.program[1].push_back(parse("1SEND_F1"));  // nothing after the last stage
  EXPECT_EQ(rejection(s), cat("rank 1, position ", s.program[1].size() - 1,
                              ", action 1SEND_F1: no message to exchange (the last stage sends "
                              "nothing forward)"));
  Schedule local = lower(generate_schedule("zbv", 2, 3, 2));  // stages 1 and 2 share rank 1
  local.program[1].insert(local.program[1].begin(), parse("1SEND_F0"));
  EXPECT_EQ(rejection(local), "rank 1, position 0, action 1SEND_F0: no message to exchange (stage 2 "
                              "is on the same rank)");
}

TEST(Validate, DeadlockInAComputeProgram) {
  // Rank 0 wants 1B0 before sending 0F1; rank 1 wants 0F1 before running 1B0.
  Schedule s = one_f_one_b(2, 2);
  s.program[0] = {parse("0F0"), parse("0B0"), parse("0F1"), parse("0B1")};
  s.program[1] = {parse("1F0"), parse("1F1"), parse("1B0"), parse("1B1")};
  EXPECT_EQ(rejection(s), "deadlock: rank 0, position 1, action 0B0 waits forever for 1B0 on rank 1 "
                          "(rank 1 is stuck at position 1, action 1F1)");
}

TEST(Validate, DeadlockInALoweredProgram) {
  // Rank 0 posts the receive of 1B1's gradient first and blocks before sending anything.
  Schedule s = lower(one_f_one_b(2, 2));
  move(s, 0, "0RECV_B1", 0);
  EXPECT_EQ(rejection(s), "deadlock: rank 0, position 0, action 0RECV_B1 waits forever for 1SEND_B1 "
                          "on rank 1 (rank 1 is stuck at position 0, action 1RECV_F0)");
}

TEST(Validate, DeadlockWithBlockingSendsOnly) {
  // The naive lowering (RECV right before its consumer, SEND right after its producer)
  // is fine with non-blocking sends, but with sends that wait for their receive, rank 0
  // blocks sending 0F1 while rank 1 blocks sending the gradient of microbatch 0.
  Schedule s = one_f_one_b(2, 2);
  Schedule naive = s;
  for (int r = 0; r < 2; ++r) {
    naive.program[r].clear();
    for (const Action& a : s.program[r]) {
      if (auto in = incoming_message(s, a)) naive.program[r].push_back(in->recv);
      naive.program[r].push_back(a);
      if (auto out = outgoing_message(s, a)) naive.program[r].push_back(out->send);
    }
  }
  EXPECT_EQ(rejection(naive), "accepted");
  EXPECT_EQ(rejection(naive, {0, true}),
            "deadlock: rank 0, position 3, action 0SEND_F1 waits forever for 1RECV_F1 to be posted on "
            "rank 1 (rank 1 is stuck at position 3, action 1SEND_B0)");
  EXPECT_EQ(rejection(lower(s), {0, true}), "accepted");  // our lowering posts early
}

TEST(Validate, InFlightActivationsAboveTheLimit) {
  Schedule s = one_f_one_b(4, 8);
  EXPECT_EQ(rejection(s, {4, false}), "accepted");
  EXPECT_EQ(rejection(s, {3, false}), "rank 0, position 3, action 0F3: 4 microbatches of activations "
                                      "in flight, above the limit 3");
  // Half-size stages count half: ZB-V holds 2p of them, p microbatches.
  Schedule v = generate_schedule("zbv", 4, 8, 2);
  EXPECT_EQ(rejection(v, {4, false}), "accepted");
  EXPECT_EQ(rejection(v, {3.5, false}), "rank 0, position 7, action 7F0: 4 microbatches of "
                                        "activations in flight, above the limit 3.5");
}
