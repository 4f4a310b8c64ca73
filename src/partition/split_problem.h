// The partition problem of one program, as the exact partitioner (partition/partitioner.h)
// solves it: each action's duration and each rank's peak bytes as affine functions of the
// blocks per stage n_s, the timing graph whose longest path is the step time, the paths
// that bound it, and the seed split the search starts from.
#pragma once
#include <vector>

#include "partition/partitioner.h"

namespace pptrain::splits {

using pipeline::Schedule;

// The sum of a stage's layers: the embedding (stage 0), n blocks under the stage's
// recompute mode, the head (last stage).
LayerCost stage_layers(const CostProfile& prof, const StageRecompute& recompute, int stage, int stages, int n);

// A cost of one stage as a function of its blocks n: base + per_block·n.
struct Affine {
  double base = 0, per_block = 0;
};

// Peak bytes of a rank at one memory point: base + sum over stages of per_block[s]·n_s.
struct MemoryRow {
  std::vector<double> per_block;  // [num_stages]
  double base = 0;
  auto operator<=>(const MemoryRow&) const = default;
};

// Everything the program fixes, with the costs as functions of the split.
struct Problem {
  const CostProfile& prof;
  StageRecompute recompute;  // [stages] or empty (none)
  std::vector<LayerCost> block;  // [stages] the block's costs under the stage's recompute
  Schedule lowered;
  int stages = 0, n_layer = 0;
  std::vector<int> min_blocks, max_blocks;  // [stages]
  pipeline::TimingGraph graph;
  std::vector<Affine> durations;  // [graph.nodes]
  std::vector<MemoryRow> memory;  // the rows a rank's peak is the largest of (all ranks)

  // Throws pptrain::Error when n_layer blocks cannot fill the program's stages or the
  // recompute list does not name every stage.
  Problem(const CostProfile& p, const Schedule& program, int layers, const StageRecompute& recompute);
};

// A rank's bytes at one memory point under split n.
double bytes_at(const MemoryRow& row, const std::vector<int>& n);

// The split n simulated (the step time and peaks the partitioner reports).
Partition evaluate(const Problem& p, const std::vector<int>& n);

// The seed: the split whose most expensive stage (F + I + W) is the cheapest, found by
// dynamic programming over (stages so far, blocks so far).
std::vector<int> balanced_split(const Problem& p);

// A lower bound of the makespan of every split: the length of one path through the
// timing graph, base + sum over stages of per_block[s]·n_s.
struct PathCut {
  std::vector<double> per_block;  // [num_stages]
  double base = 0;
  auto operator<=>(const PathCut&) const = default;
};

struct CriticalPaths {
  std::vector<PathCut> paths;  // [ranks with work] the longest path to the rank's last action
  double makespan = 0;         // the longest of them
};

// The longest paths at split n (fractional blocks allowed: the relaxation's splits).
CriticalPaths critical_paths(const Problem& p, const std::vector<double>& n);

// The length of a path at split n.
template <typename Count>
double cut_value(const PathCut& cut, const std::vector<Count>& n) {
  double sum = cut.base;
  for (size_t s = 0; s < n.size(); ++s) sum += cut.per_block[s] * n[s];
  return sum;
}

}  // namespace pptrain::splits
