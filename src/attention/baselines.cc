// The comparison strategies of KASCADE.md: StreamingLLM, Quest, OmniKV and
// LessIsMore, at the same budget as Kascade (semantics in strategies.h).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "attention/exact.h"
#include "attention/selection.h"
#include "attention/strategy_impl.h"
#include "core/error.h"
#include "kascade/budget.h"

namespace kascade::attention {

namespace {

// One unit per query with no own tile: each query attends exactly its set.
std::vector<Unit> query_units(const Step& step) {
  std::vector<Unit> units;
  for (int64_t q = 0; q < step.n_queries; ++q) {
    const int64_t position = step.first_position + q;
    units.push_back({position, 1, q, position + 1, false});
  }
  return units;
}

int64_t step_budget(const AttentionOptions& options, int64_t n_keys) {
  return budget(n_keys, options.budget_percent, options.min_k);
}

// Remembers which step a strategy's state was computed for.
struct StepId {
  int64_t first_position = -1;
  int64_t n_queries = 0;
  Phase phase = Phase::Prefill;
  bool operator==(const StepId&) const = default;
  static StepId of(const Step& step) { return {step.first_position, step.n_queries, step.phase}; }
};

// ---------------------------------------------------------------------------
class StreamingStrategy final : public Strategy {
 public:
  StreamingStrategy(const AttentionOptions& options, const Shape& shape)
      : shape_(shape), options_(options), exact_(shape) {}

  std::string_view name() const override { return "streaming"; }
  void reset() override { sets_step_ = {}; }

  void forward(const Step& step) override {
    check_step(shape_, step);
    units_ = query_units(step);
    // The sets depend only on positions: computed once per step for all layers.
    if (!(sets_step_ == StepId::of(step))) {
      sets_.resize(units_.size());
      all_kept_ = true;
      for (size_t u = 0; u < units_.size(); ++u) {
        keep(units_[u].n_candidates, sets_[u]);
        all_kept_ = all_kept_ && int64_t(sets_[u].size()) == units_[u].n_candidates;
      }
      sets_step_ = StepId::of(step);
    }
    if (all_kept_) {  // short sequences: nothing dropped, the dense kernels
      exact_.dense(step);
      return;
    }
    exact_.restricted(
        step, units_, [&](int64_t unit, int) { return std::span<const int32_t>(sets_[unit]); },
        false);
  }

  void kept_keys(const Step& step, int64_t q, int, std::vector<int32_t>& keys) const override {
    keys = sets_[q];
  }

 private:
  // Sinks then the most recent keys of a query that sees n keys. The sinks
  // take at most half the budget, so the recent window always holds the
  // query's own key and at least half the budget, whatever --sinks says (500
  // sinks at a budget of 128 would otherwise leave no window at all).
  void keep(int64_t n, std::vector<int32_t>& keys) const {
    const int64_t kept = step_budget(options_, n);
    keys.clear();
    int64_t sinks = n, window = 0;
    if (kept < n) {
      sinks = std::min(options_.sink_tokens, options_.window_fraction > 0 ? kept : kept / 2);
      window = options_.window_fraction > 0
                   ? std::min(n - sinks, int64_t(std::ceil(options_.window_fraction * double(n))))
                   : kept - sinks;
    }
    for (int64_t j = 0; j < sinks; ++j) keys.push_back(int32_t(j));
    for (int64_t j = std::max(sinks, n - window); j < n; ++j) keys.push_back(int32_t(j));
  }

  Shape shape_;
  AttentionOptions options_;
  ExactAttention exact_;
  std::vector<Unit> units_;
  std::vector<std::vector<int32_t>> sets_;
  StepId sets_step_;
  bool all_kept_ = false;
};

// ---------------------------------------------------------------------------
class QuestStrategy final : public Strategy {
 public:
  QuestStrategy(const AttentionOptions& options, const Shape& shape)
      : shape_(shape),
        options_(options),
        dense_(layer_flags(options.dense_layers, {0, 1}, shape.n_layers)),
        exact_(shape),
        pages_(size_t(shape.n_layers)) {}

  std::string_view name() const override { return "quest"; }
  bool dense_prefill() const override { return true; }  // pages are summarised as decode needs them
  void reset() override { pages_.assign(size_t(shape_.n_layers), {}); }

