// Schedules as text: PyTorch's action notation, CSV files (round trip, hand-written
// programs, malformed files), the backward-form rewrites, where lowering puts receives,
// and the `pptrain schedule` command in every output format.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "core/error.h"
#include "pipeline/csv.h"
#include "pipeline/dependencies.h"
#include "pipeline/lower.h"
#include "pipeline/registry.h"
#include "pipeline/simulate.h"
#include "pipeline/transform.h"
#include "pipeline/validate.h"
#include "support/error_of.h"
#include "support/test_util.h"

using namespace pptrain;
using namespace pptrain::pipeline;
namespace util = pptrain::testing;
using util::TempDir;
using pptrain::testing::error_of;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

util::CommandResult pptrain_schedule(const std::string& args) {
  return util::run_command(util::pptrain_bin() + " schedule " + args, 60);
}

}  // namespace

TEST(ActionNotation, PrintsAndParsesPyTorchNotation) {
  EXPECT_EQ(to_string({Op::F, 2, 0}), "2F0");
  EXPECT_EQ(to_string({Op::I, 3, 1}), "3I1");
  EXPECT_EQ(to_string({Op::W, 1, 0}), "1W0");
  EXPECT_EQ(to_string({Op::B, 0, 12}), "0B12");
  EXPECT_EQ(to_string({Op::SEND_F, 2, 1}), "2SEND_F1");
  EXPECT_EQ(to_string({Op::RECV_B, 10, 31}), "10RECV_B31");
  for (Op op : {Op::F, Op::B, Op::I, Op::W, Op::SEND_F, Op::RECV_F, Op::SEND_B, Op::RECV_B}) {
    Action a{op, 7, 23};
    EXPECT_EQ(parse_action(to_string(a)), a);
  }
  EXPECT_EQ(parse_action("  1RECV_F4 \r"), (Action{Op::RECV_F, 1, 4}));
}

TEST(ActionNotation, RejectsMalformedTokensInOneLine) {
  EXPECT_EQ(error_of([] { parse_action("F0"); }),
            "action 'F0': no stage number in front (expected <stage><OP><microbatch>, e.g. 2F0, 1SEND_B3)");
  EXPECT_TRUE(contains(error_of([] { parse_action("2X0"); }), "action '2X0': unknown operation"));
  EXPECT_TRUE(contains(error_of([] { parse_action("2F"); }), "action '2F': no microbatch number"));
  EXPECT_TRUE(contains(error_of([] { parse_action("2F0x"); }), "action '2F0x': unexpected characters"));
  EXPECT_TRUE(contains(error_of([] { parse_action("2UNSHARD"); }), "no microbatch"));
  EXPECT_TRUE(contains(error_of([] { parse_action("99999999999F0"); }), "no stage number"));
}

TEST(ScheduleCsv, RoundTripsEveryGeneratorThroughAFile) {
  TempDir dir;
  for (const std::string& name : schedule_names()) {
    SCOPED_TRACE(name);
    Schedule s = lower(generate_schedule(name, 4, 8, 0));
    const std::string path = dir.file(name + ".csv");
    save_schedule_csv(s, path);
    Schedule loaded = load_schedule_csv(path, 4, 8, s.stages_per_rank, s.placement);
    EXPECT_EQ(loaded.program, s.program);
    EXPECT_EQ(loaded.name, "file:" + path);
    EXPECT_NO_THROW(validate(loaded, {0, true}));
    EXPECT_EQ(infer_placement(loaded.program, 4, loaded.stages_per_rank), s.placement);
  }
}

TEST(ScheduleCsv, HandWrittenLoweredProgramLoadsAndValidates) {
  // 1F1B on 2 ranks as PyTorch lowers it: receive right before use, send right after.
  TempDir dir;
  const std::string path = dir.file("1f1b.csv");
  util::write_file(path,
                      "# rank 0, then rank 1\n"
                      "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
                      "1RECV_F0, 1F0, 1B0, 1SEND_B0, 1RECV_F1, 1F1, 1B1, 1SEND_B1,\n");
  Schedule s = load_schedule_csv(path, 2, 2, 1, Placement::Loop);
  ASSERT_EQ(s.program.size(), 2u);
  EXPECT_EQ(s.program[1].size(), 8u);
  EXPECT_NO_THROW(validate(s));
  // With blocking sends this program deadlocks, which the validator finds.
  EXPECT_TRUE(contains(error_of([&] { validate(s, {0, true}); }), "deadlock: rank 0, position 3"));
  SimResult sim = simulate(s);
  EXPECT_NEAR(sim.makespan, 3.0 * (2 + 2 - 1), 1e-12);
}

