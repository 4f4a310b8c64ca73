// The cost file (partition/cost_profile.h) and profiling (partition/profile.h): the JSON
// round trip is bitwise; every malformed file is one line naming the file and the key; a
// profile of a tiny model has positive times and the bytes its shapes give by hand. The
// command, `pptrain profile`: tests/test_profile_command.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/config.h"
#include "core/error.h"
#include "job/memory_estimate.h"
#include "partition/cost_profile.h"
#include "partition/layout_search.h"
#include "partition/partition.h"
#include "partition/profile.h"
#include "support/single_rank_model.h"
#include "support/test_util.h"

using namespace pptrain;
using namespace pptrain::testing;

namespace {

// Every member differs from its default and from the others; the doubles include values
// that need all 17 digits, the extremes and a subnormal.
CostProfile sample_profile() {
  CostProfile p;
  p.device = "cuda";
  p.precision = "bf16";
  p.attention = "flash";
  p.n_layer = 48;
  p.micro_batch_size = 3;
  p.seq_len = 1024;
  p.d_model = 1600;
  p.n_head = 25;
  p.vocab_size = 50257;
  p.tp = 2;
  double x = 0.1;
  for (LayerCost* l : {&p.embedding, &p.block, &p.head, &p.block_attention, &p.block_full}) {
    for (double* v : {&l->forward_ms, &l->input_grad_ms, &l->weight_grad_ms, &l->act_fi_bytes, &l->act_iw_bytes,
                      &l->act_from_input_bytes, &l->param_bytes, &l->optim_bytes}) {
      *v = x;
      x = x * 3.7 + 1.0 / 3;
    }
  }
  p.block.act_fi_bytes = std::numeric_limits<double>::max();
  p.head.act_fi_bytes = std::numeric_limits<double>::denorm_min();
  p.embedding.input_grad_ms = 0;
  p.transfer_bytes = 9830400;
  p.transfer_ms = 2.0 / 3;
  p.allreduce_latency_ms = 1e-300;
  p.allreduce_bytes_per_ms = 123456789.123456789;
  p.allreduce_measured = true;
  p.update_ns_per_param = 1.0 / 7;
  p.allreduce_ranks = 3;
  for (int tp : {4, 8}) {
    TpLayerCosts t{tp, p.embedding, p.block, p.head, p.block_attention, p.block_full};
    t.block.forward_ms = 1.0 / tp;
    t.block_full.input_grad_ms = 3.0 / tp;
    p.other_tp.push_back(t);
  }
  return p;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void expect_same_layer(const LayerCost& a, const LayerCost& b, const std::string& kind) {
  EXPECT_TRUE(same_bits(a.forward_ms, b.forward_ms)) << kind;
  EXPECT_TRUE(same_bits(a.input_grad_ms, b.input_grad_ms)) << kind;
  EXPECT_TRUE(same_bits(a.weight_grad_ms, b.weight_grad_ms)) << kind;
  EXPECT_TRUE(same_bits(a.act_fi_bytes, b.act_fi_bytes)) << kind;
  EXPECT_TRUE(same_bits(a.act_iw_bytes, b.act_iw_bytes)) << kind;
  EXPECT_TRUE(same_bits(a.act_from_input_bytes, b.act_from_input_bytes)) << kind;
  EXPECT_TRUE(same_bits(a.param_bytes, b.param_bytes)) << kind;
  EXPECT_TRUE(same_bits(a.optim_bytes, b.optim_bytes)) << kind;
}

void expect_same(const CostProfile& a, const CostProfile& b) {
  EXPECT_EQ(a.device, b.device);
  EXPECT_EQ(a.precision, b.precision);
  EXPECT_EQ(a.attention, b.attention);
  EXPECT_EQ(a.n_layer, b.n_layer);
  EXPECT_EQ(a.micro_batch_size, b.micro_batch_size);
  EXPECT_EQ(a.seq_len, b.seq_len);
  EXPECT_EQ(a.d_model, b.d_model);
  EXPECT_EQ(a.n_head, b.n_head);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.tp, b.tp);
  expect_same_layer(a.embedding, b.embedding, "embedding");
  expect_same_layer(a.block, b.block, "block");
  expect_same_layer(a.head, b.head, "head");
  expect_same_layer(a.block_attention, b.block_attention, "block_attention");
  expect_same_layer(a.block_full, b.block_full, "block_full");
  ASSERT_EQ(a.other_tp.size(), b.other_tp.size());
  for (size_t i = 0; i < a.other_tp.size(); ++i) {
    EXPECT_EQ(a.other_tp[i].tp, b.other_tp[i].tp);
    expect_same_layer(a.other_tp[i].embedding, b.other_tp[i].embedding, cat("other_tp embedding ", i));
    expect_same_layer(a.other_tp[i].block, b.other_tp[i].block, cat("other_tp block ", i));
    expect_same_layer(a.other_tp[i].head, b.other_tp[i].head, cat("other_tp head ", i));
    expect_same_layer(a.other_tp[i].block_attention, b.other_tp[i].block_attention, cat("other_tp attention ", i));
    expect_same_layer(a.other_tp[i].block_full, b.other_tp[i].block_full, cat("other_tp full ", i));
  }
  EXPECT_TRUE(same_bits(a.transfer_bytes, b.transfer_bytes));
  EXPECT_TRUE(same_bits(a.transfer_ms, b.transfer_ms));
  EXPECT_TRUE(same_bits(a.allreduce_latency_ms, b.allreduce_latency_ms));
  EXPECT_TRUE(same_bits(a.allreduce_bytes_per_ms, b.allreduce_bytes_per_ms));
  EXPECT_EQ(a.allreduce_measured, b.allreduce_measured);
  EXPECT_TRUE(same_bits(a.update_ns_per_param, b.update_ns_per_param));
  EXPECT_EQ(a.allreduce_ranks, b.allreduce_ranks);
}

// The message of parsing `json` as "p.json" ("" if it parsed); one line always.
std::string error_of(const std::string& json) {
  try {
    parse_cost_profile(json, "p.json");
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "more than one line: " << msg;
    return msg;
  }
  return "";
}

// The sample's JSON with the first occurrence of `from` replaced by `to`.
std::string edited(const std::string& from, const std::string& to) {
  std::string json = to_json(sample_profile());
  const size_t at = json.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return json.replace(at, from.size(), to);
}

#define EXPECT_ERROR(json, text)                                                            \
  do {                                                                                      \
    const std::string msg_ = error_of(json);                                                \
    EXPECT_NE(msg_.find(text), std::string::npos) << "expected '" << (text) << "' in: " << msg_; \
  } while (0)

}  // namespace

