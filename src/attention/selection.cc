// Top-k selection of keys per unit and pool (see selection.h).
#include "attention/selection.h"

#include <omp.h>

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace kascade::attention {

int pool_count(PoolMode mode, const Shape& shape) {
  switch (mode) {
    case PoolMode::PerKvHead: return shape.n_kv_heads;
    case PoolMode::PerQueryHead: return shape.n_heads;
    case PoolMode::AllHeadsSum:
    case PoolMode::AllHeadsMax: return 1;
  }
  return 1;
}

void Selector::select(const Step& step, std::span<const Unit> units, PoolMode mode,
                      Pooling pooling, const Count& count) {
  n_pools_ = pool_count(mode, shape_);
  sets_.assign(units.size() * size_t(n_pools_), {});
  with_element_type(step.cache.type, [&]<typename T>(T) {
    if (step.phase == Phase::Decode) {
      for (size_t u = 0; u < units.size(); ++u)
        select_decode<T>(step, units[u], int64_t(u), mode, pooling, count);
    } else {
      select_prefill<T>(step, units, mode, pooling, count);
    }
  });
}

template <typename T>
void Selector::select_prefill(const Step& step, std::span<const Unit> units, PoolMode mode,
                              Pooling pooling, const Count& count) {
  if (mode == PoolMode::AllHeadsMax) fail("max pooling over heads is decode-only");
  const int d = shape_.head_dim, g = shape_.group(), n_kv = shape_.n_kv_heads;
  const bool all_heads = mode == PoolMode::AllHeadsSum;
  const bool per_query_head = mode == PoolMode::PerQueryHead;
  const int64_t n_units = int64_t(units.size());
  const bool scores_needed = std::any_of(units.begin(), units.end(), [&](const Unit& unit) {
    return count(unit) < unit.n_candidates;
  });
  int64_t head_floats = 0;
  const float* panels =
      scores_needed ? pack_step_keys<T>(shape_, step, panels_, &head_floats) : nullptr;

  const size_t n_threads = size_t(std::max(1, omp_get_max_threads()));
  if (threads_.size() < n_threads) threads_.resize(n_threads);
  const int64_t heads_per_item = all_heads ? n_kv : 1;
  const int64_t n_items = n_units * (n_kv / heads_per_item);
#pragma omp parallel
  {
    ThreadScratch& scratch = threads_[omp_get_thread_num()];
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < n_items; ++item) {
      const int64_t u = n_units - 1 - item / (n_kv / heads_per_item);  // longest rows first
      const int first_head = all_heads ? 0 : int(item % n_kv);
      const Unit& unit = units[u];
      const int64_t n = unit.n_candidates;
      const int64_t k = std::min(count(unit), n);
      // Pools this item fills: query heads of its KV head, its KV head, or the one pool.
      const int first_pool = per_query_head ? first_head * g : all_heads ? 0 : first_head;
      const int n_item_pools = per_query_head ? g : 1;
      if (k < n) {
        scratch.pooled.assign(size_t(n_item_pools * n), 0.0f);
        for (int h = first_head; h < first_head + heads_per_item; ++h) {
          const GroupQueries rows = unit_queries(shape_, step, unit, h * g, g);
          float* q = scratch.queries.get(rows.n_rows() * d);
          kernels::pack_queries(rows, d, q);
          score_prefill_group(q, rows, n, d, panels + h * head_floats, pooling, per_query_head,
                              scratch.pooled.data(), n, nullptr, scratch);
        }
      }
      for (int p = 0; p < n_item_pools; ++p) {
        std::vector<int32_t>& set = sets_[size_t(u * n_pools_ + first_pool + p)];
        set.resize(size_t(k));
        if (k < n)
          select_top_k(scratch.pooled.data() + p * n, n, k, set.data());
        else
          std::iota(set.begin(), set.end(), 0);
      }
    }
  }
}

template <typename T>
void Selector::select_decode(const Step& step, const Unit& unit, int64_t unit_index,
                             PoolMode mode, Pooling pooling, const Count& count) {
  const int d = shape_.head_dim, g = shape_.group(), n_kv = shape_.n_kv_heads;
  const int64_t n = unit.n_candidates;
  const int64_t k = std::min(count(unit), n);
  std::vector<int32_t>* sets = sets_.data() + unit_index * n_pools_;
  if (k >= n) {
    for (int p = 0; p < n_pools_; ++p) {
      sets[p].resize(size_t(n));
      std::iota(sets[p].begin(), sets[p].end(), 0);
    }
    return;
  }
  std::vector<GroupQueries> groups;
  std::vector<kernels::Rows<T>> keys;
  for (int h = 0; h < n_kv; ++h) {
    groups.push_back(unit_queries(shape_, step, unit, h * g, g));
    keys.push_back(key_rows<T>(shape_, step.cache, h));
  }
  float* pooled = pooled_.get(n_pools_ * n);
  decode_scorer_.score<T>(groups, keys, n, d, mode, pooling, pooled, n, nullptr);
#pragma omp parallel for schedule(dynamic, 1)
  for (int p = 0; p < n_pools_; ++p) {
    sets[p].resize(size_t(k));
    select_top_k(pooled + p * n, n, k, sets[p].data());
  }
}

}  // namespace kascade::attention
