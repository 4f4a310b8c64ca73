// logging.kernel_profile: the kernels the device ran for each op of the profiled steps
// (backend/kernel_profile.h; on cuda CUPTI's activity records, tied to the op calls by
// external correlation ids). Here the aggregation itself, and whole runs of pptrain-emu,
// whose emulated CUPTI (emu/cupti_emu.h) records every launch, GEMM, copy and fill of the
// emulated runtime: every op call's kernels land under that op, the step's busy time is
// the union of the kernels' intervals, the trace has one slice per kernel, and the losses
// are those of a run without it.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <string>
#include <vector>

#include "backend/kernel_profile.h"
#include "core/config.h"
#include "core/error.h"
#include "support/test_util.h"

namespace pptrain {
namespace {

using testing::run_command;

TEST(KernelProfile, BusyTimeIsTheUnionOfTheIntervals) {
  EXPECT_DOUBLE_EQ(union_ms({}), 0.0);
  EXPECT_DOUBLE_EQ(union_ms({{0, 2}, {1, 3}, {5, 6}}), 4.0);  // overlap counted once
  EXPECT_DOUBLE_EQ(union_ms({{5, 6}, {0, 10}, {2, 3}}), 10.0);  // nested, unsorted
  EXPECT_DOUBLE_EQ(union_ms({{0, 1}, {1, 2}}), 2.0);            // touching
}

TEST(KernelProfile, RecordsGoToTheirOpCallAndTheRestOutside) {
  KernelProfile p;
  const std::vector<const char*> ops = {"linear_forward", "layernorm_forward"};
  p.add_step({{"gemm", 10.0, 12.0, 0},
              {"epilogue", 12.0, 12.5, 0},
              {"layernorm", 12.5, 13.0, 1},
              {"allreduce", 11.0, 14.0, -1},
              {"stray", 20.0, 21.0, 7}},
             ops);
  p.add_step({{"gemm", 0.0, 1.0, 0}}, ops);
  const auto& s = p.stats();
  ASSERT_EQ(s.size(), 5u);
  EXPECT_EQ(s.at({"linear_forward", "gemm"}).calls, 2);
  EXPECT_DOUBLE_EQ(s.at({"linear_forward", "gemm"}).ms, 3.0);
  EXPECT_EQ(s.at({"layernorm_forward", "layernorm"}).calls, 1);
  EXPECT_EQ(s.at({"(outside ops)", "allreduce"}).calls, 1);
  EXPECT_EQ(s.at({"(outside ops)", "stray"}).calls, 1);
  EXPECT_DOUBLE_EQ(p.busy_ms(), (14.0 - 10.0) + (21.0 - 20.0) + 1.0);
  ASSERT_EQ(p.last_step().size(), 1u);  // the last step's, from its first record
  EXPECT_DOUBLE_EQ(p.last_step()[0].end_ms, 1.0);
  EXPECT_NE(p.table(10.0).find("busy 3.000 ms a step (30.0% of the step"), std::string::npos) << p.table(10.0);
  EXPECT_NE(p.json_fields(10.0).find("\"kernel_busy_ms\": 3"), std::string::npos) << p.json_fields(10.0);
}

TEST(KernelProfile, ConfigKeysAndTheCpuBackend) {
  EXPECT_TRUE(parse_config("device: cuda\nlogging: {op_profile: 1, kernel_profile: true}\n", "t.yaml")
                  .logging.kernel_profile);
  auto refused = [](const std::string& yaml, const std::string& message) {
    try {
      parse_config(yaml, "t.yaml");
      ADD_FAILURE() << "accepted: " << yaml;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), message);
    }
  };
  refused("device: cuda\nlogging: {kernel_profile: true}\n",
          "t.yaml: key 'logging.kernel_profile': needs logging.op_profile > 0 (the steps whose kernels are recorded)");
  refused("logging: {op_profile: 1, kernel_profile: true}\n",
          "t.yaml: key 'logging.kernel_profile': needs device: cuda (the cpu backend runs no kernels to record; its op "
          "profile is the whole story)");
  try {
    make_cpu_ops()->make_kernel_recorder();
    ADD_FAILURE() << "a recorder on cpu";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the cpu backend runs no kernels to record"), std::string::npos) << e.what();
  }
}

std::string losses_of(const std::string& out) {
  std::string l;
  for (size_t at = out.find("| loss "); at != std::string::npos; at = out.find("| loss ", at + 1))
    l += out.substr(at, out.find(" |", at + 2) - at) + ";";
  return l;
}

