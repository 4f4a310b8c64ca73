// Parameters: each rank holds only its shard of each global tensor. A Param records
// where its local elements sit in the global (unsharded) tensor as a list of slabs, which
// is what initialisation (counter-based RNG by global index), checkpoints (HDF5
// hyperslabs) and resharding all need. Names follow the model's roles:
//   wte.weight [V, C], wpe.weight [T, C], h.<i>.ln_1.weight [C], h.<i>.attn.qkv.weight [3C, C],
//   h.<i>.attn.proj.weight [C, C], h.<i>.mlp.fc.weight [4C, C], h.<i>.mlp.proj.weight [C, 4C],
//   ln_f.weight [C], and the matching .bias vectors; lm_head.weight [V, C] when the head is
//   not tied to wte (model.tie_embeddings: false).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/buffer.h"
#include "core/bf16.h"
#include "core/error.h"

namespace pptrain {

// rows x cols of the global tensor at (global_row, global_col) stored at
// (local_row, local_col) of the local [local_rows, local_cols] tensor.
struct Slab {
  int64_t global_row, global_col, local_row, local_col, rows, cols;
};

enum class Init { Normal, Zeros, Ones };

// How a tensor is split over the tp ranks.
enum class Shard {
  Replicated,   // every tp rank holds the whole tensor
  Rows,         // dim 0 split into tp contiguous parts (column-parallel weight, its bias, vocab rows)
  Rows3,        // dim 0 = 3 sections (q, k, v), each split into tp parts (fused QKV)
  RowSections,  // dim 0 = the sections of ParamSpec::row_sections, each split into tp parts
                // (fused QKV with fewer key/value heads than query heads)
  Cols,         // dim 1 split into tp parts (row-parallel weight)
};

struct ParamSpec {
  std::string name;
  std::vector<int64_t> global_shape;  // 1 or 2 dims
  Shard shard = Shard::Replicated;
  Init init = Init::Zeros;
  float init_std = 0.0f;
  bool weight_decay = false;
  int64_t padded_rows = 0;  // Shard::Rows only: dim 0 padded to this (vocab rounded up to tp)
  std::vector<int64_t> row_sections = {};  // Shard::RowSections only: the sections' rows, summing to dim 0
};

// The elements [begin, end) of a parameter's local shard (row-major [local_rows,
// local_cols]); empty when begin >= end.
struct LocalRange {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
};

struct Param {
  ParamSpec spec;
  int64_t local_rows = 0, local_cols = 1;
  std::vector<Slab> slabs;
  bool replicated_over_tp = false;  // every tp rank holds (and updates) the same values
  // The fp32 masters of the local elements master_range: [master_range.size()]. The whole
  // local tensor, except under sharded masters (sharded_masters; ParamStore::flatten with a
  // master shard: ZeRO-1 under bf16), where it is the part inside the rank's range of the
  // flat arena, possibly empty. Written only through set_masters / zero_masters / AdamW,
  // which keep value_bf16 in step (bf16_stale).
  Buffer<float> value;
  LocalRange master_range;
  bool sharded_masters = false;
  Buffer<float> grad;               // [local_rows, local_cols], accumulated over microbatches (fp32)
  // Once the store is flattened (ParamStore::flatten): value, grad (and value_bf16) are
  // views of the store's arenas; the tensor's place in the flat layout is this element
  // offset (a multiple of kFlatAlign), inside bucket `bucket` of the layout.
  size_t flat_offset = 0;
  int bucket = 0;
  // This rank's copy is the one that counts when each global element must be counted once
  // (gradient norm, ZeRO checkpoint writes): false for a tp-replicated tensor on tp rank > 0
  // and for the tied embedding on a rank without stage 0 (set by the Job).
  bool primary = true;
  Buffer<bfloat16> value_bf16;      // [local_rows, local_cols]: the bf16 copy bf16 layers compute with
  // The masters changed since value_bf16 was last rounded from them: set by whatever writes
  // `value` other than AdamW (initialisation, checkpoint loads, imports, tests), cleared by
  // ParamStore::refresh_bf16* and by AdamW, which writes the copy with the update. A bf16
  // layer refuses a stale copy (weights<bfloat16>), so a missed refresh fails loudly.
  // Under sharded masters it is never set: a rank holds the masters of its range only, so
  // nothing could refresh the rest of the copy; every write rounds into the copy at once.
  bool bf16_stale = true;

  // host[numel]: the whole local tensor. Full masters: uploaded, the bf16 copy marked stale.
  // Sharded masters: master_range of it into the masters, and all of it rounded into the
  // bf16 copy by the backend's cast (the bits ParamStore::refresh_bf16 would give the rank
  // holding each element's master), so every dp rank holds the same copy.
  void set_masters(const float* host);
  void zero_masters();
  // host[numel]: the masters held (master_range), zeros elsewhere.
  void download_masters(float* host) const;

