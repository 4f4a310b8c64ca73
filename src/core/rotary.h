// The rotary embedding's inverse frequencies, computed once per model as transformers'
// modeling_rope_utils.py computes them, in fp32 (so positions turn by the same fp32 angles):
//
//   default  inv_freq[i] = 1 / theta^(2i/HD),  i < HD/2
//   linear   inv_freq[i] / factor
//   llama3   (Llama 3.1's _compute_llama3_parameters) with wavelen = 2π / inv_freq[i],
//            L = original_max_positions:
//              wavelen < L / high_freq_factor   inv_freq[i]             (fast planes kept)
//              wavelen > L / low_freq_factor    inv_freq[i] / factor    (slow planes stretched)
//              otherwise   (1 - s) · inv_freq[i] / factor + s · inv_freq[i],
//                          s = (L / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
//
// Both scalings keep transformers' attention factor 1 (cos and sin are not rescaled). The
// ops (Ops::rotary_forward) take the table; the cpu op and the cuda kernels turn plane i of
// position p by p · inv_freq[i].
#pragma once

#include "core/config.h"

namespace pptrain {

struct RotaryFrequencies {
  int planes = 0;                         // HD / 2
  float inv_freq[kMaxRotaryPlanes] = {};  // [planes]
};

// Of `m` (its head size, rope_theta and rope_scaling; validated). Throws pptrain::Error for
// an odd or too large head size.
RotaryFrequencies rotary_frequencies(const ModelConfig& m);
// The same for a head size and a scaling given directly (ops tests).
RotaryFrequencies rotary_frequencies(int head_dim, double theta, const RopeScaling& scaling = {});

}  // namespace pptrain