TEST(CostProfile, JsonRoundTripIsBitwise) {
  const CostProfile p = sample_profile();
  const CostProfile back = parse_cost_profile(to_json(p), "p.json");
  expect_same(p, back);
  EXPECT_EQ(to_json(back), to_json(p));
  expect_same(CostProfile{}, CostProfile{});  // (the comparison itself sees every member)
  CostProfile other = p;
  other.head.optim_bytes = std::nextafter(other.head.optim_bytes, 0.0);
  EXPECT_NE(to_json(other), to_json(p));  // one ulp shows in the text
}

TEST(CostProfile, WrittenAtomicallyAndReadBack) {
  TempDir dir;
  const std::string path = dir.file("prof.json");
  write_cost_profile(sample_profile(), path);
  expect_same(read_cost_profile(path), sample_profile());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  CostProfile changed = sample_profile();
  changed.n_layer = 7;
  write_cost_profile(changed, path);  // replaces the file
  EXPECT_EQ(read_cost_profile(path).n_layer, 7);
  EXPECT_THROW(write_cost_profile(changed, dir.file("missing/prof.json")), Error);
}

TEST(CostProfile, MalformedFilesAreOneLineNamingTheKey) {
  EXPECT_EQ(error_of(to_json(sample_profile())), "");
  // missing and unknown keys, at the top and nested
  EXPECT_ERROR(edited("\"weight_grad_ms\"", "\"weight_gradient_ms\""),
               "p.json: embedding.weight_gradient_ms: unknown key (expected forward_ms, ");
  EXPECT_ERROR(edited("  \"tp\": 2,\n", ""), "p.json: tp: missing");
  std::string json = to_json(sample_profile());
  const size_t block = json.find("\"block\"");
  const size_t fwd = json.find("\"forward_ms\"", block);
  json.erase(fwd, json.find('\n', fwd) - fwd + 1);
  EXPECT_ERROR(json, "p.json: block.forward_ms: missing");
  EXPECT_ERROR(edited("\"tp\": 2,", "\"tp\": 2, \"tp\": 2,"), "p.json: tp: given twice");
  EXPECT_ERROR(edited("\"tp\": 2,", "\"tp\": 2, \"a\\nb\": 2,"), "p.json: a?b: unknown key");
  EXPECT_ERROR(edited("\"device\": \"cuda\"", "\"device\": \"" + std::string(100, 'x') + "\\n\""),
               "got \"" + std::string(40, 'x') + "...\"");
  // numbers: finite, >= 0, not strings
  json = to_json(sample_profile());
  const size_t value = json.find("\"forward_ms\": ", block) + 14;
  json.replace(value, json.find(',', value) - value, "\"x\"");
  EXPECT_EQ(error_of(json), "p.json: block.forward_ms: expected a finite number >= 0, got \"x\"");
  EXPECT_ERROR(edited("\"transfer_ms\": ", "\"transfer_ms\": \"x\", \"was\": "),
               "p.json: transfer_ms: expected a finite number >= 0, got \"x\"");
  EXPECT_ERROR(edited("\"transfer_ms\": ", "\"transfer_ms\": \"0.5\", \"was\": "),
               "p.json: transfer_ms: expected a finite number >= 0, got \"0.5\"");
  EXPECT_ERROR(edited("\"input_grad_ms\": 0,", "\"input_grad_ms\": NaN,"),
               "p.json: embedding.input_grad_ms: expected a finite number >= 0, got NaN");
  EXPECT_ERROR(edited("\"input_grad_ms\": 0,", "\"input_grad_ms\": .nan,"), "embedding.input_grad_ms: expected a finite");
  EXPECT_ERROR(edited("\"input_grad_ms\": 0,", "\"input_grad_ms\": .inf,"), "embedding.input_grad_ms: expected a finite");
  EXPECT_ERROR(edited("\"input_grad_ms\": 0,", "\"input_grad_ms\": 1e999,"), "embedding.input_grad_ms: expected a finite");
  EXPECT_ERROR(edited("\"input_grad_ms\": 0,", "\"input_grad_ms\": -1,"),
               "p.json: embedding.input_grad_ms: expected a finite number >= 0, got -1");
  EXPECT_ERROR(edited("\"input_grad_ms\": 0,", "\"input_grad_ms\": [],"), "embedding.input_grad_ms: expected a finite number >= 0, got an array");
  EXPECT_ERROR(edited("\"input_grad_ms\": 0,", "\"input_grad_ms\": null,"), "got null");
  // shapes: integers >= 1
  EXPECT_ERROR(edited("\"n_layer\": 48", "\"n_layer\": 0"), "p.json: n_layer: expected an integer in [1, 16384], got 0");
  EXPECT_ERROR(edited("\"n_layer\": 48", "\"n_layer\": 1.5"), "p.json: n_layer: expected an integer in [1, 16384], got 1.5");
  EXPECT_ERROR(edited("\"seq_len\": 1024", "\"seq_len\": 99999999999999999999"), "p.json: seq_len: expected an integer");
  EXPECT_ERROR(edited("\"tp\": 2", "\"tp\": \"2\""), "p.json: tp: expected an integer in [1, 1048576], got \"2\"");
  // words
  EXPECT_ERROR(edited("\"device\": \"cuda\"", "\"device\": \"tpu\""),
               "p.json: device: expected one of \"cpu\" \"cuda\", got \"tpu\"");
  EXPECT_ERROR(edited("\"precision\": \"bf16\"", "\"precision\": \"fp16\""), "p.json: precision: expected one of");
  EXPECT_ERROR(edited("\"allreduce_measured\": true", "\"allreduce_measured\": 1"),
               "p.json: allreduce_measured: expected true or false, got 1");
  // other_tp: an array of objects, degrees ascending and above the profile's tp
  EXPECT_ERROR(edited("\"tp\": 8", "\"tp\": 4"), "p.json: other_tp[1].tp: expected a degree above 4 (ascending), got 4");
  EXPECT_ERROR(edited("\"tp\": 4", "\"tp\": 2"), "p.json: other_tp[0].tp: expected a degree above the profile's tp 2, got 2");
  EXPECT_ERROR(edited("\"other_tp\": [", "\"other_tp\": 3, \"was\": ["), "p.json: other_tp: expected a JSON array, got 3");
  EXPECT_ERROR(edited("\"tp\": 8,", "\"tp\": 8, \"extra\": 1,"), "p.json: other_tp[1].extra: unknown key");
  // shapes of the document
  EXPECT_ERROR("[1, 2]\n", "p.json: expected a JSON object, got an array");
  EXPECT_ERROR("", "p.json: expected a JSON object, got null");
  EXPECT_ERROR("\"profile\"\n", "p.json: expected a JSON object, got \"profile\"");
  EXPECT_ERROR(edited("\"block\": {", "\"block\": 3, \"was\": {"), "p.json: block: expected a JSON object, got 3");
  EXPECT_ERROR("{\"device\": \"cpu\", \"precision\": \"fp32\", \"attention\": \"naive\", ]", "p.json:1: invalid JSON");
}

