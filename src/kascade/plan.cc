#include "kascade/plan.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "kascade/budget.h"

namespace kascade {
namespace {

char action_letter(LayerAction action) {
  switch (action) {
    case LayerAction::Dense: return 'd';
    case LayerAction::DenseAnchor: return 'D';
    case LayerAction::Anchor: return 'a';
    case LayerAction::Reuse: return 'r';
    case LayerAction::RefinedReuse: return 'R';
  }
  return '?';
}

}  // namespace

Plan::Plan(const AttentionOptions& options, const Shape& shape) : options_(options), shape_(shape) {
  validate_attention(options, shape);
  key_ = std::string(method_name(options.method));
  if (!options.kascade()) return;

  const SparsePhases phases = options.sparse_phases;
  sparse_prefill_ = phases != SparsePhases::DecodeOnly;
  sparse_decode_ = phases != SparsePhases::PrefillOnly;
  sparse_from_ = options.sparse_from.value_or(0);
  select_every_ = select_every_or_default(options);
  n_pools_ = options.all_heads_pooled ? 1 : shape.n_kv_heads;

  const KascadeProfile profile = options.profile ? *options.profile : default_profile(shape);
  validate_profile(profile, shape);
  if (options.wide_factor.value_or(1) > 1 && profile.wide_layers.empty())
    fail("--wide-factor {}: the Kascade profile names no wide layers (its \"wide_layers\")", *options.wide_factor);
  const int wide_factor = wide_factor_or_default(options);
  const std::vector<int> dense = options.dense_layers.value_or(std::vector<int>{0});
  const auto contains = [](const std::vector<int>& layers, int layer) {
    return std::find(layers.begin(), layers.end(), layer) != layers.end();
  };
  for (int j = 0, anchor = 0; j < shape.n_layers; ++j) {
    LayerPlan layer;
    layer.budget_percent = options.budget_percent;
    const bool is_anchor = options.all_anchors || contains(profile.anchors, j);
    if (is_anchor) anchor = j;
    layer.anchor = anchor;
    // A dense anchor whose sets no layer reads (every layer selecting its
    // own) is plain dense: its selection would be wasted work.
    const bool read_later = !options.all_anchors && j + 1 < shape.n_layers && !contains(profile.anchors, j + 1);
    if (is_anchor && contains(dense, j))
      layer.action = read_later ? LayerAction::DenseAnchor : LayerAction::Dense;
    else if (is_anchor)
      layer.action = LayerAction::Anchor;
    else if (contains(dense, j))
      layer.action = LayerAction::Dense;
    else
      layer.action = options.refine_factor > 1 ? LayerAction::RefinedReuse : LayerAction::Reuse;
    for (int h = 0; h < shape.n_kv_heads; ++h)
      layer.pools.push_back(options.all_heads_pooled           ? 0
                            : is_anchor || options.no_remap    ? h
                                                               : profile.head_map[size_t(j)][size_t(h)]);
    flat_pools_.insert(flat_pools_.end(), layer.pools.begin(), layer.pools.end());
    prefill_layers_.push_back(layer);
    if (contains(profile.wide_layers, j)) layer.budget_percent = std::min(100.0, options.budget_percent * wide_factor);
    layer.sketch = layer.action == LayerAction::Anchor && options.scoring == Scoring::Sketch;  // unset (outside an engine): exact
    uses_sketch_ = uses_sketch_ || (sparse_decode_ && layer.sketch);
    decode_layers_.push_back(std::move(layer));
  }

  std::string actions;
  std::vector<int> anchors;
  std::vector<double> budgets;
  for (const LayerPlan& layer : decode_layers_) {
    actions += action_letter(layer.action);
    anchors.push_back(layer.anchor);
    budgets.push_back(layer.budget_percent);
  }
  key_ += fmt::format(" p={} min_k={} tile={} prefill={} decode={} from={} sketch={} refine={} pooled={} pre={} "
                      "fixed={} own={} every={} {} anchors {} pools {} budgets {}",
                      options.budget_percent, options.min_k, options.tile, sparse_prefill_, sparse_decode_,
                      sparse_from_, options.scoring == Scoring::Sketch,
                      options.refine_factor, options.all_heads_pooled, options.pre_softmax_pooling,
                      options.fixed_budget, options.own_tile_in_budget, select_every_, actions,
                      fmt::join(anchors, ","),
                      fmt::join(flat_pools_, ","), fmt::join(budgets, ","));
}

const LayerPlan& Plan::layer(Phase phase, int layer_index, int64_t n_keys) const {
  if (layer_index < 0 || layer_index >= shape_.n_layers)
    fail("plan: layer {} outside [0, {})", layer_index, shape_.n_layers);
  if (!sparse(phase, n_keys)) return dense_layer_;
  return (phase == Phase::Prefill ? prefill_layers_ : decode_layers_)[size_t(layer_index)];
}

int64_t Plan::keys(Phase phase, int layer_index, int64_t n_candidates) const {
  if (layer_index < 0 || layer_index >= shape_.n_layers)
    fail("plan: layer {} outside [0, {})", layer_index, shape_.n_layers);
  const std::vector<LayerPlan>& layers = phase == Phase::Prefill ? prefill_layers_ : decode_layers_;
  const double percent = options_.kascade() ? layers[size_t(layer_index)].budget_percent : options_.budget_percent;
  return budget(n_candidates, percent, options_.min_k);
}

int64_t Plan::max_keys(int64_t n_candidates) const {
  int64_t most = budget(n_candidates, options_.budget_percent, options_.min_k);
  for (int j = 0; j < shape_.n_layers; ++j) most = std::max(most, keys(Phase::Decode, j, n_candidates));
  return most;
}

}  // namespace kascade