  void forward(const Step& step) override {
    check_step(shape_, step);
    update_pages(step);
    last_dense_ = step.phase == Phase::Prefill || dense_[step.layer];
    if (last_dense_) {
      exact_.dense(step);
      return;
    }
    units_ = query_units(step);
    sets_.assign(units_.size() * size_t(shape_.n_heads), {});
    for (size_t u = 0; u < units_.size(); ++u) select(step, units_[u]);
    exact_.restricted(
        step, units_,
        [&](int64_t unit, int head) {
          return std::span<const int32_t>(sets_[size_t(unit * shape_.n_heads + head)]);
        },
        true);
  }

  void kept_keys(const Step& step, int64_t q, int head, std::vector<int32_t>& keys) const override {
    if (last_dense_) return Strategy::kept_keys(step, q, head, keys);
    keys = sets_[size_t(q * shape_.n_heads + head)];
  }

 private:
  // Per layer: elementwise max and min of the keys of each page, per KV head.
  struct PageTable {
    int64_t covered = 0;  // keys [0, covered) are summarised
    std::vector<float> max, min;  // [kv_head][page][d]
    int64_t page_capacity = 0;
  };

  void update_pages(const Step& step) {
    const int d = shape_.head_dim, n_kv = shape_.n_kv_heads;
    const int64_t size = options_.page_size;
    const int64_t end = step.first_position + step.n_queries;
    PageTable& table = pages_[step.layer];
    const int64_t n_pages = (end + size - 1) / size;
    if (n_pages > table.page_capacity) {  // grow, keeping the summaries
      const int64_t capacity = std::max(n_pages, 2 * table.page_capacity);
      std::vector<float> max(size_t(n_kv * capacity * d)), min(max.size());
      for (int h = 0; h < n_kv; ++h)
        for (int64_t i = 0; i < table.page_capacity * d; ++i) {
          max[h * capacity * d + i] = table.max[h * table.page_capacity * d + i];
          min[h * capacity * d + i] = table.min[h * table.page_capacity * d + i];
        }
      table.max.swap(max);
      table.min.swap(min);
      table.page_capacity = capacity;
    }
    // Pages from the first one touched by new (or rewritten) keys.
    const int64_t first_page = std::min(table.covered, step.first_position) / size;
    with_element_type(step.cache.type, [&]<typename T>(T) {
#pragma omp parallel for schedule(static)
      for (int64_t item = 0; item < n_kv * (n_pages - first_page); ++item) {
        const int h = int(item / (n_pages - first_page));
        const int64_t page = first_page + item % (n_pages - first_page);
        const kernels::Rows<T> keys = key_rows<T>(shape_, step.cache, h);
        float* max = table.max.data() + (h * table.page_capacity + page) * d;
        float* min = table.min.data() + (h * table.page_capacity + page) * d;
        std::fill(max, max + d, kernels::kNegInf);
        std::fill(min, min + d, -kernels::kNegInf);
        alignas(32) float row[512];
        for (int64_t j = page * size; j < std::min(end, page * size + size); ++j) {
          for (int c = 0; c < d; c += 8) _mm256_storeu_ps(row + c, kernels::load8(keys.row(j) + c));
          for (int c = 0; c < d; ++c) max[c] = std::max(max[c], row[c]), min[c] = std::min(min[c], row[c]);
        }
      }
    });
    table.covered = end;
  }

  // Each query head's top pages by sum_c max(q_c kmax_c, q_c kmin_c).
  void select(const Step& step, const Unit& unit) {
    const int d = shape_.head_dim, g = shape_.group();
    const int64_t size = options_.page_size;
    const int64_t n = unit.n_candidates;
    const int64_t kept = step_budget(options_, n);
    const PageTable& table = pages_[step.layer];
    const int64_t n_pages = (n + size - 1) / size;
    const int64_t n_selected = std::min(n_pages, (kept + size - 1) / size);
#pragma omp parallel for schedule(static)
    for (int head = 0; head < shape_.n_heads; ++head) {
      std::vector<int32_t>& keys = sets_[size_t(unit.query_offset * shape_.n_heads + head)];
      if (kept >= n) {
        keys.resize(size_t(n));
        std::iota(keys.begin(), keys.end(), 0);
        continue;
      }
      const float* q = step.queries + (unit.query_offset * shape_.n_heads + head) * d;
      const int h = head / g;
      std::vector<float> scores(static_cast<size_t>(n_pages));
      for (int64_t page = 0; page < n_pages; ++page) {
        const float* max = table.max.data() + (h * table.page_capacity + page) * d;
        const float* min = table.min.data() + (h * table.page_capacity + page) * d;
        float score = 0;
        for (int c = 0; c < d; ++c) score += std::max(q[c] * max[c], q[c] * min[c]);
        scores[page] = score;
      }
      std::vector<int32_t> pages(static_cast<size_t>(n_selected));
      select_top_k(scores.data(), n_pages, n_selected, pages.data());
      keys.clear();
      for (int32_t page : pages)
        for (int64_t j = page * size; j < std::min(n, page * size + size); ++j)
          keys.push_back(int32_t(j));
    }
  }