TEST(ScheduleCsv, HandWrittenComputeProgramIsLoweredAndValidated) {
  // A zero-bubble program with split backward, compute actions only.
  TempDir dir;
  const std::string path = dir.file("zb.csv");
  util::write_file(path,
                      "0F0,0F1,0I0,0W0,0I1,0W1\n"
                      "1F0,1I0,1F1,1I1,1W0,1W1\n");
  Schedule s = prepare_schedule("file:" + path, 2, 2, 0);
  EXPECT_EQ(s.stages_per_rank, 1);
  EXPECT_EQ(s.placement, Placement::Loop);
  EXPECT_TRUE(has_communication(s.program));
  EXPECT_EQ(compute_only(s).program, load_schedule_csv(path, 2, 2, 1, Placement::Loop).program);
  // A V program: rank 0 holds stages 0 and 3.
  const std::string v_path = dir.file("v.csv");
  save_schedule_csv(generate_schedule("zbv", 2, 4, 2), v_path);
  Schedule v = prepare_schedule("file:" + v_path, 2, 4, 0);
  EXPECT_EQ(v.stages_per_rank, 2);
  EXPECT_EQ(v.placement, Placement::V);
}

TEST(ScheduleCsv, MalformedFilesNameFileLineAndToken) {
  TempDir dir;
  const std::string path = dir.file("bad.csv");
  util::write_file(path, "0F0,0B0\n1F0,1B0,1Q0\n");
  EXPECT_EQ(error_of([&] { load_schedule_csv(path, 2, 1, 1, Placement::Loop); }),
            path + ":2: column 3: action '1Q0': unknown operation (F, B, I, W, SEND_F, RECV_F, "
                   "SEND_B, RECV_B) (expected <stage><OP><microbatch>, e.g. 2F0, 1SEND_B3)");
  util::write_file(path, "0F0,0B0\n1F0,1B0\n");
  EXPECT_EQ(error_of([&] { load_schedule_csv(path, 4, 1, 1, Placement::Loop); }),
            path + ": 2 rows of actions, expected one per pipeline rank (pp=4)");
  EXPECT_EQ(error_of([&] { load_schedule_csv(dir.file("none.csv"), 2, 1, 1, Placement::Loop); }),
            "schedule file '" + dir.file("none.csv") + "': cannot open");
  // Parses but is not a valid program: prepare_schedule validates.
  util::write_file(path, "0F0\n1F0,1B0\n");
  EXPECT_EQ(error_of([&] { prepare_schedule("file:" + path, 2, 1, 1); }),
            "rank 0: missing 0B0 (or 0I0 and 0W0): stage 0 microbatch 0 never runs backward");
}

TEST(BackwardForm, SplitAndMergeAreInverseWherePairsAreAdjacent) {
  Schedule s = generate_schedule("1f1b", 4, 8, 1);
  Schedule split = split_backward(s);
  EXPECT_FALSE(contains(program_to_csv(split.program), "B"));
  EXPECT_NO_THROW(validate(split));
  EXPECT_EQ(merge_backward(split).program, s.program);
  // ZB-H1 defers W's: only rank 0 runs every W right after its I.
  Schedule zb = generate_schedule("zb-h1", 4, 8, 1);
  Schedule merged = merge_backward(zb);
  EXPECT_NO_THROW(validate(merged));
  EXPECT_FALSE(uses_split_backward({merged.program[0]}));
  EXPECT_TRUE(uses_split_backward({merged.program[3]}));
  // A lowered program: the W goes after the SEND_B that follows the B.
  Schedule lowered_split = split_backward(lower(s));
  EXPECT_NO_THROW(validate(lowered_split, {0, true}));
  auto& r1 = lowered_split.program[1];
  size_t i = std::find(r1.begin(), r1.end(), parse_action("1I0")) - r1.begin();
  EXPECT_EQ(r1[i + 1], parse_action("1SEND_B0"));
  EXPECT_EQ(r1[i + 2], parse_action("1W0"));
  EXPECT_EQ(merge_backward(lowered_split).program, lower(s).program);
}

