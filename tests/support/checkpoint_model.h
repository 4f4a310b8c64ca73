// The tiny single-rank model the checkpoint tests write, read and import into: the whole
// GPT-2 as one Stage on the cpu backend with its optimizer moments.
#pragma once
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "checkpoint/checkpoint_manager.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/io_group.h"
#include "checkpoint/tensor_table.h"
#include "core/communicator.h"
#include "core/config.h"
#include "core/error.h"
#include "model/stage.h"
#include "parallel/parallel_context.h"
#include "model/optimizer_state.h"
#include "support/error_of.h"
#include "support/single_rank_model.h"

namespace pptrain::testing {

inline Config tiny_config(const std::string& dir) {
  Config c;
  c.model = tiny_model();
  c.source = "tiny.yaml";
  c.checkpoint.dir = dir;
  return c;
}

// A whole model on one rank with its optimizer, values and moments randomised.
struct Model : SingleRankModel {
  std::unique_ptr<OptimizerState> optimizer;

  Model(const ModelConfig& m, uint64_t seed, int batch = 1) : SingleRankModel(m, batch, seed) {
    optimizer = std::make_unique<OptimizerState>(*params);
  }
  void randomise(uint32_t seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> noise(0.0f, 0.5f);
    for (auto& [name, p] : params->all())
      for (Buffer<float>* b : {&p->value, &optimizer->m(name), &optimizer->v(name)}) {
        std::vector<float> v(b->size());
        // A second moment is a mean of squares: never negative (a checkpoint refuses one).
        const bool second_moment = b == &optimizer->v(name);
        for (float& x : v) x = second_moment ? std::fabs(noise(gen)) : noise(gen);
        b->upload(v.data());
        p->bf16_stale = true;  // the masters changed
      }
  }
  // Mean loss of one microbatch (forward only).
  double loss(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets) {
    Buffer<int32_t> tok(*ops, tokens.size()), tgt(*ops, targets.size());
    tok.upload(tokens.data());
    tgt.upload(targets.data());
    stage->forward(0, {tok.data(), tgt.data()});
    double l = stage->loss_sum(0) / dims.rows();
    stage->discard(0);
    return l;
  }
  // Every value of the model and its moments, in a fixed order (per tensor: value, m, v).
  std::vector<float> all_values() {
    std::vector<float> out;
    for (auto& [name, p] : params->all())
      for (Buffer<float>* b : {&p->value, &optimizer->m(name), &optimizer->v(name)}) {
        const std::vector<float> v = b->to_host();
        out.insert(out.end(), v.begin(), v.end());
      }
    return out;
  }
};

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

inline ParallelContext single_process() { return ParallelContext{}; }

// Loads checkpoint `path` into host vectors with the reader the manager uses (no optimizer
// or device code runs: the corruption test forks it), `layout` giving the tensors. Returns
// "" and fills `values` (the order of Model::all_values) and `meta`, or the error.
inline std::string load_values(const std::string& path, Model& layout, std::vector<float>& values,
                               CheckpointMeta& meta) {
  const std::vector<ShardedTensor> tensors = sharded_tensors(*layout.params);
  std::vector<std::vector<float>> by_section[3];
  for (auto& v : by_section) v.resize(tensors.size());
  IoGroup io = IoGroup::single();
  try {
    meta = read_checkpoint_file(path, tensors, [&](Section s, int i, const float* host) {
      by_section[int(s)][i].assign(host, host + tensors[i].local_numel());
    }, tiny_config(""), true, io);
  } catch (const Error& e) {
    return e.what();
  }
  values.clear();
  for (size_t i = 0; i < tensors.size(); ++i)
    for (auto& section : by_section) values.insert(values.end(), section[i].begin(), section[i].end());
  return "";
}

// Loads the weights of checkpoint `path` (a file of model `m`) into `model`.
inline void load_weights(Model& model, const ModelConfig& m, const std::string& path) {
  Config cfg;
  cfg.model = m;
  cfg.source = "test";
  std::vector<Param*> by_index;
  for (auto& [name, p] : model.params->all()) by_index.push_back(p.get());
  IoGroup io = IoGroup::single();
  read_checkpoint_file(path, sharded_tensors(*model.params), [&](Section, int i, const float* host) {
    by_index[i]->set_masters(host);
  }, cfg, false, io);
}

}  // namespace pptrain::testing
