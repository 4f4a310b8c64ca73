// The data dependencies between actions, shared by lowering, the validator and the
// simulator. Per stage s and microbatch mb:
//   F(s)       needs F(s-1)                      (its input activations), s > 0
//   I(s), B(s) need F(s) and I(s+1) or B(s+1)    (the output gradient), s < last
//   W(s)       needs I(s)
// An edge crosses ranks when the two stages live on different ranks; it then travels as
// SEND_F(s-1) -> RECV_F(s) (activations) or SEND_B(s+1) -> RECV_B(s) (gradients).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include "pipeline/ir.h"

namespace pptrain::pipeline {

// What an action completes: its forward, its input gradient (I or B) or its weight
// gradient (W; B completes both gradients).
enum class Pass { Forward, InputGrad, WeightGrad };

inline Pass pass_of(Op op) {
  if (op == Op::F) return Pass::Forward;
  if (op == Op::W) return Pass::WeightGrad;
  return Pass::InputGrad;  // I, B
}

struct PassRef {
  Pass pass;
  int stage;
  int microbatch;
};

// The same-rank or cross-rank compute passes a compute action waits for (at most two).
inline std::vector<PassRef> dependencies(const Action& a, int num_stages) {
  std::vector<PassRef> deps;
  switch (a.op) {
    case Op::F:
      if (a.stage > 0) deps.push_back({Pass::Forward, a.stage - 1, a.microbatch});
      break;
    case Op::I:
    case Op::B:
      deps.push_back({Pass::Forward, a.stage, a.microbatch});
      if (a.stage + 1 < num_stages) deps.push_back({Pass::InputGrad, a.stage + 1, a.microbatch});
      break;
    case Op::W:
      deps.push_back({Pass::InputGrad, a.stage, a.microbatch});
      break;
    default:
      break;
  }
  return deps;
}

// For a compute action whose input comes from another rank: the RECV it needs on its own
// rank and the matching SEND on the producer's rank.
struct Message {
  Action send;  // on rank_of(send.stage)
  Action recv;  // on rank_of(recv.stage)
};

inline std::optional<Message> incoming_message(const Schedule& s, const Action& a) {
  const int r = s.rank_of(a.stage);
  if (a.op == Op::F && a.stage > 0 && s.rank_of(a.stage - 1) != r)
    return Message{{Op::SEND_F, a.stage - 1, a.microbatch}, {Op::RECV_F, a.stage, a.microbatch}};
  if ((a.op == Op::I || a.op == Op::B) && a.stage + 1 < s.num_stages() &&
      s.rank_of(a.stage + 1) != r)
    return Message{{Op::SEND_B, a.stage + 1, a.microbatch}, {Op::RECV_B, a.stage, a.microbatch}};
  return std::nullopt;
}

// For a compute action whose result another rank needs: the message it starts.
inline std::optional<Message> outgoing_message(const Schedule& s, const Action& a) {
  const int r = s.rank_of(a.stage);
  if (a.op == Op::F && a.stage + 1 < s.num_stages() && s.rank_of(a.stage + 1) != r)
    return Message{{Op::SEND_F, a.stage, a.microbatch}, {Op::RECV_F, a.stage + 1, a.microbatch}};
  if ((a.op == Op::I || a.op == Op::B) && a.stage > 0 && s.rank_of(a.stage - 1) != r)
    return Message{{Op::SEND_B, a.stage, a.microbatch}, {Op::RECV_B, a.stage - 1, a.microbatch}};
  return std::nullopt;
}

// The other end of a SEND or RECV.
inline Action matching_action(const Action& a) {
  switch (a.op) {
    case Op::SEND_F: return {Op::RECV_F, a.stage + 1, a.microbatch};
    case Op::RECV_F: return {Op::SEND_F, a.stage - 1, a.microbatch};
    case Op::SEND_B: return {Op::RECV_B, a.stage - 1, a.microbatch};
    case Op::RECV_B: return {Op::SEND_B, a.stage + 1, a.microbatch};
    default: return a;
  }
}

// Map keys: an action, or a completed pass, as a comparable triple.
using ActionKey = std::tuple<int, int, int>;
inline ActionKey key_of(const Action& a) { return {int(a.op), a.stage, a.microbatch}; }
inline ActionKey key_of(const PassRef& p) { return {int(p.pass), p.stage, p.microbatch}; }
inline ActionKey pass_key(const Action& a) { return {int(pass_of(a.op)), a.stage, a.microbatch}; }

// A table over every key (op or pass, stage, microbatch) of a program whose stages and
// microbatches are in range (the validator checks that first): one slot per key in a flat
// array, so a lookup is an index computation, not a search. 8 ops x stages x microbatches.
template <typename T>
class KeyTable {
 public:
  KeyTable(int stages, int microbatches, T empty)
      : stages_(stages), microbatches_(microbatches),
        slots_(size_t(8) * size_t(stages) * size_t(microbatches), empty) {}
  T& operator[](const ActionKey& k) {
    return slots_[(size_t(std::get<0>(k)) * size_t(stages_) + size_t(std::get<1>(k))) * size_t(microbatches_) +
                  size_t(std::get<2>(k))];
  }
  const T& operator[](const ActionKey& k) const { return const_cast<KeyTable&>(*this)[k]; }

 private:
  int stages_, microbatches_;
  std::vector<T> slots_;
};

// For unordered maps of keys: the three ints mixed into one 64-bit value (splitmix64's
// finaliser), so keys that differ in any field spread over the buckets.
struct ActionKeyHash {
  size_t operator()(const ActionKey& k) const {
    uint64_t x = (uint64_t(uint32_t(std::get<0>(k))) << 56) ^ (uint64_t(uint32_t(std::get<1>(k))) << 28) ^
                 uint64_t(uint32_t(std::get<2>(k)));
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return size_t(x ^ (x >> 31));
  }
};

}  // namespace pptrain::pipeline
