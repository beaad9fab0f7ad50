// Top-k selection of keys for a step: for every unit (prefill tile or decode
// query) and pool (KV head, query head or all heads), score the unit's
// candidates (scoring.h) and keep the top `count(unit)` of them with
// select_top_k. Used by Kascade anchors, the oracle and OmniKV. The Refiner
// re-ranks given candidate sets with a layer's own queries (Kascade's refined
// reuse). Internal.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "attention/exact.h"
#include "attention/key_sketch.h"
#include "attention/scoring.h"

namespace kascade::attention {

class Selector {
 public:
  explicit Selector(const Shape& shape) : shape_(shape) {}

  // How many keys a unit keeps (capped at its candidates; keeping them all
  // skips scoring).
  using Count = std::function<int64_t(const Unit&)>;

  // Prefill supports PerKvHead, PerQueryHead and AllHeadsSum; decode all
  // modes. With dense_output it also writes the step's dense attention output,
  // computed in the same pass over the keys (a dense layer that selects).
  // With `inner` (at most `count` for every unit) it also keeps the top
  // inner(unit) of the same pooled scores as a second, nested set. With a
  // `sketch` (decode, no dense output) keys are scored from the layer's key
  // sketch (key_sketch.h), which is first extended to the step's keys.
  void select(const Step& step, std::span<const Unit> units, PoolMode mode, Pooling pooling,
              const Count& count, bool dense_output = false, const Count& inner = {},
              KeySketch* sketch = nullptr);

  int n_pools() const { return n_pools_; }
  // The ascending index set of (unit, pool) from the last select().
  std::span<const int32_t> set(int64_t unit, int pool) const {
    return sets_[size_t(unit * n_pools_ + pool)];
  }
  // The nested set of the last select() with `inner`.
  std::span<const int32_t> inner_set(int64_t unit, int pool) const {
    return inner_sets_[size_t(unit * n_pools_ + pool)];
  }

 private:
  template <typename T>
  void select_prefill(const Step& step, std::span<const Unit> units, PoolMode mode,
                      Pooling pooling, const Count& count, bool dense_output);
  template <typename T>
  void select_decode(const Step& step, const Unit& unit, int64_t unit_index, PoolMode mode,
                     Pooling pooling, const Count& count, bool dense_output, KeySketch* sketch);
  // Writes the top k of pooled[0, n) (all n when k >= n) into set(unit, pool),
  // and the top inner_k into inner_set(unit, pool) when inner sets are kept.
  void keep_top(int64_t unit, int pool, const float* pooled, int64_t n, int64_t k,
                int64_t inner_k);

  Shape shape_;
  int n_pools_ = 0;
  Count inner_;
  std::vector<std::vector<int32_t>> sets_;        // [unit * n_pools + pool]
  std::vector<std::vector<int32_t>> inner_sets_;  // same layout, when inner_ is set
  std::vector<ThreadScratch> threads_;
  kernels::Scratch panels_, pooled_;
  DecodeScorer decode_scorer_;
};

int pool_count(PoolMode mode, const Shape& shape);

// Refined reuse (KASCADE.md): for every unit and KV head, the group's query
// rows score the keys of a candidate set (an anchor's, through the head map),
// each row's softmax normalised over the candidates, summed over the rows
// (post-softmax pooling), and the top count(unit) candidates are kept.
// Candidates must all be visible to every row of the unit (prefill: before the
// tile; decode: up to the query).
class Refiner {
 public:
  explicit Refiner(const Shape& shape) : shape_(shape) {}

  void refine(const Step& step, std::span<const Unit> units, const SetLookup& candidates,
              const Selector::Count& count);

  // The ascending kept set of (unit, KV head) from the last refine().
  std::span<const int32_t> set(int64_t unit, int kv_head) const {
    return sets_[size_t(unit * shape_.n_kv_heads + kv_head)];
  }

 private:
  template <typename T>
  void refine_one(const Step& step, const Unit& unit, int h, std::span<const int32_t> candidates,
                  int64_t k, ThreadScratch& scratch, std::vector<int32_t>& set);

  Shape shape_;
  std::vector<std::vector<int32_t>> sets_;  // [unit * n_kv_heads + kv_head]
  std::vector<ThreadScratch> threads_;
};

}  // namespace kascade::attention
