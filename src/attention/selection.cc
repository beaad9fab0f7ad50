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
                      Pooling pooling, const Count& count, bool dense_output) {
  n_pools_ = pool_count(mode, shape_);
  sets_.assign(units.size() * size_t(n_pools_), {});
  with_element_type(step.cache.type, [&]<typename T>(T) {
    if (step.phase == Phase::Decode) {
      for (size_t u = 0; u < units.size(); ++u)
        select_decode<T>(step, units[u], int64_t(u), mode, pooling, count, dense_output);
    } else {
      select_prefill<T>(step, units, mode, pooling, count, dense_output);
    }
  });
}

template <typename T>
void Selector::select_prefill(const Step& step, std::span<const Unit> units, PoolMode mode,
                              Pooling pooling, const Count& count, bool dense_output) {
  if (mode == PoolMode::AllHeadsMax) fail("max pooling over heads is decode-only");
  const int d = shape_.head_dim, g = shape_.group(), n_kv = shape_.n_kv_heads;
  const bool all_heads = mode == PoolMode::AllHeadsSum;
  const bool per_query_head = mode == PoolMode::PerQueryHead;
  const int64_t n_units = int64_t(units.size());
  const bool scores_needed = std::any_of(units.begin(), units.end(), [&](const Unit& unit) {
    return count(unit) < unit.n_candidates;
  });
  const PackedStep packed = scores_needed || dense_output
                                ? pack_step<T>(shape_, step, dense_output, panels_)
                                : PackedStep{};

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
      if (k < n) scratch.pooled.assign(size_t(n_item_pools * n), 0.0f);
      for (int h = first_head; h < first_head + heads_per_item; ++h) {
        const GroupQueries rows = unit_queries(shape_, step, unit, h * g, g);
        if (dense_output) {
          // Dense attention over the packed step, keeping the candidates' scores.
          float *q, *acc;
          prepare_rows(rows, d, scratch, &q, &acc);
          const int64_t ldk = kept_stride(n);
          const kernels::KeptScores kept{scratch.extra.get(rows.n_rows() * ldk), ldk,
                                         k < n ? n : 0};
          const kernels::PackedKv head = packed.head(h);
          kernels::attend_block_rows(
              q, rows.n_rows(), d, key_rows<T>(shape_, step.cache, h),
              value_rows<T>(shape_, step.cache, h),
              kernels::KeyList{nullptr, 0, unit.start + unit.length}, scratch.limits.data(),
              &head, scratch.states.data(), acc, scratch.scores, &kept);
          kernels::write_output(scratch.states.data(), acc, unit.length, g, d,
                                unit_output(shape_, step, unit, h * g));
          if (k < n) {
            scratch.row_values.resize(size_t(rows.n_rows()));
            for (int64_t r = 0; r < rows.n_rows(); ++r)
              scratch.row_values[r] = scratch.states[r].lse2();
            pool_kept_scores(kept.data, ldk, rows.n_rows(), g, n, scratch.row_values.data(),
                             pooling, per_query_head, scratch.pooled.data(), n);
          }
        } else if (k < n) {
          float* q = scratch.queries.get(rows.n_rows() * d);
          kernels::pack_queries(rows, d, q);
          score_prefill_group(q, rows, n, d, packed.head(h).key_panels, pooling, per_query_head,
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
                             PoolMode mode, Pooling pooling, const Count& count,
                             bool dense_output) {
  const int d = shape_.head_dim, g = shape_.group(), n_kv = shape_.n_kv_heads;
  const int64_t n = unit.n_candidates;
  const int64_t k = std::min(count(unit), n);
  std::vector<int32_t>* sets = sets_.data() + unit_index * n_pools_;
  if (k < n || dense_output) {
    std::vector<GroupQueries> groups;
    std::vector<kernels::Rows<T>> keys, values;
    std::vector<GroupOutput> outputs;
    for (int h = 0; h < n_kv; ++h) {
      groups.push_back(unit_queries(shape_, step, unit, h * g, g));
      keys.push_back(key_rows<T>(shape_, step.cache, h));
      if (!dense_output) continue;
      values.push_back(value_rows<T>(shape_, step.cache, h));
      outputs.push_back(unit_output(shape_, step, unit, h * g));
    }
    float* pooled = pooled_.get(n_pools_ * n);
    decode_scorer_.score<T>(groups, keys, n, d, mode, pooling, pooled, n, nullptr, values,
                            outputs);
    if (k < n) {
#pragma omp parallel for schedule(dynamic, 1)
      for (int p = 0; p < n_pools_; ++p) {
        sets[p].resize(size_t(k));
        select_top_k(pooled + p * n, n, k, sets[p].data());
      }
      return;
    }
  }
  for (int p = 0; p < n_pools_; ++p) {
    sets[p].resize(size_t(n));
    std::iota(sets[p].begin(), sets[p].end(), 0);
  }
}

}  // namespace kascade::attention