// "key": number pairs of every object in `doc` whose "op" is `op`, by kernel.
std::map<std::string, double> kernel_calls(const std::string& doc, const std::string& op) {
  std::map<std::string, double> out;
  const std::regex entry("\\{\"op\": \"" + op + "\", \"kernel\": \"([^\"]+)\", \"calls_per_step\": ([0-9.eE+-]+)");
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), entry); it != std::sregex_iterator(); ++it)
    out[(*it)[1]] += std::stod((*it)[2]);
  return out;
}

TEST(KernelProfileRun, EmulatedCudaRecordsEveryOpCallsKernels) {
  testing::TempDir dir;
  auto data = testing::prepare_markov_corpus(dir.file("data"), 19, 6000, 5);
  ASSERT_EQ(data.exit_code, 0) << data.output;
  testing::write_file(dir.file("c.yaml"),
                      "device: cuda\n"
                      "model: {n_layer: 2, n_head: 2, d_model: 16, seq_len: 8, vocab_size: 19}\n"
                      "parallel: {microbatches: 2}\n"
                      "training: {steps: 4, micro_batch_size: 2, lr: 1.0e-2, warmup_steps: 0, eval_every: 0}\n"
                      "data: {train: '" + dir.file("data") + "/train_*.bin'}\n"
                      "logging: {every: 1, sample_tokens: 0}\n");
  const std::string json = dir.file("prof.json"), trace = dir.file("trace.json");
  const std::string bin = testing::pptrain_emu_bin() + " train " + dir.file("c.yaml");
  auto profiled = run_command(bin + " logging.op_profile=2 logging.kernel_profile=true logging.op_profile_file=" +
                                  json + " logging.trace=" + trace + " 2>&1",
                              300);
  ASSERT_EQ(profiled.exit_code, 0) << profiled.output;
  auto plain = run_command(bin + " 2>&1", 300);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(losses_of(profiled.output), losses_of(plain.output));
  EXPECT_NE(profiled.output.find("kernels of the same steps (device records): busy "), std::string::npos)
      << profiled.output;

  const std::string doc = testing::read_file(json);
  // Every op that ran has its kernels under it: at least one launch, copy or fill per call.
  const std::regex op_entry("\\{\"op\": \"([a-z_0-9]+)\", \"calls_per_step\": ([0-9.]+)");
  int ops = 0;
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), op_entry); it != std::sregex_iterator(); ++it, ++ops) {
    const std::string op = (*it)[1];
    double kernels = 0;
    for (const auto& [kernel, calls] : kernel_calls(doc, op)) kernels += calls;
    EXPECT_GE(kernels, std::stod((*it)[2])) << op << " has fewer kernel records than calls\n" << doc;
  }
  EXPECT_GT(ops, 10) << doc;
  // One cuBLASLt product per linear_forward call; the layernorm forward kernel per call.
  const auto linear = kernel_calls(doc, "linear_forward");
  ASSERT_EQ(linear.size(), 1u) << doc;
  EXPECT_EQ(linear.begin()->first, "cublaslt_matmul_emulated");
  const std::smatch calls = [&] {
    std::smatch m;
    std::regex_search(doc, m, std::regex("\\{\"op\": \"linear_forward\", \"calls_per_step\": ([0-9.]+)"));
    return m;
  }();
  ASSERT_FALSE(calls.empty());
  EXPECT_DOUBLE_EQ(linear.begin()->second, std::stod(calls[1]));
  EXPECT_EQ(kernel_calls(doc, "layernorm_forward").count("layernorm_forward"), 1u) << doc;
  // Busy: within the step.
  const std::vector<double> busy = testing::json_values(doc, "kernel_busy_ms"), step = testing::json_values(doc, "step_ms");
  ASSERT_EQ(busy.size(), 1u);
  ASSERT_EQ(step.size(), 1u);
  EXPECT_GT(busy[0], 0.0);
  // The step ends waiting for the device, so its kernels lie inside its wall time; step_ms
  // is printed with 4 decimals (5e-5 ms), under 1e-4 of any step here (tens of ms).
  EXPECT_LE(busy[0], step[0] * 1.0001);
  // Each record of the two profiled steps is a slice on the kernel track (tid 4).
  double records = 0;
  const std::regex per_step("\"kernel\": \"[^\"]+\", \"calls_per_step\": ([0-9.eE+-]+)");
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), per_step); it != std::sregex_iterator(); ++it)
    records += 2 * std::stod((*it)[1]);
  const std::string text = testing::read_file(trace);
  const std::regex slice("\"cat\": \"kernel\", \"ph\": \"X\", \"pid\": 0, \"tid\": 4, \"ts\": ");
  const auto slices = std::distance(std::sregex_iterator(text.begin(), text.end(), slice), std::sregex_iterator());
  EXPECT_EQ(double(slices), records);
}

}  // namespace
}  // namespace pptrain
