// Import of llm.c GPT-2 model files (`pptrain import-llmc`): a file the test writes in
// llm.c's documented layout loads to the same loss as the same weights set in memory and
// as an independent double-precision GPT-2 forward written from llm.c's layout; bf16
// files widen exactly; bad files are clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "checkpoint/checkpoint_manager.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/llmc_import.h"
#include "support/checkpoint_model.h"
#include "support/checkpoint_util.h"
#include "support/test_util.h"

using namespace pptrain;
using namespace pptrain::testing;
namespace fs = std::filesystem;

// ---- llm.c import ------------------------------------------------------------------

namespace {

// An llm.c model file: header and the 16 tensors in llm.c order (random values).
struct LlmcFile {
  int T = 5, V = 11, Vp = 16, L = 2, NH = 2, C = 8;
  std::vector<float> wte, wpe, ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw,
      lnfb;

  explicit LlmcFile(uint32_t seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> n(0.0f, 0.3f);
    auto fill = [&](std::vector<float>& v, size_t count, float base) {
      v.resize(count);
      for (float& x : v) x = base + n(gen);
    };
    fill(wte, size_t(Vp) * C, 0), fill(wpe, size_t(T) * C, 0), fill(ln1w, L * C, 1), fill(ln1b, L * C, 0);
    fill(qkvw, size_t(L) * 3 * C * C, 0), fill(qkvb, L * 3 * C, 0), fill(projw, size_t(L) * C * C, 0);
    fill(projb, L * C, 0), fill(ln2w, L * C, 1), fill(ln2b, L * C, 0), fill(fcw, size_t(L) * 4 * C * C, 0);
    fill(fcb, L * 4 * C, 0), fill(fcprojw, size_t(L) * C * 4 * C, 0), fill(fcprojb, L * C, 0);
    fill(lnfw, C, 1), fill(lnfb, C, 0);
  }
  std::vector<const std::vector<float>*> in_order() const {
    return {&wte, &wpe, &ln1w, &ln1b, &qkvw, &qkvb, &projw, &projb, &ln2w, &ln2b, &fcw, &fcb, &fcprojw, &fcprojb,
            &lnfw, &lnfb};
  }
  void write(const std::string& path, int version = 3, int magic = 20240326) const {
    int32_t header[256] = {0};
    int32_t fields[8] = {magic, version, T, V, L, NH, C, Vp};
    std::memcpy(header, fields, sizeof fields);
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header), sizeof header);
    for (const auto* t : in_order()) {
      if (version == 3) {
        out.write(reinterpret_cast<const char*>(t->data()), t->size() * sizeof(float));
      } else {
        for (float x : *t) {  // bf16: the top half of the fp32 (truncation)
          uint32_t bits;
          std::memcpy(&bits, &x, 4);
          uint16_t top = uint16_t(bits >> 16);
          out.write(reinterpret_cast<const char*>(&top), 2);
        }
      }
    }
  }
  ModelConfig model() const {
    ModelConfig m;
    m.n_layer = L, m.n_head = NH, m.d_model = C, m.seq_len = T, m.vocab_size = V;
    return m;
  }

  // Mean cross-entropy of GPT-2 on `tokens` -> `targets` (one sequence of T), in double,
  // computed straight from the llm.c arrays (llm.c's train_gpt2.c forward pass).
  double reference_loss(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets) const {
    const int hs = C / NH;
    using Mat = std::vector<std::vector<double>>;
    auto layernorm = [&](const Mat& x, const float* w, const float* b) {
      Mat y(T, std::vector<double>(C));
      for (int t = 0; t < T; ++t) {
        double mean = 0, var = 0;
        for (int c = 0; c < C; ++c) mean += x[t][c] / C;
        for (int c = 0; c < C; ++c) var += (x[t][c] - mean) * (x[t][c] - mean) / C;
        for (int c = 0; c < C; ++c) y[t][c] = (x[t][c] - mean) / std::sqrt(var + 1e-5) * w[c] + b[c];
      }
      return y;
    };
    auto matmul = [&](const Mat& x, const float* w, const float* b, int in, int out) {  // y = x wᵀ + b
      Mat y(T, std::vector<double>(out));
      for (int t = 0; t < T; ++t)
        for (int o = 0; o < out; ++o) {
          double s = b ? b[o] : 0.0;
          for (int i = 0; i < in; ++i) s += x[t][i] * double(w[size_t(o) * in + i]);
          y[t][o] = s;
        }
      return y;
    };
    Mat x(T, std::vector<double>(C));
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) x[t][c] = double(wte[size_t(tokens[t]) * C + c]) + wpe[size_t(t) * C + c];
    for (int l = 0; l < L; ++l) {
      Mat qkv = matmul(layernorm(x, &ln1w[l * C], &ln1b[l * C]), &qkvw[size_t(l) * 3 * C * C], &qkvb[l * 3 * C], C,
                       3 * C);
      Mat att(T, std::vector<double>(C));
      for (int h = 0; h < NH; ++h)
        for (int t = 0; t < T; ++t) {
          std::vector<double> score(t + 1);
          double mx = -1e300, sum = 0;
          for (int u = 0; u <= t; ++u) {
            double s = 0;
            for (int d = 0; d < hs; ++d) s += qkv[t][h * hs + d] * qkv[u][C + h * hs + d];
            score[u] = s / std::sqrt(double(hs));
            mx = std::max(mx, score[u]);
          }
          for (int u = 0; u <= t; ++u) sum += (score[u] = std::exp(score[u] - mx));
          for (int d = 0; d < hs; ++d) {
            double o = 0;
            for (int u = 0; u <= t; ++u) o += score[u] / sum * qkv[u][2 * C + h * hs + d];
            att[t][h * hs + d] = o;
          }
        }
      Mat proj = matmul(att, &projw[size_t(l) * C * C], &projb[l * C], C, C);
      for (int t = 0; t < T; ++t)
        for (int c = 0; c < C; ++c) x[t][c] += proj[t][c];
      Mat fc = matmul(layernorm(x, &ln2w[l * C], &ln2b[l * C]), &fcw[size_t(l) * 4 * C * C], &fcb[l * 4 * C], C,
                      4 * C);
      for (auto& row : fc)
        for (double& v : row) v = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
      Mat out = matmul(fc, &fcprojw[size_t(l) * C * 4 * C], &fcprojb[l * C], 4 * C, C);
      for (int t = 0; t < T; ++t)
        for (int c = 0; c < C; ++c) x[t][c] += out[t][c];
    }
    Mat logits = matmul(layernorm(x, lnfw.data(), lnfb.data()), wte.data(), nullptr, C, V);  // first V rows
    double loss = 0;
    for (int t = 0; t < T; ++t) {
      double mx = *std::max_element(logits[t].begin(), logits[t].end()), sum = 0;
      for (double v : logits[t]) sum += std::exp(v - mx);
      loss += std::log(sum) + mx - logits[t][targets[t]];
    }
    return loss / T;
  }

  // The same weights set by name into a pptrain model in memory.
  void set_into(ParamStore& params) const {
    auto set = [&](const std::string& name, const float* src) {
      Param* p = params.find(name);
      ASSERT_NE(p, nullptr) << name;
      p->set_masters(src);
    };
    set("wte.weight", wte.data());  // the first V rows: tp = 1 holds no padding
    set("wpe.weight", wpe.data());
    for (int l = 0; l < L; ++l) {
      auto h = [&](const char* n) { return "h." + std::to_string(l) + "." + n; };
      set(h("ln_1.weight"), &ln1w[l * C]), set(h("ln_1.bias"), &ln1b[l * C]);
      set(h("attn.qkv.weight"), &qkvw[size_t(l) * 3 * C * C]), set(h("attn.qkv.bias"), &qkvb[l * 3 * C]);
      set(h("attn.proj.weight"), &projw[size_t(l) * C * C]), set(h("attn.proj.bias"), &projb[l * C]);
      set(h("ln_2.weight"), &ln2w[l * C]), set(h("ln_2.bias"), &ln2b[l * C]);
      set(h("mlp.fc.weight"), &fcw[size_t(l) * 4 * C * C]), set(h("mlp.fc.bias"), &fcb[l * 4 * C]);
      set(h("mlp.proj.weight"), &fcprojw[size_t(l) * C * 4 * C]), set(h("mlp.proj.bias"), &fcprojb[l * C]);
    }
    set("ln_f.weight", lnfw.data());
    set("ln_f.bias", lnfb.data());
  }
};

}  // namespace