TEST(CostProfile, AFileWithoutTheRecomputeCostsIsRefusedSayingToProfileAgain) {
  // A profile written before the recompute costs were measured: each of the keys it lacks
  // is named, with what to do.
  const std::string json = to_json(sample_profile());
  auto without_object = [&](const std::string& key) {
    std::string j = json;
    const size_t at = j.find("\"" + key + "\": {");
    EXPECT_NE(at, std::string::npos) << key;
    const size_t end = j.find("}", at);
    return j.erase(at, end + 3 - at);  // the object, its closing brace, the comma and newline
  };
  const std::string hint = "a profile from before recompute costs were measured: take it again with pptrain profile";
  EXPECT_EQ(error_of(without_object("block_full")), "p.json: block_full: missing (" + hint + ")");
  EXPECT_EQ(error_of(without_object("block_attention")), "p.json: block_attention: missing (" + hint + ")");
  std::string j = json;
  const size_t key = j.find("\"act_from_input_bytes\"");
  j.erase(key, j.find("\n", key) + 1 - key);
  EXPECT_EQ(error_of(j), "p.json: embedding.act_from_input_bytes: missing (" + hint + ")");
  // A bad value of a new key is named like any other.
  const size_t value = json.find("\"act_from_input_bytes\": ", json.find("\"block_full\"")) + 24;
  std::string bad = json;
  bad.replace(value, json.find(",", value) - value, "-1");
  EXPECT_EQ(error_of(bad), "p.json: block_full.act_from_input_bytes: expected a finite number >= 0, got -1");
}

