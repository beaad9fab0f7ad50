// Top-k selection of keys for a step: for every unit (prefill tile or decode
// query) and pool (KV head, query head or all heads), score the unit's
// candidates (scoring.h) and keep the top `count(unit)` of them with
// select_top_k. Used by Kascade anchors, the oracle and OmniKV. Internal.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "attention/exact.h"
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
  void select(const Step& step, std::span<const Unit> units, PoolMode mode, Pooling pooling,
              const Count& count, bool dense_output = false);

  int n_pools() const { return n_pools_; }
  // The ascending index set of (unit, pool) from the last select().
  std::span<const int32_t> set(int64_t unit, int pool) const {
    return sets_[size_t(unit * n_pools_ + pool)];
  }

 private:
  template <typename T>
  void select_prefill(const Step& step, std::span<const Unit> units, PoolMode mode,
                      Pooling pooling, const Count& count, bool dense_output);
  template <typename T>
  void select_decode(const Step& step, const Unit& unit, int64_t unit_index, PoolMode mode,
                     Pooling pooling, const Count& count, bool dense_output);

  Shape shape_;
  int n_pools_ = 0;
  std::vector<std::vector<int32_t>> sets_;  // [unit * n_pools + pool]
  std::vector<ThreadScratch> threads_;
  kernels::Scratch panels_, pooled_;
  DecodeScorer decode_scorer_;
};

int pool_count(PoolMode mode, const Shape& shape);

}  // namespace kascade::attention