TEST(Lowering, ReceivesArePostedWhenTheDataComesIntoExistence) {
  // Played with unit costs (the lowering's own clock), each RECV sits right after the last
  // compute action its rank started before the sender finished, and the compute after it
  // starts no earlier than that moment.
  CostModel unit;
  unit.forward = unit.input_grad = unit.weight_grad = 1;
  for (const char* name : {"1f1b", "zb-h2", "interleaved-1f1b", "zbv", "dualpipev"}) {
    SCOPED_TRACE(name);
    Schedule compute = generate_schedule(name, 4, 8, 0);
    unit.forward = unit.input_grad = unit.weight_grad = compute.stages_per_rank;  // 1 per stage
    Schedule s = lower(compute);
    SimResult sim = simulate(s, unit);
    std::map<ActionKey, double> sent;  // keyed by the RECV: when the producer finished
    for (const auto& rank : sim.timeline)
      for (const TimedAction& t : rank)
        if (t.action.op == Op::SEND_F || t.action.op == Op::SEND_B)
          sent[key_of(matching_action(t.action))] = t.start;
    int receives = 0;
    for (int r = 0; r < s.pp; ++r) {
      const auto& line = sim.timeline[r];
      for (size_t i = 0; i < line.size(); ++i) {
        if (line[i].action.op != Op::RECV_F && line[i].action.op != Op::RECV_B) continue;
        ++receives;
        const double ready = sent.at(key_of(line[i].action));
        size_t before = i, after = i;
        while (before > 0 && !is_compute(line[before].action.op)) --before;
        while (after < line.size() && !is_compute(line[after].action.op)) ++after;
        if (is_compute(line[before].action.op)) {
          EXPECT_LE(line[before].start, ready);
        }
        ASSERT_LT(after, line.size());
        EXPECT_GE(line[after].start, ready);
      }
    }
    EXPECT_GT(receives, 0);
  }
}

TEST(Lowering, NoMessagesBetweenStagesOfTheSameRank) {
  // ZB-V on one rank: both stages local, nothing to send.
  Schedule single = generate_schedule("zbv", 1, 4, 2);
  EXPECT_EQ(lower(single).program, single.program);
  // ZB-V on 4 ranks: of the 7 stage boundaries, the turn on rank 3 is local: 6 cross ranks,
  // each carrying activations and gradients of every microbatch, a SEND and a RECV each.
  Schedule v = lower(generate_schedule("zbv", 4, 8, 2));
  size_t messages = 0;
  for (const auto& actions : v.program)
    for (const Action& a : actions) messages += is_communication(a.op);
  EXPECT_EQ(messages, 6u * 2 * 8 * 2);
  EXPECT_TRUE(contains(error_of([&] { lower(v); }), "already has communication"));
}

TEST(ScheduleCommand, TextShowsTheTimelineAndFigures) {
  auto r = pptrain_schedule("--schedule 1f1b --pp 4 --microbatches 8");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 0  0F0 0F1 0F2 0F3 .   .   .   .   .   .   0B0 ---"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "makespan 33   bubble ratio 0.2727")) << r.output;
}

TEST(ScheduleCommand, JsonHasTheFigures) {
  auto r = pptrain_schedule("--schedule zbv --pp 4 --microbatches 8 --format json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* key : {"\"schedule\": \"zbv\"", "\"pp\": 4", "\"microbatches\": 8",
                          "\"stages_per_rank\": 2", "\"makespan\": 25.5",
                          "\"bubble_ratio\": 0.05882352941", "\"span_bubble_ratio\": 0",
                          "\"peak_activations\": [4, 4, 4, 4]", "\"valid\": true"})
    EXPECT_TRUE(contains(r.output, key)) << key << "\n" << r.output;
}