  Shape shape_;
  AttentionOptions options_;
  std::vector<bool> dense_;
  ExactAttention exact_;
  std::vector<PageTable> pages_;
  std::vector<Unit> units_;
  std::vector<std::vector<int32_t>> sets_;  // [unit * n_heads + head]
  bool last_dense_ = true;
};

// ---------------------------------------------------------------------------
// OmniKV and LessIsMore share a shape: decode-only, dense early layers,
// selection layers that attend densely and choose one set for all heads,
// later layers attending that set.
class SharedSetStrategy : public Strategy {
 public:
  SharedSetStrategy(const AttentionOptions& options, const Shape& shape, std::vector<bool> selecting,
                    std::vector<bool> dense)
      : shape_(shape),
        options_(options),
        selecting_(std::move(selecting)),
        dense_(std::move(dense)),
        exact_(shape) {}

  void reset() override { selected_ = {}; }
  bool dense_prefill() const override { return true; }

  void forward(const Step& step) override {
    check_step(shape_, step);
    const int j = step.layer;
    last_dense_ = step.phase == Phase::Prefill || dense_[j] || selecting_[j];
    if (step.phase == Phase::Decode && selecting_[j]) {
      units_ = query_units(step);
      choose(step, units_);  // also writes the layer's dense output
      selected_ = StepId::of(step);
      return;
    }
    if (last_dense_) {
      exact_.dense(step);
      return;
    }
    if (!(selected_ == StepId::of(step)))
      fail("{}: layer {} has no selection layer before it in this step", name(), j);
    exact_.restricted(
        step, units_, [&](int64_t unit, int) { return std::span<const int32_t>(sets_[unit]); },
        false);
  }

  void kept_keys(const Step& step, int64_t q, int head, std::vector<int32_t>& keys) const override {
    if (last_dense_) return Strategy::kept_keys(step, q, head, keys);
    keys = sets_[q];
  }

 protected:
  // Fills sets_[u] for every unit and writes the step's dense output.
  virtual void choose(const Step& step, std::span<const Unit> units) = 0;

  Shape shape_;
  AttentionOptions options_;
  std::vector<bool> selecting_, dense_;
  ExactAttention exact_;
  std::vector<Unit> units_;
  std::vector<std::vector<int32_t>> sets_;
  StepId selected_;
  bool last_dense_ = true;
};

class OmniKvStrategy final : public SharedSetStrategy {
 public:
  OmniKvStrategy(const AttentionOptions& options, const Shape& shape, std::vector<bool> filters,
                 std::vector<bool> dense)
      : SharedSetStrategy(options, shape, std::move(filters), std::move(dense)), selector_(shape) {}
  std::string_view name() const override { return "omnikv"; }

 private:
  void choose(const Step& step, std::span<const Unit> units) override {
    selector_.select(
        step, units, PoolMode::AllHeadsMax, Pooling::PostSoftmax,
        [&](const Unit& unit) { return step_budget(options_, unit.n_candidates); }, true);
    sets_.resize(units.size());
    for (size_t u = 0; u < units.size(); ++u) {
      const std::span<const int32_t> set = selector_.set(int64_t(u), 0);
      sets_[u].assign(set.begin(), set.end());
    }
  }

  Selector selector_;
};

class LessIsMoreStrategy final : public SharedSetStrategy {
 public:
  using SharedSetStrategy::SharedSetStrategy;
  std::string_view name() const override { return "lessismore"; }

 private:
  void choose(const Step& step, std::span<const Unit> units) override {
    sets_.resize(units.size());
    with_element_type(step.cache.type, [&]<typename T>(T) {
      for (size_t u = 0; u < units.size(); ++u) choose_unit<T>(step, units[u], sets_[u]);
    });
  }