TEST(LlmcImport, SameLossAsTheWeightsInMemoryAndAsLlmcForward) {
  TempDir dir;
  LlmcFile llmc(11);
  llmc.write(dir.file("model.bin"));
  CommandResult r = run_command(pptrain_bin() + " import-llmc " + dir.file("model.bin") + " " + dir.file("model.h5"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("vocab 11 padded to 16"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir.file("model.h5.tmp")));

  Model imported(llmc.model(), 1), in_memory(llmc.model(), 2);
  load_weights(imported, llmc.model(), dir.file("model.h5"));
  llmc.set_into(*in_memory.params);
  std::vector<hsize_t> shape;
  read_h5_floats(dir.file("model.h5"), "/model/wte.weight", &shape);
  EXPECT_EQ(shape, (std::vector<hsize_t>{11, 8}));  // padding rows 11..15 dropped

  for (uint32_t seed : {1u, 2u, 3u}) {
    std::mt19937 gen(seed);
    std::vector<int32_t> tokens(llmc.T), targets(llmc.T);
    for (int t = 0; t < llmc.T; ++t) tokens[t] = int32_t(gen() % llmc.V), targets[t] = int32_t(gen() % llmc.V);
    const double a = imported.loss(tokens, targets), b = in_memory.loss(tokens, targets);
    const double ref = llmc.reference_loss(tokens, targets);
    EXPECT_EQ(a, b) << "seed " << seed;
    EXPECT_NEAR(a, ref, 1e-5 * ref) << "seed " << seed;
  }

  IoGroup io = IoGroup::single();
  CheckpointMeta meta = read_checkpoint_meta(dir.file("model.h5"), io);
  EXPECT_EQ(meta.step, 0);
  EXPECT_FALSE(meta.has_optimizer_state);
  // Resuming training from it: weights load, moments start at zero.
  Config cfg = tiny_config("");
  cfg.model = llmc.model();
  cfg.checkpoint.resume = dir.file("model.h5");
  Model trainee(llmc.model(), 5);
  trainee.randomise(4);
  EXPECT_EQ(CheckpointManager(cfg, single_process()).resume(*trainee.params, *trainee.optimizer), 0);
  for (auto& [name, p] : trainee.params->all()) {
    EXPECT_EQ(p->value.to_host(), in_memory.params->find(name)->value.to_host()) << name;
    for (float x : trainee.optimizer->m(name).to_host()) ASSERT_EQ(x, 0.0f) << name;
  }
}

TEST(LlmcImport, Bf16ModelsWidenExactly) {
  TempDir dir;
  LlmcFile llmc(12);
  llmc.write(dir.file("bf16.bin"), 5);
  LlmcModel m = import_llmc(dir.file("bf16.bin"), dir.file("bf16.h5"));
  EXPECT_EQ(m.version, 5);
  std::vector<float> got = read_h5_floats(dir.file("bf16.h5"), "/model/h.1.mlp.fc.weight");
  const size_t n = size_t(4) * llmc.C * llmc.C;
  ASSERT_EQ(got.size(), n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &llmc.fcw[n + i], 4);
    bits &= 0xFFFF0000u;
    float want;
    std::memcpy(&want, &bits, 4);
    ASSERT_EQ(got[i], want) << i;
  }
}

