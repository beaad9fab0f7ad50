// The Kascade strategy (anchor and reuse layers, KASCADE.md) and the oracle
// top-k it is compared with.
#include <algorithm>

#include "attention/exact.h"
#include "attention/selection.h"
#include "attention/strategy_impl.h"
#include "core/error.h"
#include "kascade/budget.h"
#include "kascade/schedule.h"

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
  KascadeStrategy(const StrategyOptions& options, const Shape& shape)
      : shape_(shape),
        options_(options),
        schedule_(options.profile ? *options.profile : default_profile(shape), shape,
                  ScheduleOptions{.dense_layers = options.dense_layers.value_or(std::vector<int>{0}),
                                  .all_anchors = options.all_anchors,
                                  .all_heads_pooled = options.all_heads_pooled,
                                  .no_remap = options.no_remap}),
        exact_(shape),
        selector_(shape),
        refiner_(shape) {}

  std::string_view name() const override { return "kascade"; }
  int64_t prefill_alignment() const override {
    return options_.sparse_phases == SparsePhases::DecodeOnly ? 1 : options_.tile;
  }
  bool dense_prefill() const override {
    return options_.sparse_phases == SparsePhases::DecodeOnly;
  }
  void reset() override { selected_ = {}; }

  void forward(const Step& step) override {
    check_step(shape_, step);
    const int j = step.layer;
    last_layer_ = j;
    last_sets_ = Sets::None;
    if (!sparse(step.phase)) {
      exact_.dense(step);
      return;
    }
    units_ = make_units(step, options_.tile);
    if (schedule_.is_anchor(j)) {
      select(step, schedule_.is_dense(j));  // a dense anchor's output comes with its selection
      if (schedule_.is_dense(j)) return;
      last_sets_ = refining() ? Sets::AnchorInner : Sets::Anchor;
    } else if (!schedule_.is_dense(j) && !selected_matches(step, schedule_.anchor_of(j))) {
      fail("kascade: layer {} reuses anchor layer {}, which has not run for this step "
           "(positions {}..{})",
           j, schedule_.anchor_of(j), step.first_position, step.first_position + step.n_queries - 1);
    } else if (schedule_.is_dense(j)) {
      exact_.dense(step);
      return;
    } else if (refining()) {
      refiner_.refine(
          step, units_, [&](int64_t unit, int h) { return selector_.set(unit, schedule_.pool(j, h)); },
          [&](const Unit& unit) { return keys_kept(unit, step); });
      last_sets_ = Sets::Refined;
    } else {
      last_sets_ = Sets::Anchor;
    }
    exact_.restricted(
        step, units_, [&](int64_t unit, int h) { return set_of(unit, h); }, false);
  }

  void kept_keys(const Step& step, int64_t q, int head, std::vector<int32_t>& keys) const override {
    if (last_sets_ == Sets::None) return Strategy::kept_keys(step, q, head, keys);
    const int64_t u = unit_of(step, q, options_.tile);
    set_with_own_tile(set_of(u, head / shape_.group()), units_[u], step.first_position + q, keys);
  }

 private:
  // Which index sets the last forward() attended.
  enum class Sets {
    None,         // dense
    Anchor,       // the anchor's sets through pool() (an anchor's own, or reused)
    AnchorInner,  // an anchor's own top budget inside its refinement candidates
    Refined,      // the refiner's sets
  };

  bool sparse(Phase phase) const {
    switch (options_.sparse_phases) {
      case SparsePhases::Both: return true;
      case SparsePhases::DecodeOnly: return phase == Phase::Decode;
      case SparsePhases::PrefillOnly: return phase == Phase::Prefill;
    }
    return true;
  }
  bool refining() const { return options_.refine_factor > 1; }

  std::span<const int32_t> set_of(int64_t unit, int h) const {
    switch (last_sets_) {
      case Sets::AnchorInner: return selector_.inner_set(unit, schedule_.pool(last_layer_, h));
      case Sets::Refined: return refiner_.set(unit, h);
      default: return selector_.set(unit, schedule_.pool(last_layer_, h));
    }
  }

  // Keys a unit attends out of its candidates: the rolling budget(s) (or the
  // fixed-budget ablation's), less the own tile when it counts in the budget.
  int64_t keys_kept(const Unit& unit, const Step& step) const {
    int64_t k = budget(unit.n_candidates, options_.budget_percent, options_.min_k);
    if (options_.fixed_budget && step.phase == Phase::Prefill)
      k = std::min(budget(step.first_position + step.n_queries, options_.budget_percent,
                          options_.min_k),
                   unit.n_candidates);
    if (options_.own_tile_in_budget && unit.own_tile && k < unit.n_candidates)
      k = std::max<int64_t>(0, k - unit.length);
    return k;
  }

  void select(const Step& step, bool dense_output) {
    const Selector::Count kept = [&](const Unit& unit) { return keys_kept(unit, step); };
    const PoolMode mode =
        options_.all_heads_pooled ? PoolMode::AllHeadsSum : PoolMode::PerKvHead;
    const Pooling pooling =
        options_.pre_softmax_pooling ? Pooling::PreSoftmax : Pooling::PostSoftmax;
    if (refining()) {
      // Candidates for the reuse layers; the anchor itself attends its top budget.
      selector_.select(
          step, units_, mode, pooling,
          [&](const Unit& unit) { return options_.refine_factor * keys_kept(unit, step); },
          dense_output, kept);
    } else {
      selector_.select(step, units_, mode, pooling, kept, dense_output);
    }
    selected_ = {step.first_position, step.n_queries, step.phase, step.layer, true};
  }

  bool selected_matches(const Step& step, int anchor) const {
    return selected_.valid && selected_.first_position == step.first_position &&
           selected_.n_queries == step.n_queries && selected_.phase == step.phase &&
           selected_.anchor == anchor;
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
  StrategyOptions options_;
  Schedule schedule_;
  ExactAttention exact_;
  Selector selector_;
  Refiner refiner_;
  std::vector<Unit> units_;
  Selected selected_;
  int last_layer_ = 0;
  Sets last_sets_ = Sets::None;
};

class OracleStrategy final : public Strategy {
 public:
  OracleStrategy(const StrategyOptions& options, const Shape& shape)
      : shape_(shape),
        options_(options),
        dense_(layer_flags(options.dense_layers, {0}, shape.n_layers)),
        exact_(shape),
        selector_(shape) {}

  std::string_view name() const override { return "oracle-topk"; }
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
  StrategyOptions options_;
  std::vector<bool> dense_;
  ExactAttention exact_;
  Selector selector_;
  std::vector<Unit> units_;
  int last_layer_ = 0;
};

}  // namespace

std::unique_ptr<Strategy> make_kascade(const StrategyOptions& options, const Shape& shape) {
  return std::make_unique<KascadeStrategy>(options, shape);
}

std::unique_ptr<Strategy> make_oracle_topk(const StrategyOptions& options, const Shape& shape) {
  return std::make_unique<OracleStrategy>(options, shape);
}

}  // namespace kascade::attention
