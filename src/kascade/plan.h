// Kascade's plan: what each layer does at each phase, built once per
// sequence from the attention options and the model's shape (KASCADE.md,
// "Anchor, reuse, dense layers"). The CPU strategy (attention/kascade.cc)
// and the GPU backend (gpu/backend.cc) both switch on its actions, so the
// method's decisions (which layers select, which reuse through which head
// map, which phases are sparse, the budget, the prefill alignment) are made
// here and only here.
//
// A plan of the dense method attends densely everywhere. The comparison
// strategies (oracle-topk, quest, ...) keep their own rules in
// attention/baselines.cc; their plan only validates their options.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kascade/options.h"
#include "kascade/shape.h"

namespace kascade {

enum class Phase { Prefill, Decode };

enum class LayerAction {
  Dense,         // exact attention over every key; selects nothing
  DenseAnchor,   // exact attention, and selects the sets later layers reuse (layer 0)
  Anchor,        // selects its own top budget (per KV head, pooled) and attends it
  Reuse,         // attends its anchor's sets, KV head h reading anchor pool pools[h]
  RefinedReuse,  // re-ranks its anchor's candidates with its own queries and attends its top budget
};

struct LayerPlan {
  LayerAction action = LayerAction::Dense;
  int anchor = 0;          // the anchor whose sets it reads (itself on anchors)
  std::vector<int> pools;  // [kv head]: the anchor pool KV head h reads
  bool sketch = false;     // an Anchor ranks keys from the key sketch (decode only)
  double budget_percent = 0;  // what it selects: budget_percent, at decode times wide_factor on a wide layer
  bool selects() const { return action == LayerAction::DenseAnchor || action == LayerAction::Anchor; }
};

class Plan {
 public:
  // Validates the options against the shape (validate_attention, the
  // profile against the shape) and throws Error naming what does not fit.
  Plan(const AttentionOptions& options, const Shape& shape);

  const AttentionOptions& options() const { return options_; }
  const Shape& shape() const { return shape_; }
  Method method() const { return options_.method; }
  int n_layers() const { return shape_.n_layers; }

  // Kascade selects keys in this phase; the other attends densely.
  bool sparse(Phase phase) const { return phase == Phase::Prefill ? sparse_prefill_ : sparse_decode_; }
  // ... in a step that sees n_keys keys: decode steps below sparse_from()
  // attend densely.
  bool sparse(Phase phase, int64_t n_keys) const {
    return sparse(phase) && (phase == Phase::Prefill || n_keys >= sparse_from_);
  }
  int64_t sparse_from() const { return sparse_from_; }
  // Decode steps per selection of a selecting layer (select_every_or_default).
  int select_every() const { return select_every_; }
  // The layer's action in a step of this phase that sees n_keys keys (Dense
  // where the step is not sparse).
  const LayerPlan& layer(Phase phase, int layer, int64_t n_keys) const;
  LayerAction action(Phase phase, int layer_index, int64_t n_keys) const {
    return layer(phase, layer_index, n_keys).action;
  }

  // Selection pools an anchor fills: one per KV head, or one for all (all-heads pooled).
  int n_pools() const { return n_pools_; }
  // The keys layer `layer_index` selects out of n candidates in a step of
  // this phase: budget(n) of KASCADE.md at the layer's budget_percent.
  int64_t keys(Phase phase, int layer_index, int64_t n_candidates) const;
  // The most keys any layer selects out of n candidates (index-set strides).
  int64_t max_keys(int64_t n_candidates) const;
  // Refined reuse: anchors keep this many times their keys as candidates (1: none).
  int candidate_factor() const { return options_.refine_factor; }
  // Prefill chunks start on multiples of this (a Kascade tile when prefill is sparse).
  int64_t prefill_alignment() const { return sparse_prefill_ ? options_.tile : 1; }
  // Prefill attends densely and leaves no state later steps read.
  bool dense_prefill() const { return !sparse_prefill_; }

  // Any decode layer ranks keys from the key sketch.
  bool uses_sketch() const { return uses_sketch_; }
  // pools[h] of every layer of a sparse decode step, [layer][kv head] flat.
  const std::vector<int>& flat_pools() const { return flat_pools_; }
  // Names everything the plan decides: sequences with equal keys run the same kernels.
  const std::string& key() const { return key_; }

 private:
  AttentionOptions options_;
  Shape shape_;
  bool sparse_prefill_ = false, sparse_decode_ = false, uses_sketch_ = false;
  int64_t sparse_from_ = 0;
  int select_every_ = 1;
  int n_pools_ = 1;
  std::vector<LayerPlan> prefill_layers_, decode_layers_;  // the actions of a sparse phase
  LayerPlan dense_layer_;                 // every layer of a dense phase
  std::vector<int> flat_pools_;
  std::string key_;
};

}  // namespace kascade
