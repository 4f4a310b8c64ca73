// OptimizerState: the AdamW moments one rank holds, by parameter name: m (first moment)
// and v (second moment), fp32, zero at the start. The optimizer (train/adamw.h) updates
// them; checkpoints write and read them. It sits beside the parameters so that checkpoints
// need nothing from the training loop.
//
// Two forms:
//  - full: every parameter's moments, each the shape of its local shard [numel];
//  - ZeRO-1 shard (parallel.zero: 1): the moments of one shard of the flattened
//    parameters only (ParamStore::flatten: its 1/dp part of every bucket): two arenas of
//    flat_layout().shard_size elements,
//    each parameter's m(name) / v(name) a view of the part of its local shard inside the
//    range, range(name) saying which elements of the local shard that is (often empty).
// Checkpoints exchange a parameter's moments as its whole local shard on the host
// (download_local / upload_local), whichever form holds them.
#pragma once
#include <map>
#include <string>

#include "backend/buffer.h"
#include "model/param.h"

namespace pptrain {

class OptimizerState {
 public:
  // Full: zero moments for every parameter of `params` (all its parameters must exist).
  explicit OptimizerState(ParamStore& params);
  // ZeRO-1: the moments of shard `shard` of the flattened `params` only.
  OptimizerState(ParamStore& params, int shard);

  Buffer<float>& m(const std::string& name) { return moments_.at(name).m; }  // [range(name).size()]
  Buffer<float>& v(const std::string& name) { return moments_.at(name).v; }  // [range(name).size()]
  // The elements of the parameter's local shard whose moments are held: all when full.
  LocalRange range(const std::string& name) const { return moments_.at(name).range; }
  bool sharded() const { return sharded_; }
  // Bytes of moments this rank holds (both moments, with the shard's padding).
  size_t bytes() const { return bytes_; }
  void zero();
  // Exchanges every moment with `other`, a state of the same form over the same parameters:
  // the buffers change hands, no value is copied (post-validation's AdamW writes the update
  // into a second state and exchanges it in; the state it replaced is the backup).
  // References from m(), v() stay valid and then name the exchanged buffers.
  void swap(OptimizerState& other);

  // Host copies over the parameter's whole local shard, host[numel]: download_local writes
  // zeros outside range(name); upload_local keeps only range(name) of it.
  void download_local(const std::string& name, const Buffer<float>& moment, float* host) const;
  void upload_local(const std::string& name, Buffer<float>& moment, const float* host) const;

 private:
  struct Moments {
    Buffer<float> m, v;  // [range.size()]
    LocalRange range;
  };
  std::map<std::string, Moments> moments_;
  std::map<std::string, size_t> numel_;  // of each parameter's local shard
  Buffer<float> m_arena_, v_arena_;       // ZeRO-1: [shard_size] each
  bool sharded_ = false;
  size_t bytes_ = 0;
};

}  // namespace pptrain