  size_t numel() const { return size_t(local_rows * local_cols); }
  int64_t global_rows() const { return spec.global_shape[0]; }
  int64_t global_cols() const { return spec.global_shape.size() > 1 ? spec.global_shape[1] : 1; }
};

// The weights a layer of storage type T computes with: the fp32 master itself, or its bf16
// copy (made by ParamStore::refresh_bf16).
template <typename T>
const T* weights(const Param& p);
template <>
inline const float* weights<float>(const Param& p) {
  // fp32 layers compute with the masters themselves, which is why they are never sharded
  // under fp32 (ZeRO-1 then shards the moments only).
  PPTRAIN_CHECK(!p.sharded_masters, "parameter ", p.spec.name, ": an fp32 layer needs the whole masters, but they are sharded");
  return p.value.data();
}
template <>
inline const bfloat16* weights<bfloat16>(const Param& p) {
  PPTRAIN_CHECK(!p.value_bf16.empty() || p.numel() == 0, "parameter ", p.spec.name,
                " has no bf16 copy (ParamStore::refresh_bf16 not called)");
  PPTRAIN_CHECK(!p.bf16_stale || p.numel() == 0, "parameter ", p.spec.name,
                ": its bf16 copy is stale (masters written since the last ParamStore::refresh_stale_bf16)");
  return p.value_bf16.data();
}

// Computes the local shape and slabs of `spec` for tp rank `tp_rank` of `tp`.
void shard_layout(const ParamSpec& spec, int tp, int tp_rank, Param& out);

// Initial values of the local shard: element (global index g) of a Normal parameter is
// init_std · N(0,1) drawn from CounterRng(seed, name) at g, whatever the layout.
std::vector<float> initial_values(const Param& p, uint64_t seed);

// The flattened parameters of one rank (ParamStore::flatten): every parameter's masters,
// gradients (and bf16 copies) sit in arenas, grouped in buckets (one per stage the rank
// holds, in stage order, then one of the tensors several stages use), in name order within
// a bucket, each tensor starting at a multiple of kFlatAlign elements and taking
// round_up(numel, kFlatAlign). Each bucket is padded to `shards` equal parts of its
// shard_size elements (a multiple of kFlatAlign), so that shard k of a dp group owns
// [begin + k · shard_size, begin + (k + 1) · shard_size) of every bucket: a bucket is
// reduce-scattered and all-gathered on its own (ZeRO-1 starts a stage's as soon as that
// stage's last W is done, and the next step waits for it only before the stage's first
// F). Shard k's parts of the buckets, back to back, form its shard arena (the sharded
// masters and moments), [FlatLayout::shard_size] elements. Padding stays zero. Every dp
// replica holds the same stages and tp shard, hence the same layout.
inline constexpr size_t kFlatAlign = 16;  // elements: 64-byte aligned tensors and shards
struct FlatBucket {
  int stage = -1;          // the stage whose tensors it holds; -1: tensors several stages use
  size_t begin = 0;        // flat position of its first element
  size_t shard_size = 0;   // elements in each shard's part
  size_t shard_begin = 0;  // where each shard's part starts in a shard arena
};
struct FlatLayout {
  int shards = 1;
  size_t used = 0;        // sum of the tensors' aligned sizes
  size_t shard_size = 0;  // elements one shard owns, all buckets together
  std::vector<FlatBucket> buckets;
  size_t total() const { return shard_size * size_t(shards); }
  // The flat position of shard k's part of bucket b.
  size_t part_begin(int b, int k) const { return buckets.at(b).begin + size_t(k) * buckets.at(b).shard_size; }
};
// The layout for buckets of tensors of the given element counts (any order within a
// bucket) split into `shards` ranges each; `stages[b]` is bucket b's stage (default -1).
FlatLayout flat_layout_of(const std::vector<std::vector<size_t>>& bucket_numels, int shards,
                          const std::vector<int>& stages = {});
// The same for one bucket of every tensor.
inline FlatLayout flat_layout_of(const std::vector<size_t>& numels, int shards) {
  return flat_layout_of(std::vector<std::vector<size_t>>{numels}, shards);
}

// The elements of a parameter's local shard that fall inside the flat range [lo, hi) of the
// arena; empty when none.
LocalRange local_range_in(const Param& p, size_t lo, size_t hi);
// The elements of p's local shard that shard k owns (inside k's part of p's bucket, once the
// store is flat), and where the first of them sits in shard k's arena.
LocalRange shard_range(const Param& p, const FlatLayout& layout, int shard);
size_t shard_arena_offset(const Param& p, const FlatLayout& layout, int shard);

// Flat runs [begin, end) of a flat store's arenas covering the given parts of its tensors
// (a Param and the local range of it each), merged where only padding, which stays zero,
// lies between two parts, and never across a tensor's elements that are not listed: a sum
// over the runs (of squares, say) is the sum over the parts, in a few reductions instead of
// one per tensor (on GPUs each reduction waits for its result).
std::vector<std::pair<size_t, size_t>> merged_flat_runs(const std::vector<std::pair<const Param*, LocalRange>>& parts,
                                                        const std::vector<const Param*>& all);

// Where the elements `r` of p's local shard sit in the global tensor: a contiguous run of
// the row-major local tensor is at most three rectangles (a partial first row, whole rows,
// a partial last row), each intersected with p's slabs (padding rows belong to none).
std::vector<Slab> slabs_in_range(const Param& p, LocalRange r);

// The parameters one rank holds, by name. Layers that share a tensor (the token embedding
// and the tied LM head on the same rank) get the same Param.
class ParamStore {
 public:
  ParamStore(Ops& ops, int tp, int tp_rank, uint64_t seed) : ops_(ops), tp_(tp), tp_rank_(tp_rank), seed_(seed) {}
  Param& get_or_create(const ParamSpec& spec);
  Param* find(const std::string& name);
  const std::map<std::string, std::unique_ptr<Param>>& all() const { return params_; }
  void zero_grads();
  // Moves every parameter's masters and gradients into arenas laid out by FlatLayout over
  // `shards` ranges, each Param's value and grad becoming a view; the values are kept.
  // `buckets`: the tensors of each bucket, by name, every parameter in exactly one (the Job
  // gives one per stage, then the shared ones); empty: one bucket of every parameter.
  // `bf16_copies` (training.precision: bf16): the bf16 copies get an arena of the same
  // layout too, rounded from the masters here. `master_shard` >= 0 (ZeRO-1 under bf16,
  // needs bf16_copies): the masters arena is that shard's arena only, [shard_size]
  // elements (its parts of the buckets, back to back), each Param's value the part of its
  // tensor inside it (Param::master_range); the layers compute with the bf16 arena, which
  // stays whole and which the dp ranks all-gather after each update.
  // Called once, after every parameter exists (Job, after the stages are built). Peak
  // memory is that of the unflattened masters plus the masters' and copies' arenas.
  struct Bucket {
    int stage = -1;
    std::vector<std::string> names;
  };
  void flatten(int shards, bool bf16_copies = false, int master_shard = -1, const std::vector<Bucket>& buckets = {});
  bool flat() const { return flat_; }
  bool masters_sharded() const { return master_shard_ >= 0; }
  const FlatLayout& flat_layout() const { return layout_; }
  // [flat_layout().shard_size] under sharded masters (the shard arena of master_shard),
  // else [flat_layout().total()].
  float* value_arena() { return value_arena_.data(); }
  size_t value_arena_size() const { return value_arena_.size(); }
  float* grad_arena() { return grad_arena_.data(); }  // [flat_layout().total()]
  size_t grad_arena_size() const { return grad_arena_.size(); }
  bfloat16* bf16_arena() { return bf16_arena_.data(); }  // [flat_layout().total()], or none
  size_t bf16_arena_size() const { return bf16_arena_.size(); }
  // Exchanges the gradient arena with `other` ([flat_layout().total()]) and points every
  // Param::grad into the new one (post-validation keeps a step's gradients this way).
  void swap_grad_arena(Buffer<float>& other);
  // The same for the masters arena (value_arena()'s size): every Param::value points into
  // the new arena, no value is copied (post-validation's AdamW writes the update into a
  // second arena and exchanges it in; the arena it replaced is the backup). The bf16 copies
  // are not touched: the caller knows whether they match the new masters.
  void swap_value_arena(Buffer<float>& other);
  // Rounds every fp32 master into its bf16 copy (allocated on first use unless flattened
  // with bf16_copies) and clears bf16_stale. Under sharded masters: the masters held
  // (master_range) only; the rest of each copy is the other dp ranks' to round.
  void refresh_bf16();
  // The same for the parameters whose bf16_stale is set only: what a bf16 model calls before
  // each step and evaluation. AdamW keeps the copies current itself, so after the first
  // step this rounds only what initialisation, a checkpoint load or an import wrote. Under
  // sharded masters a stale copy is an error (Param::bf16_stale).
  void refresh_stale_bf16();
  Ops& ops() { return ops_; }

 private:
  Ops& ops_;
  int tp_, tp_rank_;
  uint64_t seed_;
  // Points every Param::value (its master_range) and Param::grad into the arenas.
  void view_arenas();
  std::map<std::string, std::unique_ptr<Param>> params_;
  FlatLayout layout_;
  bool flat_ = false;
  int master_shard_ = -1;
  Buffer<float> value_arena_, grad_arena_;  // once flattened: see value_arena(), grad_arena()
  Buffer<bfloat16> bf16_arena_;             // [layout_.total()] with bf16 copies
};

}  // namespace pptrain
