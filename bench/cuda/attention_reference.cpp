// The fp64 reference and the bounds of bench/cuda/attention_reference.h (derived there).
#include "bench/cuda/attention_reference.h"

#include <algorithm>
#include <cmath>

namespace pptrain::attention_check {
namespace {

// One (batch, head) of the reference and of both bound kinds.
void reference_head(const Shape& s, const std::vector<double>& qkv, const std::vector<double>& dout, int b, int h,
                    Reference& ref) {
  const double scale = 1.0 / std::sqrt(double(s.hd)), u = kU;
  const double e = (2.0 * s.hd + 2.0 * s.t + 32) * std::ldexp(1.0, -24);
  auto q = [&](int i, int d) { return qkv[at(s, 0, b, i, h, d)]; };
  auto k = [&](int j, int d) { return qkv[at(s, 1, b, j, h, d)]; };
  auto v = [&](int j, int d) { return qkv[at(s, 2, b, j, h, d)]; };
  auto d_o = [&](int i, int d) { return dout[at(s, -1, b, i, h, d)]; };
  Result& r = ref.r;
  std::vector<double> p(s.t), dp(s.t), a(s.t), o(s.hd), mo(s.hd);
  for (int i = 0; i < s.t; ++i) {
    // scores, c_i, log-sum-exp, probabilities
    double mx = -INFINITY, c = 0;
    for (int j = 0; j <= i; ++j) {
      double dot = 0, mag = 0;
      for (int d = 0; d < s.hd; ++d) dot += q(i, d) * k(j, d), mag += std::fabs(q(i, d) * k(j, d));
      p[j] = dot * scale;
      c = std::max(c, mag * scale);
      mx = std::max(mx, p[j]);
    }
    double sum = 0;
    for (int j = 0; j <= i; ++j) sum += std::exp(p[j] - mx);
    const double lse = mx + std::log(sum);
    const size_t row = (size_t(b) * s.nh + h) * s.t + i;
    r.lse[row] = lse;
    ref.bounds["fused"].lse[row] = e * (1 + c + std::fabs(lse));
    // out, dP and the row magnitudes
    std::fill(o.begin(), o.end(), 0.0);
    std::fill(mo.begin(), mo.end(), 0.0);
    double dsum = 0, hsum = 0, esum = 0, ksum = 0, fsum = 0;  // D_i, H_i, E_i, K_i, F_i
    for (int j = 0; j <= i; ++j) {
      p[j] = std::exp(p[j] - lse);
      dp[j] = a[j] = 0;
      for (int d = 0; d < s.hd; ++d) {
        dp[j] += d_o(i, d) * v(j, d);
        a[j] += std::fabs(d_o(i, d) * v(j, d));
        o[d] += p[j] * v(j, d);
        mo[d] += p[j] * std::fabs(v(j, d));
      }
      dsum += p[j] * dp[j];
      hsum += p[j] * std::fabs(dp[j]);
      esum += p[j] * a[j];
    }
    for (int d = 0; d < s.hd; ++d) ksum += std::fabs(d_o(i, d) * o[d]), fsum += std::fabs(d_o(i, d)) * mo[d];
    for (const char* kd : {"fused", "naive"}) {
      const bool fused = kd == std::string("fused");
      Result& bd = ref.bounds[kd];
      const double ep = fused ? e * (1 + c) : u + 2 * u * c + e * (1 + c);
      const double delta_d = fused ? (u + ep + e) * hsum + (u + e) * ksum + e * fsum : (ep + u + e) * hsum + e * esum;
      const double alpha = ep + u, beta = fused ? 0 : u, pv = ep + e + (fused ? u : 0);
      for (int d = 0; d < s.hd; ++d) {
        r.out[at(s, -1, b, i, h, d)] = o[d];
        bd.out[at(s, -1, b, i, h, d)] = pv * mo[d] + u * std::fabs(o[d]);
      }
      for (int j = 0; j <= i; ++j) {
        const double ds = p[j] * (dp[j] - dsum);
        const double err_ds = alpha * std::fabs(ds) + p[j] * (beta * std::fabs(dp[j]) + e * a[j] + delta_d);
        const double w = err_ds + e * std::fabs(ds);  // dS's error, and the fp32 sums over it
        for (int d = 0; d < s.hd; ++d) {
          // (dK and dV of a key/value head gather the sums of all its query heads: the
          // bounds add up with them.)
          if (fused) {  // the reference once (the loop runs for both kinds)
            r.dqkv[at(s, 0, b, i, h, d)] += scale * ds * k(j, d);
            r.dqkv[at(s, 1, b, j, h, d)] += scale * ds * q(i, d);
            r.dqkv[at(s, 2, b, j, h, d)] += p[j] * d_o(i, d);
          }
          bd.dqkv[at(s, 0, b, i, h, d)] += scale * w * std::fabs(k(j, d));
          bd.dqkv[at(s, 1, b, j, h, d)] += scale * w * std::fabs(q(i, d));
          bd.dqkv[at(s, 2, b, j, h, d)] += pv * p[j] * std::fabs(d_o(i, d));
        }
      }
    }
  }
}

}  // namespace

Reference reference(const Shape& s, const std::vector<double>& qkv, const std::vector<double>& dout) {
  Reference ref;
  for (Result* x : {&ref.r, &ref.bounds["fused"], &ref.bounds["naive"]}) {
    x->out.assign(s.tokens() * s.c(), 0);
    x->lse.assign(size_t(s.b) * s.nh * s.t, 0);
    x->dqkv.assign(s.tokens() * s.w(), 0);
  }
  ref.bounds["naive"].lse.clear();  // naive keeps probs, not lse
  for (int b = 0; b < s.b; ++b)
    for (int h = 0; h < s.nh; ++h) reference_head(s, qkv, dout, b, h, ref);
  // The final rounding of every stored output: u |R|.
  for (auto& [name, bd] : ref.bounds) {
    for (size_t i = 0; i < bd.dqkv.size(); ++i) bd.dqkv[i] += kU * std::fabs(ref.r.dqkv[i]);
  }
  return ref;
}

}  // namespace pptrain::attention_check