TEST(ScaledProfile, TakesTheCostsMeasuredAtATpAndModelsTheOthers) {
  CostProfile p = sample_profile();
  p.tp = 1;
  p.other_tp.resize(1);
  p.other_tp[0].tp = 2;
  p.other_tp[0].block.forward_ms = 5;
  p.other_tp[0].head.param_bytes = 7;
  // tp = 2 measured: its costs as they are (same micro-batch size), twice at twice the size.
  const CostProfile two = scaled_profile(p, p.micro_batch_size, 2);
  EXPECT_EQ(two.block.forward_ms, 5);
  EXPECT_EQ(two.head.param_bytes, 7);
  EXPECT_EQ(two.tp, 2);
  EXPECT_TRUE(two.other_tp.empty());
  EXPECT_EQ(scaled_profile(p, 2 * p.micro_batch_size, 2).block.forward_ms, 10);
  // tp = 4 not measured: the model (compute / 4 and two all-reduces of [N,C]).
  const CostProfile four = scaled_profile(p, p.micro_batch_size, 4);
  EXPECT_GT(four.block.forward_ms, p.block.forward_ms / 4);
  EXPECT_EQ(four.block.param_bytes, p.block.param_bytes / 4);
  EXPECT_EQ(scaled_profile(p, p.micro_batch_size, 1).block.forward_ms, p.block.forward_ms);
}

