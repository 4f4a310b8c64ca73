// UpdateBackup (train/update_backup.h), post-validation's backup, on the cpu backend with
// the copies counted (CountingOps), for full moments and for a ZeRO-1 shard:
//   - the optimistic update gives the bits of the synchronous in-place AdamW step (a second
//     store, same values and gradients);
//   - update, take_gradients, restore leaves the masters (the whole arena), both moments
//     and the gradients bit-identical to before, also when the step before settled without
//     a rollback (the order training runs them in);
//   - none of it copies: Ops::copy moves no byte (the buffers are exchanged);
//   - a second restore of the same update is refused.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/config.h"
#include "model/param.h"
#include "support/counting_ops.h"
#include "support/cpu_ops_util.h"
#include "train/adamw.h"
#include "train/update_backup.h"

using namespace pptrain;
using namespace pptrain::testing;

namespace {

// Sizes not multiples of kFlatAlign, so the arena has padding inside and between tensors.
const std::vector<ParamSpec> kSpecs = {
    {"a.weight", {37, 5}, Shard::Replicated, Init::Normal, 0.5f, true},
    {"b.bias", {11}, Shard::Replicated, Init::Normal, 0.5f, false},
    {"c.weight", {3, 7}, Shard::Replicated, Init::Normal, 0.5f, true},
};

TrainingConfig adamw_config() {
  TrainingConfig t;
  t.weight_decay = 0.1;
  return t;
}

// One rank's parameters (flattened over `shards`) and optimizer on a counting cpu backend.
// `shard` < 0: full moments.
struct Model {
  CountingOps ops{make_cpu_ops()};
  ParamStore params{ops, 1, 0, 7};
  std::unique_ptr<AdamW> optimizer;

  Model(int shards, int shard) {
    for (const ParamSpec& s : kSpecs) params.get_or_create(s);
    params.flatten(shards);
    optimizer = shard < 0 ? std::make_unique<AdamW>(params, adamw_config())
                          : std::make_unique<AdamW>(params, adamw_config(), shard);
  }
  // Gradients of step `t`, the same on every Model.
  void set_gradients(int t) {
    uint32_t seed = 100 + 10 * uint32_t(t);
    for (auto& [name, p] : params.all()) p->grad.upload(random_floats(p->numel(), seed++).data());
  }
};

// Every float the update and its undoing concern, on the host: the whole masters arena
// (padding and, under ZeRO-1, the other ranks' ranges included), every gradient, both moments.
struct Snapshot {
  std::vector<float> masters;
  std::map<std::string, std::vector<float>> grads, m, v;
};

Snapshot snapshot(Model& model) {
  Snapshot s;
  const size_t total = model.params.flat_layout().total();
  s.masters.resize(total);
  model.ops.copy_to_host(s.masters.data(), model.params.value_arena(), total * sizeof(float));
  OptimizerState& state = model.optimizer->state();
  for (auto& [name, p] : model.params.all()) {
    s.grads[name] = p->grad.to_host();
    s.m[name] = state.m(name).to_host();
    s.v[name] = state.v(name).to_host();
  }
  return s;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Bitwise equality of everything `got` and `want` hold, one failure per differing tensor.
void expect_same(const Snapshot& got, const Snapshot& want, const std::string& what) {
  EXPECT_TRUE(same_bits(got.masters, want.masters)) << what << ": the masters differ";
  for (const auto& [name, g] : want.grads) {
    EXPECT_TRUE(same_bits(got.grads.at(name), g)) << what << ": the gradient of " << name << " differs";
    EXPECT_TRUE(same_bits(got.m.at(name), want.m.at(name))) << what << ": m of " << name << " differs";
    EXPECT_TRUE(same_bits(got.v.at(name), want.v.at(name))) << what << ": v of " << name << " differs";
  }
}

// The elements of the masters the optimizer updates (its ranges) of `got` equal `want`'s.
void expect_same_updated_masters(Model& got, Model& want, const std::string& what) {
  for (auto& [name, p] : want.params.all()) {
    const LocalRange r = want.optimizer->state().range(name);
    const std::vector<float> a = got.params.find(name)->value.to_host(), b = p->value.to_host();
    EXPECT_TRUE(same_bits({a.begin() + long(r.begin), a.begin() + long(r.end)},
                          {b.begin() + long(r.begin), b.begin() + long(r.end)}))
        << what << ": the updated masters of " << name << " differ from the in-place step's";
  }
}

// ZeRO-1's all-gather of the masters after the update, for a single process: `pv` takes
// `sync`'s whole arena, its own range the same bits (expect_same_updated_masters), the rest
// standing in for the other ranks' ranges. After it the exchanged arena holds every
// element, as in training. By upload, so no Ops::copy is counted.
void gather_masters(Model& pv, Model& sync) {
  if (!pv.optimizer->state().sharded()) return;
  std::vector<float> all(sync.params.flat_layout().total());
  sync.ops.copy_to_host(all.data(), sync.params.value_arena(), all.size() * sizeof(float));
  pv.ops.copy_to_device(pv.params.value_arena(), all.data(), all.size() * sizeof(float));
}

// Training's sequence on `pv` against the in-place steps on `sync`: step 1 optimistic and
// kept (settled without a rollback: the gradients returned), step 2 optimistic and rolled
// back; both checked after each update, the rollback against the state before step 2.
void check_update_and_restore(int shards, int shard) {
  SCOPED_TRACE(shard < 0 ? std::string("full moments") : "ZeRO-1 shard " + std::to_string(shard));
  Model pv(shards, shard), sync(shards, shard);
  UpdateBackup backup(pv.params, *pv.optimizer, shard);
  const double lr = 3e-2;

  pv.set_gradients(1);
  sync.set_gradients(1);
  const size_t copied_before = pv.ops.copied_bytes();
  backup.update(lr, 1, 1.0f);
  backup.take_gradients();
  backup.return_gradients();
  sync.optimizer->step(lr, 1, 1.0f);
  expect_same_updated_masters(pv, sync, "step 1");
  gather_masters(pv, sync);
  expect_same(snapshot(pv), snapshot(sync), "step 1, settled");

  pv.set_gradients(2);
  sync.set_gradients(2);
  const Snapshot before = snapshot(pv);
  backup.update(lr, 2, 1.0f);
  backup.take_gradients();
  sync.optimizer->step(lr, 2, 1.0f);
  expect_same_updated_masters(pv, sync, "step 2");
  gather_masters(pv, sync);
  EXPECT_FALSE(same_bits(snapshot(pv).masters, before.masters)) << "step 2 changed no master: the test proves nothing";
  pv.set_gradients(3);  // the next step's pipeline writes the gradients before the rollback
  backup.restore();
  expect_same(snapshot(pv), before, "step 2 rolled back");
  EXPECT_EQ(pv.ops.copied_bytes(), copied_before) << "the backup copied masters or moments";

  EXPECT_THROW(backup.restore(), std::logic_error) << "a second restore of one update";
}

}  // namespace

TEST(UpdateBackup, FullMomentsRestoreEveryBitWithoutACopy) { check_update_and_restore(1, -1); }

TEST(UpdateBackup, ZeroShardsRestoreEveryBitWithoutACopy) {
  // Two shards of the flat layout: each rank's range cuts a.weight or c.weight apart.
  check_update_and_restore(2, 0);
  check_update_and_restore(2, 1);
}
