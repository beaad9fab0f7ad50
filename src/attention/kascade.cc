// The Kascade strategy (anchor and reuse layers, KASCADE.md) and the oracle
// top-k it is compared with.
#include <algorithm>

#include "attention/exact.h"
#include "attention/kascade_ops.h"
#include "attention/selection.h"
#include "attention/strategy_impl.h"
#include "core/error.h"
#include "kascade/budget.h"
#include "kascade/plan.h"

namespace kascade::attention {

std::vector<bool> layer_flags(const std::optional<std::vector<int>>& layers,
                              const std::vector<int>& fallback, int n_layers) {
  std::vector<bool> flags(size_t(n_layers), false);
  for (int layer : layers.value_or(fallback))
    if (layer >= 0 && layer < n_layers) flags[layer] = true;
  return flags;
}

namespace {

// The unit of query q of a step: prefill tiles of `tile`, decode one per query.
int64_t unit_of(const Step& step, int64_t q, int64_t tile) {
  return step.phase == Phase::Decode ? q : q / tile;
}

// Keys of a unit's set plus, in prefill, its own tile up to the query.
void set_with_own_tile(std::span<const int32_t> set, const Unit& unit, int64_t position,
                       std::vector<int32_t>& keys) {
  keys.assign(set.begin(), set.end());
  if (unit.own_tile)
    for (int64_t p = unit.start; p <= position; ++p) keys.push_back(int32_t(p));
}

class KascadeStrategy final : public Strategy {
 public:
  KascadeStrategy(const AttentionOptions& options, const Shape& shape)
      : shape_(shape),
        plan_(options, shape),
        exact_(shape),
        selector_(shape),
        refiner_(shape),
        sketches_(size_t(shape.n_layers), KeySketch(shape.n_kv_heads, shape.head_dim)),
        held_(size_t(shape.n_layers)) {}

  std::string_view name() const override { return method_name(Method::Kascade); }
  int64_t prefill_alignment() const override { return plan_.prefill_alignment(); }
  bool dense_prefill() const override { return plan_.dense_prefill(); }
  void reset() override {
    selected_ = {};
    for (KeySketch& sketch : sketches_) sketch.clear();
    for (HeldSets& held : held_) held = {};
  }

  void forward(const Step& step) override {
    check_step(shape_, step);
    const LayerPlan& layer = plan_.layer(step.phase, step.layer, step.first_position + step.n_queries);
    last_layer_ = &layer;
    last_sets_ = Sets::None;
    extend_sketch(step);
    if (layer.action == LayerAction::Dense) {
      exact_.dense(step);
      return;
    }
    units_ = make_units(step, plan_.options().tile);
    switch (layer.action) {
      case LayerAction::DenseAnchor:
        select(step, true, nullptr);  // its dense output comes with the selection
        return;
      case LayerAction::Anchor:
        if (hold(step)) {
          last_sets_ = Sets::Held;
          break;
        }
        select(step, false, layer.sketch ? &sketches_[size_t(step.layer)] : nullptr);
        last_sets_ = refining() ? Sets::AnchorInner : Sets::Anchor;
        keep_for_later(step);
        break;
      case LayerAction::Reuse:
        require_anchor(step, layer.anchor);
        last_sets_ = Sets::Anchor;
        break;
      case LayerAction::RefinedReuse:
        require_anchor(step, layer.anchor);
        refiner_.refine(
            step, units_, [&](int64_t unit, int h) { return selector_.set(unit, layer.pools[size_t(h)]); },
            [&](const Unit& unit) { return keys_kept(unit, step); });
        last_sets_ = Sets::Refined;
        break;
      case LayerAction::Dense: break;
    }
    exact_.restricted(
        step, units_, [&](int64_t unit, int h) { return set_of(unit, h); }, false);
  }

  void kept_keys(const Step& step, int64_t q, int head, std::vector<int32_t>& keys) const override {
    if (last_sets_ == Sets::None) return Strategy::kept_keys(step, q, head, keys);
    const int64_t u = unit_of(step, q, plan_.options().tile);
    set_with_own_tile(set_of(u, head / shape_.group()), units_[u], step.first_position + q, keys);
  }