TEST(ScheduleCommand, SvgChromeAndCsvFormats) {
  TempDir dir;
  auto svg = pptrain_schedule("--schedule zb-h1 --pp 4 --microbatches 8 --format svg --out " +
                              dir.file("s.svg"));
  ASSERT_EQ(svg.exit_code, 0) << svg.output;
  std::string picture = util::read_file(dir.file("s.svg"));
  EXPECT_EQ(picture.rfind("<svg", 0), 0u);
  EXPECT_TRUE(contains(picture, "<title>0W7 [")) << "a box per action, W included";
  EXPECT_TRUE(contains(picture, "</svg>"));

  auto chrome = pptrain_schedule("--schedule 1f1b --pp 2 --microbatches 2 --format chrome");
  ASSERT_EQ(chrome.exit_code, 0) << chrome.output;
  EXPECT_TRUE(contains(chrome.output, "\"traceEvents\""));
  EXPECT_TRUE(contains(chrome.output, "\"name\": \"1B0\", \"cat\": \"B\", \"ph\": \"X\", \"pid\": "
                                      "0, \"tid\": 1, \"ts\": 2000.000, \"dur\": 2000.000"))
      << chrome.output;

  // The CSV the command writes loads back through --load.
  auto csv = pptrain_schedule("--schedule interleaved-1f1b --pp 2 --microbatches 4 --format csv "
                              "--out " + dir.file("p.csv"));
  ASSERT_EQ(csv.exit_code, 0) << csv.output;
  auto back = pptrain_schedule("--load " + dir.file("p.csv") +
                               " --pp 2 --microbatches 4 --format json --blocking-sends");
  ASSERT_EQ(back.exit_code, 0) << back.output;
  EXPECT_TRUE(contains(back.output, "\"stages_per_rank\": 2")) << back.output;
  EXPECT_TRUE(contains(back.output, "\"valid\": true"));
}

TEST(ScheduleCommand, BadInputIsOneLineAndANonZeroExit) {
  auto unknown = pptrain_schedule("--schedule zb-h9 --pp 4 --microbatches 8");
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_TRUE(contains(unknown.output, "unknown schedule 'zb-h9'")) << unknown.output;
  EXPECT_EQ(std::count(unknown.output.begin(), unknown.output.end(), '\n'), 1) << unknown.output;

  auto shape = pptrain_schedule("--schedule dualpipev --pp 4 --microbatches 3");
  EXPECT_NE(shape.exit_code, 0);
  EXPECT_TRUE(contains(shape.output, "dualpipev needs at least 2*pp-1 microbatches")) << shape.output;

  TempDir dir;
  util::write_file(dir.file("bad.csv"), "0F0,0B0\n1F0,1B0,oops\n");
  auto malformed = pptrain_schedule("--load " + dir.file("bad.csv") + " --pp 2 --microbatches 1");
  EXPECT_NE(malformed.exit_code, 0);
  EXPECT_TRUE(contains(malformed.output, dir.file("bad.csv") + ":2: column 3: action 'oops'"))
      << malformed.output;

  auto over = pptrain_schedule("--schedule gpipe --pp 2 --microbatches 4 --memory-limit 2 --format json");
  EXPECT_NE(over.exit_code, 0);
  EXPECT_TRUE(contains(over.output, "\"valid\": false")) << over.output;
  EXPECT_TRUE(contains(over.output, "3 microbatches of activations in flight, above the limit 2"));

  // A cost file where --cost wants KEY=NUMBER items (it said "needs a number >= 0 (got '')").
  auto cost_file = pptrain_schedule("--schedule auto --pp 2 --microbatches 4 --cost base.csv");
  EXPECT_NE(cost_file.exit_code, 0);
  EXPECT_TRUE(contains(cost_file.output, "--cost 'base.csv': 'base.csv' is not KEY=NUMBER")) << cost_file.output;

  auto missing = pptrain_schedule("--schedule 1f1b --microbatches 4");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_TRUE(contains(missing.output, "--pp is required")) << missing.output;
}