TEST(CostProfile, EveryTruncationIsRefusedWithOneLine) {
  const std::string json = to_json(sample_profile());
  const size_t last_brace = json.rfind('}');
  for (size_t n = 0; n < last_brace; ++n) {
    const std::string msg = error_of(json.substr(0, n));
    ASSERT_FALSE(msg.empty()) << "accepted the first " << n << " bytes";
    ASSERT_EQ(msg.rfind("p.json", 0), 0u) << msg;
  }
}

TEST(CostProfile, ReadsOnlyRegularFiles) {
  TempDir dir;
  try {
    read_cost_profile(dir.path());
    FAIL() << "a directory was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.path() + ": is a directory (expected a regular file)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(read_cost_profile(dir.file("none.json")), Error);
  write_file(dir.file("big.json"), std::string(kMaxCostProfileBytes + 1, ' '));
  EXPECT_THROW(read_cost_profile(dir.file("big.json")), Error);
}

// ---- profiling ---------------------------------------------------------------------------

namespace {

// tiny_model() (2 blocks, 2 heads, d_model 8, seq_len 5, vocab 11) at micro_batch_size 3.
Config tiny_config() {
  Config c = parse_config("model: {n_layer: 2, n_head: 2, d_model: 8, seq_len: 5, vocab_size: 11}\n"
                          "training: {micro_batch_size: 3}\n",
                          "tiny.yaml");
  return c;
}

}  // namespace

TEST(Profile, BytesOfATinyModelAreWhatItsShapesGive) {
  ProfileOptions opts;
  opts.warmup = 0;
  opts.repeats = 1;
  auto ops = make_cpu_ops();
  const CostProfile p = profile_layers(tiny_config(), *ops, opts);
  // N = B·T = 15 rows, C = 8, V = 11, fp32: a stage tensor [N,C] is 480 bytes.
  EXPECT_EQ(p.transfer_bytes, 480);
  // embedding: wte [11,8] + wpe [5,8] = 128 elements; 8 bytes each (value, gradient), 8 of
  // moments; its output [N,C] and that output's gradient.
  EXPECT_EQ(p.embedding.param_bytes, 128 * 8);
  EXPECT_EQ(p.embedding.optim_bytes, 128 * 8);
  EXPECT_EQ(p.embedding.act_fi_bytes, 0);
  EXPECT_EQ(p.embedding.act_iw_bytes, 2 * 480);
  // block: ln_1, ln_2 4C = 32; qkv 3C·C + 3C = 216; proj C·C + C = 72; fc 4C·C + 4C = 288;
  // mlp proj 4C·C + C = 264: 872 elements. Slot: ln1, x2, ln2, dln2, dx2, dln1 [N,C],
  // qkv, dqkv [N,3C], attn, dattn [N,C], fc1, gelu, dfc1 [N,4C] = 15·208 floats, the two
  // layernorms' mean and rstd 4·15, naive attention's probabilities [B,NH,T,T] = 150:
  // 4·(3120 + 60 + 150) = 13320 bytes, plus the output pair 960.
  EXPECT_EQ(p.block.param_bytes, 872 * 8);
  EXPECT_EQ(p.block.optim_bytes, 872 * 8);
  EXPECT_EQ(p.block.act_fi_bytes, 0);
  EXPECT_EQ(p.block.act_iw_bytes, 13320 + 960);
  // head: ln_f 2C = 16 and the tied wte 88: 104 elements. Slot: h, dh [N,C], logits
  // [N,V] = 405 floats, row statistics and layernorm 5·15 fp32: 1920 bytes, and the summed
  // loss (one double): 1928; no output.
  EXPECT_EQ(p.head.param_bytes, 104 * 8);
  EXPECT_EQ(p.head.optim_bytes, 104 * 8);
  EXPECT_EQ(p.head.act_iw_bytes, 1928);
  EXPECT_EQ(tied_embedding_param_bytes(p), 88 * 8);
  EXPECT_EQ(tied_embedding_optim_bytes(p), 88 * 8);
  EXPECT_GT(p.update_ns_per_param, 0);
  // One process: no transfer measured, the stated all-reduce defaults.
  EXPECT_EQ(p.transfer_ms, 0);
  EXPECT_FALSE(p.allreduce_measured);
  EXPECT_EQ(p.allreduce_latency_ms, kDefaultAllreduceLatencyMs);
  EXPECT_EQ(p.allreduce_bytes_per_ms, kDefaultCpuAllreduceBytesPerMs);
  EXPECT_EQ(p.device, "cpu");
  EXPECT_EQ(p.attention, "naive");
  EXPECT_EQ(p.n_layer, 2);
  EXPECT_EQ(p.micro_batch_size, 3);
}

TEST(Profile, LayerBytesAddUpToWhatTheMemoryEstimateCountsPerStage) {
  // A stage's microbatch = its layers' bytes + (unless it starts with the embedding) its
  // received input and the input gradient it sends back, as cost_profile.h states; checked
  // against job/memory_estimate.h's count for every stage of a few cuts.
  Config c = tiny_config();
  c.model.n_layer = 4;
  ProfileOptions opts;
  opts.warmup = 0;
  opts.repeats = 1;
  auto ops = make_cpu_ops();
  const CostProfile p = profile_layers(c, *ops, opts);
  // Under each recompute mode the block measured for it: taken by F (act_iw) and by I
  // (act_from_input) as the estimate places the blocks' slots.
  for (const std::string mode : {"none", "attention", "full"}) {
    ModelDims dims = ModelDims::from(c.model, c.training.micro_batch_size, 1, 0);
    dims.recompute = ModelDims::recompute_of(mode, dims.fused_attention);
    const LayerCost& block = block_cost(p, mode);
    for (std::vector<int> cut : {std::vector<int>{4}, {0, 4}, {4, 0}, {1, 3}, {0, 2, 2, 0}, {1, 1, 1, 1}}) {
      c.parallel.pp = int(cut.size());
      c.parallel.layers_per_stage = cut;
      validate(c);
      for (const StageSpec& spec : stage_specs(c)) {
        const StageSlotBytes want = stage_slot_bytes(dims, spec, Precision::fp32);
        const double got = spec.has_embedding * p.embedding.act_iw_bytes + spec.num_blocks * block.act_iw_bytes +
                           spec.has_head * p.head.act_iw_bytes + (spec.has_embedding ? 0 : 2 * p.transfer_bytes);
        EXPECT_EQ(got, want.io + want.layers) << mode << " stage " << spec.index << " of " << cut.size();
        EXPECT_EQ(spec.num_blocks * block.act_from_input_bytes, want.layers_from_input) << mode;
        EXPECT_EQ(block.act_fi_bytes, 0) << mode;
      }
    }
  }
  // full keeps only the output pair from F; attention drops the probabilities [B,NH,T,T].
  EXPECT_EQ(p.block_full.act_iw_bytes, 2 * p.transfer_bytes);
  EXPECT_GT(p.block_full.act_from_input_bytes, 0);
  EXPECT_LT(p.block_full.act_iw_bytes + p.block_full.act_from_input_bytes, p.block.act_iw_bytes);
  EXPECT_EQ(p.block.act_iw_bytes - p.block_attention.act_iw_bytes, 4.0 * 3 * 2 * 5 * 5);
}

TEST(Profile, TimesArePositiveAndTheBlockCostsMoreThanTheEmbedding) {
  Config c = parse_config("model: {n_layer: 2, n_head: 2, d_model: 32, seq_len: 16, vocab_size: 64}\n"
                          "training: {micro_batch_size: 2}\n",
                          "small.yaml");
  ProfileOptions opts;
  opts.warmup = 1;
  opts.repeats = 5;
  auto ops = make_cpu_ops();
  const CostProfile p = profile_layers(c, *ops, opts);
  for (const auto& [kind, l] : {std::pair{"block", p.block}, {"head", p.head}}) {
    EXPECT_GT(l.forward_ms, 0) << kind;
    EXPECT_GT(l.input_grad_ms, 0) << kind;
    EXPECT_GT(l.weight_grad_ms, 0) << kind;
  }
  EXPECT_GT(p.embedding.forward_ms, 0);
  EXPECT_GT(p.embedding.weight_grad_ms, 0);
  EXPECT_GE(p.embedding.input_grad_ms, 0);  // nothing to compute: the inputs are token ids
  // A block runs a dozen ops including four GEMMs over the rows; the embedding one gather.
  EXPECT_GT(p.block.forward_ms, p.embedding.forward_ms);
  EXPECT_GT(p.block.input_grad_ms, p.embedding.input_grad_ms);
  // A profile is only for the tp degree it measured: tp > 1 is refused with one line.
  c.parallel.tp = 2;
  try {
    profile_layers(c, *ops, opts);
    FAIL() << "tp 2 was profiled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("small.yaml: key 'parallel.tp': profiling measures tp = 1 only"),
              std::string::npos)
        << e.what();
  }
}