 private:
  // Which index sets the last forward() attended.
  enum class Sets {
    None,         // dense
    Anchor,       // the anchor's sets through the layer's pools (an anchor's own, or reused)
    AnchorInner,  // an anchor's own top budget inside its refinement candidates
    Refined,      // the refiner's sets
    Held,         // the layer's earlier selection, shifted, plus the keys added since (hold())
  };

  // A selecting layer's decode sets, kept for the select_every - 1 steps
  // after the step that selected them.
  struct HeldSets {
    int64_t selected_keys = 0;  // keys the selecting step saw
    int64_t n_keys = 0;         // keys the last step that attended them saw
    std::vector<std::vector<int32_t>> selected;  // [pool], ascending
    std::vector<std::vector<int32_t>> attended;  // [pool], ascending: the last step's keys
  };

  // At a one-query decode step right after this layer's last one, within
  // select_every steps of its selection, attends held_keys (kascade_ops.h)
  // instead of selecting: the selection, the selection shifted by the steps
  // since (a head that copies text moves one key per step), the new keys.
  bool hold(const Step& step) {
    HeldSets& held = held_[size_t(step.layer)];
    const int64_t n_keys = step.first_position + step.n_queries;
    const int64_t age = n_keys - held.selected_keys;
    if (step.phase != Phase::Decode || step.n_queries != 1 || held.selected.empty() || held.n_keys != n_keys - 1 ||
        age >= plan_.select_every())
      return false;
    for (size_t p = 0; p < held.selected.size(); ++p)
      held_keys(held.selected[p], held.selected_keys, n_keys, held.attended[p]);
    held.n_keys = n_keys;
    return true;
  }

  // Keeps a decode step's fresh sets for the steps that hold them.
  void keep_for_later(const Step& step) {
    HeldSets& held = held_[size_t(step.layer)];
    held = {};
    if (plan_.select_every() <= 1 || step.phase != Phase::Decode || step.n_queries != 1) return;
    held.selected_keys = held.n_keys = step.first_position + 1;
    for (int p = 0; p < selector_.n_pools(); ++p) {
      const std::span<const int32_t> set = selector_.set(0, p);
      held.selected.emplace_back(set.begin(), set.end());
    }
    held.attended.resize(held.selected.size());
  }

  bool refining() const { return plan_.candidate_factor() > 1; }

  // The sketch follows the cache through prefill, so that the first decode
  // step finds it built (8K keys of 30 layers take tens of milliseconds).
  void extend_sketch(const Step& step) {
    if (step.phase != Phase::Prefill || !plan_.layer(Phase::Decode, step.layer, plan_.sparse_from()).sketch) return;
    with_element_type(step.cache.type, [&]<typename T>(T) {
      std::vector<kernels::Rows<T>> keys;
      for (int h = 0; h < shape_.n_kv_heads; ++h) keys.push_back(key_rows<T>(shape_, step.cache, h));
      sketches_[size_t(step.layer)].extend<T>(keys, step.first_position + step.n_queries);
    });
  }

  std::span<const int32_t> set_of(int64_t unit, int h) const {
    const int pool = last_layer_->pools[size_t(h)];
    switch (last_sets_) {
      case Sets::AnchorInner: return selector_.inner_set(unit, pool);
      case Sets::Refined: return refiner_.set(unit, h);
      case Sets::Held: return held_[size_t(last_layer_->anchor)].attended[size_t(pool)];  // an anchor is its own
      default: return selector_.set(unit, pool);
    }
  }

  // Keys a unit attends out of its candidates: the layer's rolling budget(s)
  // (or the fixed-budget ablation's), less the own tile when it counts in the budget.
  int64_t keys_kept(const Unit& unit, const Step& step) const {
    const AttentionOptions& o = plan_.options();
    int64_t k = plan_.keys(step.phase, step.layer, unit.n_candidates);
    if (o.fixed_budget && step.phase == Phase::Prefill)
      k = std::min(plan_.keys(step.phase, step.layer, step.first_position + step.n_queries), unit.n_candidates);
    if (o.own_tile_in_budget && unit.own_tile && k < unit.n_candidates) k = std::max<int64_t>(0, k - unit.length);
    return k;
  }