// NCCL matches point-to-point messages between two ranks by the order they are posted
// (it has no tags), so for every ordered pair of ranks the lowered program must post
// the receives in the order the sender posts the sends.
TEST(Lowering, ReceivesArePostedInTheOrderOfTheirSends) {
  using Message = std::tuple<char, int, int>;  // direction, receiving stage, microbatch
  int checked = 0;
  for (const std::string& name : schedule_names()) {
    std::vector<int> vs = {default_stages_per_rank(name)};
    if (name == "interleaved-1f1b" || name == "looped-bfs") vs = {2, 3};
    for (int pp = 2; pp <= 6; ++pp)
      for (int m : {1, 2, 3, 5, 8, 12})
        for (int v : vs) {
          Schedule s;
          try {
            s = prepare_schedule(name, pp, m, v);
          } catch (const Error&) {
            continue;  // a constraint of this schedule
          }
          std::map<std::pair<int, int>, std::vector<Message>> sent, received;  // (from, to)
          for (int r = 0; r < pp; ++r)
            for (const Action& a : s.program[r]) {
              if (a.op == Op::SEND_F) sent[{r, s.rank_of(a.stage + 1)}].push_back({'F', a.stage + 1, a.microbatch});
              if (a.op == Op::SEND_B) sent[{r, s.rank_of(a.stage - 1)}].push_back({'B', a.stage - 1, a.microbatch});
              if (a.op == Op::RECV_F) received[{s.rank_of(a.stage - 1), r}].push_back({'F', a.stage, a.microbatch});
              if (a.op == Op::RECV_B) received[{s.rank_of(a.stage + 1), r}].push_back({'B', a.stage, a.microbatch});
            }
          ASSERT_EQ(sent, received) << name << " pp " << pp << " m " << m << " v " << v;
          ++checked;
        }
  }
  EXPECT_GT(checked, 100);
}

// PyTorch's own dumps (torch.distributed.pipelining's _Action notation) hold actions that
// are not compute (UNSHARD, RESHARD, REDUCE_GRAD; microbatch optional) and fused
// "(0F2;0B0)OVERLAP_F_B" cells: they load with the non-compute actions and PyTorch's
// SEND/RECV ignored, the fused cells split into their parts in order, and lowering
// re-derives the communication.
TEST(ScheduleCsv, PyTorchDumpsLoadWithNonComputeActionsIgnoredAndOverlapsSplit) {
  const std::string path = "tests/data/schedules/pytorch_1f1b_pp2_m4.csv";
  Schedule s = load_schedule_csv(path, 2, 4, 1, Placement::Loop);
  auto parse_row = [](const std::string& row) { return parse_program_csv(row, "row")[0]; };
  EXPECT_EQ(s.program[0], parse_row("0F0,0F1,0F2,0B0,0B1,0F3,0B2,0B3"));
  EXPECT_EQ(s.program[1], parse_row("1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3"));
  // Per rank: UNSHARD, RESHARD, REDUCE_GRAD and 8 sends/receives; one OVERLAP_F_B each.
  EXPECT_EQ(s.note, path + ": 22 non-compute action(s) ignored (UNSHARD, RESHARD, REDUCE_GRAD, WAIT_*, SEND_*, "
                           "RECV_*: communication is re-derived by lowering), 2 OVERLAP_F_B split into its parts "
                           "in order");
  Schedule prepared = prepare_schedule("file:" + path, 2, 4, 0);
  EXPECT_TRUE(has_communication(prepared.program));

  // Split backward and an overlap of F with I.
  const std::string zb = "tests/data/schedules/pytorch_zb_pp2_m2.csv";
  Schedule z = load_schedule_csv(zb, 2, 2, 1, Placement::Loop);
  EXPECT_EQ(z.program[1], parse_row("1F0,1I0,1F1,1I1,1W0,1W1"));
  EXPECT_NO_THROW(prepare_schedule("file:" + zb, 2, 2, 0));

  // A file without PyTorch-only actions is taken as written (its sends stay), no note.
  EXPECT_EQ(load_schedule_csv(path, 2, 4, 1, Placement::Loop).name, "file:" + path);
  CsvNotes plain;
  EXPECT_EQ(parse_program_csv("0F0,0SEND_F0\n1RECV_F0,1F0\n", "x", &plain)[0].size(), 2u);
  EXPECT_EQ(describe(plain), "");

  // Malformed fused cells name line and column.
  EXPECT_EQ(error_of([] { parse_program_csv("0F0,(0F1;0B0)OVERLAP\n", "x.csv"); }),
            "x.csv:1: column 2: action '(0F1;0B0)OVERLAP': expected (<action>;<action>...)OVERLAP_F_B");
  EXPECT_EQ(error_of([] { parse_program_csv("()OVERLAP_F_B\n", "x.csv"); }),
            "x.csv:1: column 1: action '()OVERLAP_F_B': OVERLAP_F_B with no actions");
  EXPECT_EQ(error_of([] { parse_program_csv("0UNSHARD1X\n", "x.csv"); }),
            "x.csv:1: column 1: action '0UNSHARD1X': unexpected characters "
            "(expected <stage><OP><microbatch>, e.g. 2F0, 1SEND_B3)");
}

