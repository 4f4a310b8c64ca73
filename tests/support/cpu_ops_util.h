// Helpers shared by the cpu op tests: seeded random tensors, error norms and central
// finite differences. The cpu backend works on host memory, so the tests hand it
// std::vector storage directly.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

namespace pptrain::testing {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

inline std::vector<int32_t> random_ints(size_t n, uint32_t seed, int lo, int hi) {  // [lo, hi]
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(gen);
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// max_i |a_i - b_i| / max_i |b_i|: the error relative to the tensor's scale, so that
// elements that are near zero by chance do not dominate.
template <typename A, typename B>
double normalized_error(const std::vector<A>& a, const std::vector<B>& b) {
  if (a.size() != b.size()) return INFINITY;
  double diff = 0.0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return diff / scale;
}

// Σ r_i y_i in double: the scalar loss whose gradient w.r.t. y is r.
inline double weighted_sum(const std::vector<float>& y, const std::vector<float>& r) {
  double s = 0.0;
  for (size_t i = 0; i < y.size(); ++i) s += double(r[i]) * double(y[i]);
  return s;
}

// Central differences dL/dx_i = (L(x + h e_i) - L(x - h e_i)) / (x_+ - x_-), evaluated
// with the float op. The denominator uses the perturbed values as actually stored in
// float, so rounding of x ± h does not bias the quotient. `indices` limits the check to
// some coordinates (empty: all); the other entries of the result stay 0.
inline std::vector<double> finite_difference(std::vector<float>& x,
                                             const std::function<double()>& loss, double h,
                                             const std::vector<size_t>& indices = {}) {
  std::vector<double> grad(x.size(), 0.0);
  auto one = [&](size_t i) {
    const float saved = x[i];
    const float plus = float(saved + h), minus = float(saved - h);
    x[i] = plus;
    const double loss_plus = loss();
    x[i] = minus;
    const double loss_minus = loss();
    x[i] = saved;
    grad[i] = (loss_plus - loss_minus) / (double(plus) - double(minus));
  };
  if (indices.empty()) {
    for (size_t i = 0; i < x.size(); ++i) one(i);
  } else {
    for (size_t i : indices) one(i);
  }
  return grad;
}

// The entries of `v` at `indices` (to compare a sampled finite difference).
template <typename T>
std::vector<T> gather(const std::vector<T>& v, const std::vector<size_t>& indices) {
  std::vector<T> out;
  out.reserve(indices.size());
  for (size_t i : indices) out.push_back(v[i]);
  return out;
}

inline std::vector<size_t> sample_indices(size_t n, size_t count, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<size_t> all(n);
  for (size_t i = 0; i < n; ++i) all[i] = i;
  std::shuffle(all.begin(), all.end(), gen);
  all.resize(std::min(n, count));
  std::sort(all.begin(), all.end());
  return all;
}

}  // namespace pptrain::testing