  template <typename T>
  void choose_unit(const Step& step, const Unit& unit, std::vector<int32_t>& keys) {
    const int d = shape_.head_dim, g = shape_.group(), n_heads = shape_.n_heads;
    const int64_t n = unit.n_candidates;
    const int64_t kept = step_budget(options_, n);
    keys.clear();
    std::vector<GroupQueries> groups;
    std::vector<kernels::Rows<T>> key_list, values;
    std::vector<GroupOutput> outputs;
    for (int h = 0; h < shape_.n_kv_heads; ++h) {
      groups.push_back(unit_queries(shape_, step, unit, h * g, g));
      key_list.push_back(key_rows<T>(shape_, step.cache, h));
      values.push_back(value_rows<T>(shape_, step.cache, h));
      outputs.push_back(unit_output(shape_, step, unit, h * g));
    }
    // Per-head scores, and the layer's dense output from the same pass.
    std::vector<float> pooled(size_t(n_heads * n));
    scorer_.score<T>(groups, key_list, n, d, PoolMode::PerQueryHead, Pooling::PostSoftmax,
                     pooled.data(), n, nullptr, values, outputs);
    if (kept >= n) {
      keys.resize(size_t(n));
      std::iota(keys.begin(), keys.end(), 0);
      return;
    }
    // Budget split: middle share by rank, then sinks + the most recent keys.
    const int64_t middle = int64_t(std::floor((1.0 - options_.recent_fraction) * double(kept)));
    const int64_t recent = kept - middle;
    // Sinks only when the recent share has room for them and for the query's own key.
    const int64_t sinks = recent > options_.sink_tokens ? options_.sink_tokens : 0;
    const int64_t window = recent - sinks;
    const int64_t lo = sinks, hi = n - window;  // middle candidates [lo, hi)
    std::vector<char> taken(size_t(n), 0);
    for (int64_t j = 0; j < sinks; ++j) taken[j] = 1;
    for (int64_t j = hi; j < n; ++j) taken[j] = 1;
    if (middle >= hi - lo) {
      std::fill(taken.begin() + lo, taken.begin() + hi, 1);
    } else if (middle > 0) {
      // Each head's top `middle` of [lo, hi), best first (ties: lower index).
      std::vector<std::vector<int32_t>> ranked(static_cast<size_t>(n_heads));
#pragma omp parallel for schedule(dynamic, 1)
      for (int head = 0; head < n_heads; ++head) {
        const float* score = pooled.data() + head * n;
        std::vector<int32_t>& top = ranked[head];
        top.resize(size_t(middle));
        select_top_k(score + lo, hi - lo, middle, top.data());
        for (int32_t& j : top) j += int32_t(lo);
        std::stable_sort(top.begin(), top.end(),
                         [&](int32_t a, int32_t b) { return score[a] > score[b]; });
      }
      // Union rank by rank, heads in order, until it holds `middle` keys.
      int64_t added = 0;
      for (int64_t rank = 0; rank < middle && added < middle; ++rank)
        for (int head = 0; head < n_heads && added < middle; ++head) {
          const int32_t j = ranked[head][rank];
          if (!taken[j]) taken[j] = 1, ++added;
        }
    }
    for (int64_t j = 0; j < n; ++j)
      if (taken[j]) keys.push_back(int32_t(j));
  }

  DecodeScorer scorer_;
};

}  // namespace

std::unique_ptr<Strategy> make_streaming(const AttentionOptions& options, const Shape& shape) {
  return std::make_unique<StreamingStrategy>(options, shape);
}

std::unique_ptr<Strategy> make_quest(const AttentionOptions& options, const Shape& shape) {
  return std::make_unique<QuestStrategy>(options, shape);
}

std::unique_ptr<Strategy> make_omnikv(const AttentionOptions& options, const Shape& shape) {
  const int L = shape.n_layers;
  const std::vector<int> filters =
      options.filter_layers.value_or(scale_layers(std::vector<int>{2, 8, 18}, L));
  std::vector<bool> is_filter = layer_flags(filters, {}, L), dense(size_t(L), false);
  const int first = filters.empty() ? L : filters.front();
  for (int j = 0; j < L; ++j)
    dense[j] = j < std::max(first, 2) || (j > 0 && is_filter[j - 1]);
  return std::make_unique<OmniKvStrategy>(options, shape, std::move(is_filter), std::move(dense));
}

std::unique_ptr<Strategy> make_lessismore(const AttentionOptions& options, const Shape& shape) {
  const int L = shape.n_layers;
  const std::vector<int> selection =
      options.selection_layers.value_or(scale_layers(std::vector<int>{2, 13}, L));
  std::vector<bool> is_selection = layer_flags(selection, {}, L), dense(size_t(L), false);
  const int first = selection.empty() ? L : selection.front();
  for (int j = 0; j < first; ++j) dense[j] = true;
  return std::make_unique<LessIsMoreStrategy>(options, shape, std::move(is_selection),
                                              std::move(dense));
}

}  // namespace kascade::attention