TEST(LlmcImport, BadFilesAreClearErrors) {
  TempDir dir;
  LlmcFile llmc(13);
  llmc.write(dir.file("magic.bin"), 3, 12345);
  EXPECT_NE(error_of([&] { read_llmc_model(dir.file("magic.bin")); }).find("bad magic 12345 (expected 20240326"),
            std::string::npos);
  llmc.write(dir.file("version.bin"), 4);
  EXPECT_NE(error_of([&] { read_llmc_model(dir.file("version.bin")); }).find("llm.c model version 4 is not supported"),
            std::string::npos);
  llmc.write(dir.file("cut.bin"));
  fs::resize_file(dir.file("cut.bin"), fs::file_size(dir.file("cut.bin")) - 4);
  EXPECT_NE(error_of([&] { read_llmc_model(dir.file("cut.bin")); }).find("(truncated or not an llm.c model file)"),
            std::string::npos);
  CommandResult r = run_command(pptrain_bin() + " import-llmc " + dir.file("cut.bin") + " " + dir.file("out.h5"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("error: " + dir.file("cut.bin") + ": "), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir.file("out.h5")));
}

// A 1 KB header whose tensor sizes wrap 64-bit arithmetic around to exactly the header's
// size (C = 2^30, L = 1, Vp + maxT = 2^32 - 15): the element count is then
// C·(Vp + maxT + 15) + 12·C²·L = 2^62 + 3·2^62 = 2^64 = 0 mod 2^64, so an unchecked sum says
// "no tensor bytes" and the file "has the right size". It must be rejected before any
// allocation, naming the file.
TEST(LlmcImport, HeaderWhoseSizesOverflowIsRejected) {
  TempDir dir;
  const std::string path = dir.file("overflow.bin");
  const int32_t C = 1 << 30, Vp = INT32_MAX, T = int32_t((uint64_t(1) << 32) - 15 - uint64_t(Vp));
  int32_t header[256] = {20240326, 3, T, /*V*/ 2, /*L*/ 1, /*NH*/ 1, C, Vp};
  // The premise of the test: unchecked uint64 arithmetic wraps this header to zero elements.
  uint64_t wrapped = uint64_t(C) * (uint64_t(Vp) + uint64_t(T) + 15) + 12 * uint64_t(C) * uint64_t(C);
  ASSERT_EQ(wrapped, 0u);
  write_file(path, std::string(reinterpret_cast<const char*>(header), sizeof header));
  const std::string error = error_of([&] { read_llmc_model(path); });
  EXPECT_NE(error.find(path + ": the header's tensor sizes overflow 64-bit arithmetic"), std::string::npos) << error;
  CommandResult r = run_command("timeout 60 " + pptrain_bin() + " import-llmc " + path + " " + dir.file("out.h5"), 90);
  EXPECT_TRUE(r.exit_code != 0 && r.exit_code != 124) << r.exit_code << r.output;
  EXPECT_NE(r.output.find("error: " + path + ": the header's tensor sizes overflow"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir.file("out.h5")));
}

// A FIFO (or a directory) named as the model file is refused at once instead of blocking
// in open() waiting for a writer; `timeout` turns a hang into exit code 124.
TEST(LlmcImport, FifoAndDirectoryAreRefusedWithoutBlocking) {
  TempDir dir;
  const std::string fifo = dir.file("model.fifo");
  ASSERT_EQ(run_command("mkfifo " + fifo).exit_code, 0);
  CommandResult r = run_command("timeout 20 " + pptrain_bin() + " import-llmc " + fifo + " " + dir.file("out.h5"), 60);
  EXPECT_TRUE(r.exit_code != 0 && r.exit_code != 124) << r.exit_code << r.output;
  EXPECT_NE(r.output.find("llm.c model file " + fifo + ": is a FIFO (expected a regular file)"), std::string::npos)
      << r.output;
  EXPECT_NE(error_of([&] { read_llmc_model(dir.path()); }).find("is a directory"), std::string::npos);
}