TEST(Profile, AllreduceFitRecoversLatencyAndBandwidth) {
  const std::vector<double> bytes = {65536, 262144, 1048576, 4194304};
  std::vector<double> ms;
  for (double b : bytes) ms.push_back(0.05 + b / 2e6);
  const AllreduceFit fit = fit_allreduce(bytes, ms);
  // Exact data on a line: least squares in double recovers it to ~1e-15 relative; the
  // bounds are 2e-8 (latency) and 5e-10 (rate) relative.
  EXPECT_NEAR(fit.latency_ms, 0.05, 1e-9);
  EXPECT_NEAR(fit.bytes_per_ms, 2e6, 1e-3);
  // Time not growing with size: the mean as latency, the largest size over it as rate.
  // The mean of four numbers near 1 and one division: a few ulps.
  const AllreduceFit flat = fit_allreduce(bytes, {1.1, 1.0, 1.0, 0.9});
  EXPECT_NEAR(flat.latency_ms, 1.0, 1e-12);
  EXPECT_NEAR(flat.bytes_per_ms, 4194304, 1e-6);
  // A negative intercept is clamped.
  EXPECT_EQ(fit_allreduce({1000, 2000}, {0.1, 0.3}).latency_ms, 0);
  EXPECT_EQ(median({3, 1, 2}), 2);
  EXPECT_EQ(median({4, 1, 2, 3}), 2.5);
}
