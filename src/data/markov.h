// MarkovSource: a synthetic token source of known entropy rate, to check that training
// learns what there is to learn. Token x_t depends on the K previous tokens (the
// context); each of the V^K contexts has its own next-token distribution.
//
// The entropy rate of a stationary order-K chain is
//   H = -Σ_c π(c) Σ_x P(x|c) ln P(x|c)     (nats/token),
// where π is the stationary distribution over contexts: the context chain moves from
// c = (x_{t-K}, ..., x_{t-1}) to (x_{t-K+1}, ..., x_t) with probability P(x_t|c). A model
// that predicts the next token perfectly reaches a cross-entropy loss of exactly H.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace pptrain::data {

inline constexpr uint64_t kMaxMarkovContexts = 1000000;        // V^K
inline constexpr uint64_t kMaxMarkovTableEntries = 1ull << 25;  // V^(K+1) doubles, 256 MiB

class MarkovSource {
 public:
  // transition[C, V] with C = V^K: row c is P(. | c). A context encodes its tokens in
  // base V, oldest first: c = Σ_i x_{t-K+i} · V^(K-1-i). Rows must be distributions.
  MarkovSource(int order, int vocab, std::vector<double> transition);

  // Random peaked transitions: each row is a draw from a symmetric Dirichlet(α) over V
  // tokens, with α = concentration. Small α concentrates a row on a few tokens: the
  // expected entropy of one row is ψ(Vα + 1) - ψ(α + 1), e.g. about 1.3 nats for
  // V = 32, α = 0.05 (ln 32 = 3.47). A pure function of (order, vocab, α, seed).
  static MarkovSource random(int order, int vocab, double concentration, uint64_t seed);

  int order() const { return order_; }
  int vocab() const { return vocab_; }
  uint64_t num_contexts() const { return num_contexts_; }
  // P(. | context), [V].
  std::span<const double> row(uint64_t context) const {
    return {transition_.data() + context * uint64_t(vocab_), size_t(vocab_)};
  }
  // The context after `token` follows `context`.
  uint64_t next_context(uint64_t context, int token) const {
    return num_contexts_ == 1 ? 0 : (context * uint64_t(vocab_) + uint64_t(token)) % num_contexts_;
  }
  // π[C], by power iteration at construction.
  const std::vector<double>& stationary() const { return stationary_; }
  double entropy_rate() const { return entropy_rate_; }

  // n tokens of the stationary chain (the first context is drawn from π), a pure
  // function of (source, seed, n): a longer stream extends a shorter one.
  std::vector<uint16_t> generate(uint64_t n, uint64_t seed) const;

 private:
  void compute_stationary();

  int order_;
  int vocab_;
  uint64_t num_contexts_;
  std::vector<double> transition_;  // [C, V]
  std::vector<double> stationary_;  // [C]
  double entropy_rate_ = 0;
};

}  // namespace pptrain::data
