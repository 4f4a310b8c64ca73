// The fp64 reference of causal attention for bench/cuda/attention_check.cpp, and the
// componentwise bounds on what bf16 implementations may differ from it.
//
// The measure. For each tensor X (out, lse, and the dq, dk, dv blocks of dqkv) and reference
// value R (fp64, from the same bf16 inputs):
//   normwise = ‖X − R‖₂ / ‖R‖₂,   and for two implementations ‖X − Y‖₂ / ‖R‖₂.
// The bound: each implementation's rounding errors are bounded componentwise, |X − R| ≤ b_X
// (b_X computed beside R, below), so ‖X − R‖₂ ≤ ‖b_X‖₂, and between two implementations
// ‖X − Y‖₂ ≤ ‖b_X‖₂ + ‖b_Y‖₂ (triangle inequality); bound = that over ‖R‖₂.
//
// With scale = 1/√HD, s_ij = scale·q_i·k_j (j ≤ i), p = softmax_j(s), dP_ij = dO_i·v_j,
// D_i = Σ_j p_ij dP_ij = dO_i·O_i, dS_ij = p_ij (dP_ij − D_i), and the magnitudes
//   c_i = max_j scale Σ_d |q_id||k_jd| (≥ |s_ij|),   A_ij = Σ_d |dO_id||v_jd| (≥ |dP_ij|),
//   H_i = Σ_j p_ij |dP_ij|,  E_i = Σ_j p_ij A_ij,  K_i = Σ_d |dO_id||O_id|,
//   Mo_id = Σ_j p_ij |v_jd|,  F_i = Σ_d |dO_id| Mo_id,
// unit roundoffs u = 2⁻⁸ (bf16: 8 significant bits) and e = (2·HD + 2·T + 32)·2⁻²⁴ for fp32
// arithmetic (dot products over HD, sums over up to T keys, γ_n ≈ n·2⁻²⁴, doubled for an
// online softmax's rescaling, and 32 ulps for exp/log and their approximations). A
// probability has relative error ε_p,i (fused: recomputed in fp32, e·(1 + c_i); naive: the
// scores q·kᵀ are stored in bf16 before the softmax, |Δs| ≤ u·c_i, so 2u·c_i on p, and p is
// stored in bf16: ε_p,i = u + 2u·c_i + e·(1 + c_i)).
//   fused (flash, cudnn): P is rounded to bf16 for P·V and Pᵀ·dO (u), outputs are stored in
//   bf16 (u), dS is rounded to bf16 for dS·K and dSᵀ·Q (u); D_i = dO_i·O_i reads the stored
//   out, whose error is linear in the errors of p: |ΔD_i| ≤ (u + ε_p,i + e) H_i + (u + e) K_i
//   + e F_i (summing over j before d is what makes it H, not the far larger E).
//   naive: dP is a bf16 GEMM output (u |dP|), D_i = Σ_j p dP over the stored p and dP:
//   |ΔD_i| ≤ (ε_p,i + u + e) H_i + e E_i.
// Then, with α = ε_p,i + u and β = 0 (fused) or u (naive),
//   |ΔdS_ij| ≤ α |dS_ij| + p_ij (β |dP_ij| + e A_ij + |ΔD_i|)
//   b_out[i,d] = (ε_p,i + e + [u fused]) Mo_id + u |O_id|
//   b_lse[i]   = e (1 + c_i + |lse_i|)                                   (fused only)
//   b_dq[i,d]  = scale Σ_j (|ΔdS_ij| + e |dS_ij|) |k_jd| + u |dQ_id|
//   b_dk[j,d]  = scale Σ_i (|ΔdS_ij| + e |dS_ij|) |q_id| + u |dK_jd|
//   b_dv[j,d]  = Σ_i (ε_p,i + e + [u fused]) p_ij |dO_id| + u |dV_jd|
// These are worst cases (every rounding at its extreme, no cancellation), so measured values
// sit well below them; an actual bug (a lost scale, a mask off by one, a wrong stride) is of
// the order of ‖R‖ itself, normwise ≈ 1 and more.
#pragma once
#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace pptrain::attention_check {

constexpr int kB = 2, kNH = 4, kT = 200;  // the checked shapes' batch, query heads, tokens
constexpr double kU = 1.0 / 256;  // bf16 unit roundoff, 2⁻⁸

// NKV key/value heads (NKV = NH: multi-head attention; fewer: grouped-query, query head h
// attends with key/value head h / (NH/NKV)).
struct Shape {
  int b, t, nh, hd, nkv;
  size_t c() const { return size_t(nh) * hd; }               // out's row width
  size_t w() const { return size_t(nh + 2 * nkv) * hd; }     // qkv's row width
  size_t tokens() const { return size_t(b) * t; }
};

// Host copies of one implementation's results (or the reference), as doubles.
struct Result {
  std::vector<double> out, lse, dqkv;  // [B,T,C], [B,NH,T] (empty for naive), [B,T,3C]
  std::string error;                   // what failed, if it did not run
};

// The fp64 reference and, per kind of implementation ("fused", "naive"), the componentwise
// error bounds b of the header comment, shaped like the results.
struct Reference {
  Result r;
  std::map<std::string, Result> bounds;
};

inline const char* kind(const std::string& impl) { return impl == "naive" ? "naive" : "fused"; }

// Element (b, t, h, d) of query head h's q (block 0), or of its key (1) or value (2) head,
// in qkv[B,T,(NH + 2·NKV)·HD]; block -1: of out[B,T,NH·HD].
inline size_t at(const Shape& s, int block, int b, int t, int h, int d) {
  const size_t token = size_t(b) * s.t + t, kv = size_t(h / (s.nh / s.nkv));
  if (block < 0) return token * s.c() + size_t(h) * s.hd + d;
  const size_t start = block == 0 ? size_t(h) * s.hd : (block == 1 ? s.c() : s.c() + size_t(s.nkv) * s.hd) + kv * s.hd;
  return token * s.w() + start + d;
}

// Which part of a qkv row column `col` is in: 0 q, 1 k, 2 v.
inline int part_of(const Shape& s, size_t col) { return col < s.c() ? 0 : col < s.c() + size_t(s.nkv) * s.hd ? 1 : 2; }

// The reference and both kinds' bounds for inputs qkv[B,T,(NH + 2·NKV)·HD] and dout[B,T,NH·HD]
// (the implementations' bf16 inputs, exactly, as doubles).
Reference reference(const Shape& s, const std::vector<double>& qkv, const std::vector<double>& dout);

}  // namespace pptrain::attention_check
