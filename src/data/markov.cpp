#include "data/markov.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"

namespace pptrain::data {

namespace {

// V^K, or 0 when it exceeds `limit` (no overflow).
uint64_t checked_power(uint64_t base, int exponent, uint64_t limit) {
  uint64_t value = 1;
  for (int i = 0; i < exponent; ++i) {
    if (value > limit / base) return 0;
    value *= base;
  }
  return value;
}

// V^K after checking order, vocab and the size limits; throws a one-line Error.
uint64_t context_count(int order, int vocab) {
  if (order < 0) fail("markov source: order must be >= 0 (got ", order, ")");
  if (vocab < 2 || vocab > 65536)
    fail("markov source: vocab must be in [2, 65536] to fit uint16 tokens (got ", vocab, ")");
  const uint64_t contexts = checked_power(uint64_t(vocab), order, kMaxMarkovContexts);
  if (contexts == 0)
    fail("markov source: vocab^order = ", vocab, "^", order, " contexts exceeds ", kMaxMarkovContexts,
         " (lower the order or the vocab)");
  if (contexts > kMaxMarkovTableEntries / uint64_t(vocab))
    fail("markov source: the transition table of ", contexts, " x ", vocab, " entries exceeds ",
         kMaxMarkovTableEntries, " (lower the order or the vocab)");
  return contexts;
}

// ln of a Gamma(α, 1) draw for table entry `entry`, from counter-based uniforms.
// Marsaglia & Tsang (2000) draws Gamma(α+1); Gamma(α) = Gamma(α+1) · U^(1/α) extends it
// to α < 1. Working in logs keeps tiny draws (U^(1/α) underflows for small α) ordered.
double log_gamma_draw(const CounterRng& rng, uint64_t entry, double alpha) {
  const double d = alpha + 1.0 - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  double g = 0;
  for (uint64_t attempt = 0;; ++attempt) {
    const double x = rng.normal(entry, attempt);
    const double v = std::pow(1.0 + c * x, 3);
    if (v <= 0) continue;
    const double u = rng.uniform(entry, attempt);
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) {
      g = d * v;
      break;
    }
  }
  // Its own stream: an attempt number never gets near it (each attempt accepts > 95%).
  const double boost = 1.0 - rng.uniform(entry, 0xB0057ull);  // (0, 1]
  return std::log(g) + std::log(boost) / alpha;
}

}  // namespace

MarkovSource::MarkovSource(int order, int vocab, std::vector<double> transition)
    : order_(order), vocab_(vocab), transition_(std::move(transition)) {
  num_contexts_ = context_count(order, vocab);
  if (transition_.size() != num_contexts_ * uint64_t(vocab))
    fail("markov source: transition table has ", transition_.size(), " entries, expected ",
         num_contexts_, " x ", vocab);
  for (uint64_t c = 0; c < num_contexts_; ++c) {
    double sum = 0;
    for (double p : row(c)) {
      if (!(p >= 0 && p <= 1)) fail("markov source: context ", c, " has probability ", p);
      sum += p;
    }
    if (std::fabs(sum - 1.0) > 1e-9) fail("markov source: context ", c, " sums to ", sum, ", not 1");
  }
  compute_stationary();
}

MarkovSource MarkovSource::random(int order, int vocab, double concentration, uint64_t seed) {
  if (!(concentration > 0 && concentration <= 1e6))
    fail("markov source: concentration must be in (0, 1e6] (got ", concentration, ")");
  const uint64_t contexts = context_count(order, vocab);
  const CounterRng rng(seed, "markov.transition");
  const uint64_t V = uint64_t(vocab);
  std::vector<double> table(contexts * V);  // [C, V]
  std::vector<double> logs(V);
  for (uint64_t c = 0; c < contexts; ++c) {
    // Normalised Gamma draws are a Dirichlet draw; softmax of the logs normalises them.
    for (uint64_t x = 0; x < V; ++x) logs[x] = log_gamma_draw(rng, c * V + x, concentration);
    const double largest = *std::max_element(logs.begin(), logs.end());
    double sum = 0;
    for (uint64_t x = 0; x < V; ++x) sum += table[c * V + x] = std::exp(logs[x] - largest);
    for (uint64_t x = 0; x < V; ++x) table[c * V + x] /= sum;
  }
  return MarkovSource(order, vocab, std::move(table));
}

