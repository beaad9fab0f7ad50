// The Kascade strategy (anchor and reuse layers, KASCADE.md) and the oracle
// top-k it is compared with.
#include <algorithm>

#include "attention/exact.h"
#include "attention/selection.h"
#include "attention/strategy_impl.h"
#include "core/error.h"

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
        profile_(options.profile ? *options.profile : default_profile(shape)),
        dense_(layer_flags(options.dense_layers, {0}, shape.n_layers)),
        exact_(shape),
        selector_(shape) {
    anchor_of_.resize(size_t(shape.n_layers));
    for (int j = 0, a = 0; j < shape.n_layers; ++j) {
      if (std::binary_search(profile_.anchors.begin(), profile_.anchors.end(), j)) a = j;
      anchor_of_[j] = a;
    }
  }

  std::string_view name() const override { return "kascade"; }
  int64_t prefill_alignment() const override { return options_.tile; }
  void reset() override { selected_ = {}; }

  void forward(const Step& step) override {
    check_step(shape_, step);
    const int j = step.layer;
    units_ = make_units(step, options_.tile);
    if (anchor_of_[j] == j) {
      select(step, dense_[j]);  // a dense anchor's output comes with its selection
      last_layer_ = j;
      if (dense_[j]) return;
    } else if (!dense_[j] && !selected_matches(step, anchor_of_[j])) {
      fail("kascade: layer {} reuses anchor layer {}, which has not run for this step "
           "(positions {}..{})",
           j, anchor_of_[j], step.first_position, step.first_position + step.n_queries - 1);
    }
    last_layer_ = j;
    if (dense_[j]) {
      exact_.dense(step);
      return;
    }
    exact_.restricted(
        step, units_, [&](int64_t unit, int h) { return selector_.set(unit, pool(j, h)); }, false);
  }

  void kept_keys(const Step& step, int64_t q, int head, std::vector<int32_t>& keys) const override {
    if (dense_[last_layer_]) return Strategy::kept_keys(step, q, head, keys);
    const int64_t u = unit_of(step, q, options_.tile);
    set_with_own_tile(selector_.set(u, pool(last_layer_, head / shape_.group())), units_[u],
                      step.first_position + q, keys);
  }

 private:
  // The selection pool KV head h of layer j reads.
  int pool(int j, int h) const {
    if (options_.all_heads_pooled) return 0;
    if (anchor_of_[j] == j || options_.no_remap) return h;
    return profile_.head_map[j][h];
  }

  void select(const Step& step, bool dense_output) {
    const int64_t end = step.first_position + step.n_queries;
    const int64_t fixed = budget(end, options_.budget_percent, options_.min_k);
    const bool fixed_prefill = options_.fixed_budget && step.phase == Phase::Prefill;
    selector_.select(
        step, units_, options_.all_heads_pooled ? PoolMode::AllHeadsSum : PoolMode::PerKvHead,
        options_.pre_softmax_pooling ? Pooling::PreSoftmax : Pooling::PostSoftmax,
        [&](const Unit& unit) {
          if (fixed_prefill) return std::min(fixed, unit.n_candidates);
          return budget(unit.n_candidates, options_.budget_percent, options_.min_k);
        },
        dense_output);
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
  KascadeProfile profile_;
  std::vector<bool> dense_;
  std::vector<int> anchor_of_;  // [layer] -> its anchor (itself on anchors)
  ExactAttention exact_;
  Selector selector_;
  std::vector<Unit> units_;
  Selected selected_;
  int last_layer_ = 0;
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