  void select(const Step& step, bool dense_output, KeySketch* sketch) {
    const AttentionOptions& o = plan_.options();
    const Selector::Count kept = [&](const Unit& unit) { return keys_kept(unit, step); };
    const PoolMode mode = o.all_heads_pooled ? PoolMode::AllHeadsSum : PoolMode::PerKvHead;
    const Pooling pooling = o.pre_softmax_pooling ? Pooling::PreSoftmax : Pooling::PostSoftmax;
    if (refining()) {
      // Candidates for the reuse layers; the anchor itself attends its top budget.
      selector_.select(
          step, units_, mode, pooling,
          [&](const Unit& unit) { return plan_.candidate_factor() * keys_kept(unit, step); }, dense_output, kept,
          sketch);
    } else {
      selector_.select(step, units_, mode, pooling, kept, dense_output, {}, sketch);
    }
    selected_ = {step.first_position, step.n_queries, step.phase, step.layer, true};
  }

  // A reuse layer reads the sets its anchor selected at this very step.
  void require_anchor(const Step& step, int anchor) const {
    if (selected_.valid && selected_.first_position == step.first_position &&
        selected_.n_queries == step.n_queries && selected_.phase == step.phase && selected_.anchor == anchor)
      return;
    fail("kascade: layer {} reuses anchor layer {}, which has not run for this step (positions {}..{})", step.layer,
         anchor, step.first_position, step.first_position + step.n_queries - 1);
  }

  // Which step and anchor layer the selector's sets belong to.
  struct Selected {
    int64_t first_position = 0;
    int64_t n_queries = 0;
    Phase phase = Phase::Prefill;
    int anchor = 0;
    bool valid = false;
  };

  Shape shape_;
  Plan plan_;
  ExactAttention exact_;
  Selector selector_;
  Refiner refiner_;
  std::vector<Unit> units_;
  Selected selected_;
  std::vector<KeySketch> sketches_;  // [layer]: what sketch-scoring anchors rank keys from
  std::vector<HeldSets> held_;       // [layer]: decode sets kept between selections
  const LayerPlan* last_layer_ = nullptr;
  Sets last_sets_ = Sets::None;
};

class OracleStrategy final : public Strategy {
 public:
  OracleStrategy(const AttentionOptions& options, const Shape& shape)
      : shape_(shape),
        options_(options),
        dense_(layer_flags(options.dense_layers, {0}, shape.n_layers)),
        exact_(shape),
        selector_(shape) {}

  std::string_view name() const override { return method_name(Method::OracleTopK); }
  int64_t prefill_alignment() const override { return options_.tile; }

  void forward(const Step& step) override {
    check_step(shape_, step);
    last_layer_ = step.layer;
    if (dense_[step.layer]) {
      exact_.dense(step);
      return;
    }
    units_ = make_units(step, options_.tile);
    selector_.select(step, units_, PoolMode::PerQueryHead, Pooling::PostSoftmax,
                     [&](const Unit& unit) {
                       return budget(unit.n_candidates, options_.budget_percent, options_.min_k);
                     });
    exact_.restricted(
        step, units_, [&](int64_t unit, int head) { return selector_.set(unit, head); }, true);
  }

  void kept_keys(const Step& step, int64_t q, int head, std::vector<int32_t>& keys) const override {
    if (dense_[last_layer_]) return Strategy::kept_keys(step, q, head, keys);
    const int64_t u = unit_of(step, q, options_.tile);
    set_with_own_tile(selector_.set(u, head), units_[u], step.first_position + q, keys);
  }

 private:
  Shape shape_;
  AttentionOptions options_;
  std::vector<bool> dense_;
  ExactAttention exact_;
  Selector selector_;
  std::vector<Unit> units_;
  int last_layer_ = 0;
};

}  // namespace

std::unique_ptr<Strategy> make_kascade(const AttentionOptions& options, const Shape& shape) {
  return std::make_unique<KascadeStrategy>(options, shape);
}

std::unique_ptr<Strategy> make_oracle_topk(const AttentionOptions& options, const Shape& shape) {
  return std::make_unique<OracleStrategy>(options, shape);
}

}  // namespace kascade::attention