void MarkovSource::compute_stationary() {
  // Power iteration on the lazy chain π <- (π + πP) / 2: same fixed point as πP = π,
  // but aperiodic, so it converges even when P is (nearly) periodic.
  const uint64_t C = num_contexts_, V = uint64_t(vocab_);
  std::vector<double> pi(C, 1.0 / double(C)), next(C);
  const uint64_t max_iterations = std::clamp<uint64_t>(uint64_t(4e9) / (C * V), 1000, 1000000);
  double residual = 0;
  for (uint64_t it = 0; it < max_iterations; ++it) {
    std::fill(next.begin(), next.end(), 0.0);
    for (uint64_t c = 0; c < C; ++c) {
      const double* p = transition_.data() + c * V;
      for (uint64_t x = 0; x < V; ++x) next[next_context(c, int(x))] += pi[c] * p[x];
    }
    residual = 0;  // ||πP - π||_1
    double total = 0;
    for (uint64_t c = 0; c < C; ++c) {
      residual += std::fabs(next[c] - pi[c]);
      pi[c] = 0.5 * (pi[c] + next[c]);
      total += pi[c];
    }
    for (double& v : pi) v /= total;  // keeps Σπ = 1 against rounding drift
    if (residual < 1e-12) break;
  }
  if (residual >= 1e-12)
    fail("markov source: the stationary distribution did not converge in ", max_iterations,
         " iterations (residual ", residual, "); the chain mixes too slowly, raise the concentration");
  stationary_ = std::move(pi);

  double h = 0;
  for (uint64_t c = 0; c < C; ++c) {
    double row_entropy = 0;
    for (double p : row(c))
      if (p > 0) row_entropy -= p * std::log(p);
    h += stationary_[c] * row_entropy;
  }
  entropy_rate_ = h;
}

std::vector<uint16_t> MarkovSource::generate(uint64_t n, uint64_t seed) const {
  const uint64_t C = num_contexts_, V = uint64_t(vocab_);
  // Inverse-CDF sampling: cdf[c, x] = P(0..x | c). From the last token of positive
  // probability on, the entries are set to 1, so a uniform u in [0, 1) always lands on
  // a token of positive probability despite rounding in the sums.
  std::vector<double> cdf(C * V);  // [C, V]
  for (uint64_t c = 0; c < C; ++c) {
    const double* p = transition_.data() + c * V;
    double* row_cdf = cdf.data() + c * V;
    double sum = 0;
    for (uint64_t x = 0; x < V; ++x) row_cdf[x] = sum += p[x];
    uint64_t last = V - 1;
    while (last > 0 && p[last] == 0) --last;
    std::fill(row_cdf + last, row_cdf + V, 1.0);
  }
  const CounterRng rng(seed, "markov.stream");

  // First context ~ π, so the whole stream is stationary.
  uint64_t context = 0;
  {
    const double u = rng.uniform(0, 1);
    double sum = 0;
    context = C;
    for (uint64_t c = 0; c < C && context == C; ++c)
      if ((sum += stationary_[c]) > u) context = c;
    // Rounding left Σπ <= u: take the last context of positive probability.
    while (context == C || (context > 0 && stationary_[context] == 0)) --context;
  }
  std::vector<uint16_t> tokens(n);
  for (uint64_t i = 0; i < n; ++i) {
    const double* row_cdf = cdf.data() + context * V;
    const double u = rng.uniform(i, 0);
    const uint64_t x = uint64_t(std::upper_bound(row_cdf, row_cdf + V, u) - row_cdf);
    tokens[i] = uint16_t(x);
    context = next_context(context, int(x));
  }
  return tokens;
}

}  // namespace pptrain::data