// `--schedule file:X.csv` and `--load X.csv` are one path (prepare_schedule); the note
// line goes to stderr, the schedule to stdout.
TEST(ScheduleCommand, FileSpecAndLoadAgreeAndPrintTheNote) {
  const std::string path = "tests/data/schedules/pytorch_1f1b_pp2_m4.csv";
  auto by_spec = pptrain_schedule("--schedule file:" + path + " --pp 2 --microbatches 4 --format csv");
  auto by_load = pptrain_schedule("--load " + path + " --pp 2 --microbatches 4 --format csv");
  ASSERT_EQ(by_spec.exit_code, 0) << by_spec.output;
  EXPECT_EQ(by_spec.output, by_load.output);
  EXPECT_EQ(std::count(by_spec.output.begin(), by_spec.output.end(), '\n'), 3) << by_spec.output;
  EXPECT_TRUE(contains(by_spec.output, "note: " + path + ": 22 non-compute action(s) ignored")) << by_spec.output;

  // A FIFO as the schedule file is refused at once (`timeout` turns a hang into 124).
  TempDir dir;
  ASSERT_EQ(util::run_command("mkfifo " + dir.file("p.csv")).exit_code, 0);
  auto fifo = util::run_command("timeout 20 " + util::pptrain_bin() + " schedule --load " + dir.file("p.csv") +
                                " --pp 2 --microbatches 4", 60);
  EXPECT_TRUE(fifo.exit_code != 0 && fifo.exit_code != 124) << fifo.exit_code << fifo.output;
  EXPECT_TRUE(contains(fifo.output, "schedule file " + dir.file("p.csv") + ": is a FIFO (expected a regular file)"))
      << fifo.output;
}

// `pptrain schedule` at its size limit (pp * stages_per_rank * microbatches = 10^6) answers:
// lowering replays events from ordered sets and the validator indexes flat tables, so the
// work is O(actions log pp). The replay that scanned every rank per event needed more
// than 10 minutes at pp = m = 2000; the deadline here only guards against a return to
// that (about 3 s on a 2-core machine shared with builds).
TEST(ScheduleCommand, AnswersAtItsSizeLimitAndRefusesBeyondIt) {
  auto at_limit = util::run_command(
      "timeout 240 " + util::pptrain_bin() + " schedule --schedule 1f1b --pp 1000 --microbatches 1000 --format json",
      300);
  ASSERT_EQ(at_limit.exit_code, 0) << at_limit.output.substr(0, 2000);
  EXPECT_TRUE(contains(at_limit.output, "\"valid\": true"));

  auto over = pptrain_schedule("--schedule 1f1b --pp 1001 --microbatches 1000");
  EXPECT_NE(over.exit_code, 0);
  EXPECT_TRUE(contains(over.output, "1f1b: pp*stages_per_rank*microbatches = 1001000 is more than this tool builds "
                                    "(1000000)"))
      << over.output;

  // A loaded program's stages per rank come from its highest stage: checked before any
  // table is sized by it.
  TempDir dir;
  util::write_file(dir.file("big.csv"), "0F0,2000000000F0\n1F0\n");
  auto big = pptrain_schedule("--load " + dir.file("big.csv") + " --pp 2 --microbatches 4");
  EXPECT_NE(big.exit_code, 0);
  EXPECT_TRUE(contains(big.output, "file:" + dir.file("big.csv") + ": pp*stages_per_rank*microbatches = 8000000008 "
                                   "is more than this tool builds"))
      << big.output;
}

// Found by fuzz_schedule_csv (tests/fuzz/regressions/schedule_csv/): a rank without actions
// was written as an empty line, which reading skips, so the program lost a rank.
TEST(ScheduleCsv, RankWithoutActionsSurvivesTheRoundTrip) {
  const Program program = {{Action{Op::F, 0, 0}}, {}, {Action{Op::F, 2, 0}}};
  EXPECT_EQ(program_to_csv(program), "0F0\n\"\"\n2F0\n");
  EXPECT_EQ(parse_program_csv(program_to_csv(program), "x.csv"), program);
}
