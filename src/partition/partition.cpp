#include "partition/partition.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace pptrain {

double block_cost(const ModelConfig& m) {
  const double c = m.d_model, t = m.seq_len;
  if (m.llama()) {
    // q, k, v [(NH + 2·NKV)·HD, C], proj [C, NH·HD], gate, up, down [F, C] each: 2 FLOPs per
    // weight; the attention core 2 T per query width
    const double hd = m.attention_head_dim(), q = m.n_head * hd, kv = double(m.kv_heads()) * hd, f = m.mlp_hidden();
    return 2.0 * c * (q + 2 * kv) + 2.0 * c * q + 6.0 * c * f + 2.0 * t * q;
  }
  return 24.0 * c * c + 2.0 * t * c;  // qkv 3C², proj C², MLP 8C²: 2 FLOPs per weight
}

double head_cost(const ModelConfig& m) { return 2.0 * double(m.d_model) * m.vocab_size; }

std::vector<int> blocks_per_stage(const Config& c) {
  const int stages = c.total_stages(), layers = c.model.n_layer;
  if (!c.parallel.layers_per_stage.empty()) return c.parallel.layers_per_stage;
  if (layers < stages)
    fail(c.source, ": model.n_layer ", layers, " is fewer than the ", stages, " pipeline stages");
  // best[s][l]: the smallest possible maximum stage cost when the first s stages hold
  // the first l blocks; the head's cost is added to the last stage.
  const double bc = block_cost(c.model), hc = head_cost(c.model);
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(layers + 1, inf));
  std::vector<std::vector<int>> take(stages + 1, std::vector<int>(layers + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s)
    for (int l = s; l <= layers - (stages - s); ++l)
      for (int k = 1; k <= l - (s - 1); ++k) {  // k blocks in stage s
        double cost = k * bc + (s == stages ? hc : 0.0);
        double worst = std::max(best[s - 1][l - k], cost);
        // ties: prefer the cut that fills earlier stages evenly (smaller k late)
        if (worst < best[s][l] - 1e-9 * bc) {
          best[s][l] = worst;
          take[s][l] = k;
        }
      }
  std::vector<int> out(stages);
  for (int s = stages, l = layers; s >= 1; --s) {
    out[s - 1] = take[s][l];
    l -= take[s][l];
  }
  return out;
}

std::string blocks_text(const std::vector<int>& blocks) {
  std::string text = "[";
  for (size_t s = 0; s < blocks.size(); ++s) text += cat(s ? "," : "", blocks[s]);
  return text + "]";
}

std::vector<StageSpec> stage_specs(const Config& c) {
  auto counts = blocks_per_stage(c);
  std::vector<StageSpec> specs;
  int first = 0;
  for (int s = 0; s < int(counts.size()); ++s) {
    specs.push_back({s, first, counts[s], s == 0, s == int(counts.size()) - 1});
    first += counts[s];
  }
  return specs;
}

}  // namespace pptrain
