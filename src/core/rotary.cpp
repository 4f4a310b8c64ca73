#include "core/rotary.h"

#include <cmath>

#include "core/error.h"

namespace pptrain {

RotaryFrequencies rotary_frequencies(int head_dim, double theta, const RopeScaling& scaling) {
  if (head_dim < 2 || head_dim % 2 != 0 || head_dim / 2 > kMaxRotaryPlanes)
    fail("rotary embedding: head size ", head_dim, " is not an even number up to ", 2 * kMaxRotaryPlanes);
  RotaryFrequencies f;
  f.planes = head_dim / 2;
  // transformers: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), in fp32 (glibc's powf
  // is within an ulp of the rounded exact power, as torch's).
  for (int i = 0; i < f.planes; ++i) f.inv_freq[i] = 1.0f / std::pow(float(theta), float(2 * i) / float(head_dim));
  if (scaling.type == "linear") {
    for (int i = 0; i < f.planes; ++i) f.inv_freq[i] /= float(scaling.factor);
  } else if (scaling.type == "llama3") {
    // Every step in fp32 as torch computes it on an fp32 tensor with Python scalars.
    const float factor = float(scaling.factor), low = float(scaling.low_freq_factor);
    const float old_context = float(scaling.original_max_positions);
    const double low_freq_wavelen = scaling.original_max_positions / scaling.low_freq_factor;
    const double high_freq_wavelen = scaling.original_max_positions / scaling.high_freq_factor;
    for (int i = 0; i < f.planes; ++i) {
      const float inv = f.inv_freq[i];
      const float wavelen = float(2 * M_PI) / inv;
      float scaled = wavelen > float(low_freq_wavelen) ? inv / factor : inv;
      const float smooth = (old_context / wavelen - low) / float(scaling.high_freq_factor - scaling.low_freq_factor);
      const float smoothed = (1 - smooth) * scaled / factor + smooth * scaled;
      const bool medium = !(wavelen < float(high_freq_wavelen)) && !(wavelen > float(low_freq_wavelen));
      f.inv_freq[i] = medium ? smoothed : scaled;
    }
  } else if (scaling.type != "none") {
    fail("rotary embedding: rope_scaling '", scaling.type, "' is not none, linear or llama3");
  }
  return f;
}

RotaryFrequencies rotary_frequencies(const ModelConfig& m) {
  return rotary_frequencies(m.attention_head_dim(), m.rope_theta, m.rope_scaling);
}

}  // namespace pptrain
