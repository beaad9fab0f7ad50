// Top-k selection of keys per unit and pool (see selection.h).
#include "attention/selection.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
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
                      Pooling pooling, const Count& count, bool dense_output, const Count& inner,
                      KeySketch* sketch) {
  n_pools_ = pool_count(mode, shape_);
  inner_ = inner;
  sets_.assign(units.size() * size_t(n_pools_), {});
  inner_sets_.assign(inner ? sets_.size() : 0, {});
  with_element_type(step.cache.type, [&]<typename T>(T) {
    if (step.phase == Phase::Decode) {
      for (size_t u = 0; u < units.size(); ++u)
        select_decode<T>(step, units[u], int64_t(u), mode, pooling, count, dense_output, sketch);
    } else {
      select_prefill<T>(step, units, mode, pooling, count, dense_output);
    }
  });
}

void Selector::keep_top(int64_t unit, int pool, const float* pooled, int64_t n, int64_t k,
                        int64_t inner_k) {
  const auto keep = [&](std::vector<int32_t>& set, int64_t count) {
    set.resize(size_t(count));
    if (count < n)
      select_top_k(pooled, n, count, set.data());
    else
      std::iota(set.begin(), set.end(), 0);
  };
  keep(sets_[size_t(unit * n_pools_ + pool)], k);
  if (inner_) keep(inner_sets_[size_t(unit * n_pools_ + pool)], inner_k);
}

template <typename T>
void Selector::select_prefill(const Step& step, std::span<const Unit> units, PoolMode mode,
                              Pooling pooling, const Count& count, bool dense_output) {
  if (mode == PoolMode::AllHeadsMax) fail("max pooling over heads is decode-only");
  const int d = shape_.head_dim, g = shape_.group(), n_kv = shape_.n_kv_heads;
  const bool all_heads = mode == PoolMode::AllHeadsSum;
  const bool per_query_head = mode == PoolMode::PerQueryHead;
  const int64_t n_units = int64_t(units.size());
  // The smallest set a unit keeps; scoring is needed when it is not every candidate.
  const auto smallest = [&](const Unit& unit) {
    const int64_t k = std::min(count(unit), unit.n_candidates);
    return inner_ ? std::min(inner_(unit), k) : k;
  };
  const bool scores_needed = std::any_of(units.begin(), units.end(), [&](const Unit& unit) {
    return smallest(unit) < unit.n_candidates;
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
      const int64_t inner_k = smallest(unit);
      const bool scored = inner_k < n;
      // Pools this item fills: query heads of its KV head, its KV head, or the one pool.
      const int first_pool = per_query_head ? first_head * g : all_heads ? 0 : first_head;
      const int n_item_pools = per_query_head ? g : 1;
      if (scored) scratch.pooled.assign(size_t(n_item_pools * n), 0.0f);
      for (int h = first_head; h < first_head + heads_per_item; ++h) {
        const GroupQueries rows = unit_queries(shape_, step, unit, h * g, g);
        if (dense_output) {
          // Dense attention over the packed step, keeping the candidates' scores.
          float *q, *acc;
          prepare_rows(rows, d, scratch, &q, &acc);
          const int64_t ldk = kept_stride(n);
          const kernels::KeptScores kept{scratch.extra.get(rows.n_rows() * ldk), ldk,
                                         scored ? n : 0};
          const kernels::PackedKv head = packed.head(h);
          kernels::attend_block_rows(
              q, rows.n_rows(), d, key_rows<T>(shape_, step.cache, h),
              value_rows<T>(shape_, step.cache, h),
              kernels::KeyList{nullptr, 0, unit.start + unit.length}, scratch.limits.data(),
              &head, scratch.states.data(), acc, scratch.scores, &kept);
          kernels::write_output(scratch.states.data(), acc, unit.length, g, d,
                                unit_output(shape_, step, unit, h * g));
          if (scored) {
            scratch.row_values.resize(size_t(rows.n_rows()));
            for (int64_t r = 0; r < rows.n_rows(); ++r)
              scratch.row_values[r] = scratch.states[r].lse2();
            pool_kept_scores(kept.data, ldk, rows.n_rows(), g, n, scratch.row_values.data(),
                             pooling, per_query_head, scratch.pooled.data(), n);
          }
        } else if (scored) {
          float* q = scratch.queries.get(rows.n_rows() * d);
          kernels::pack_queries(rows, d, q);
          score_prefill_group(q, rows, n, d, packed.head(h).key_panels, pooling, per_query_head,
                              scratch.pooled.data(), n, nullptr, scratch);
        }
      }
      for (int p = 0; p < n_item_pools; ++p)
        keep_top(u, first_pool + p, scored ? scratch.pooled.data() + p * n : nullptr, n, k,
                 inner_k);
    }
  }
}

template <typename T>
void Selector::select_decode(const Step& step, const Unit& unit, int64_t unit_index,
                             PoolMode mode, Pooling pooling, const Count& count,
                             bool dense_output, KeySketch* sketch) {
  const int d = shape_.head_dim, g = shape_.group(), n_kv = shape_.n_kv_heads;
  const int64_t n = unit.n_candidates;
  const int64_t k = std::min(count(unit), n);
  const int64_t inner_k = inner_ ? std::min(inner_(unit), k) : k;
  const bool scored = inner_k < n;
  float* pooled = nullptr;
  if (scored || dense_output) {
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
    pooled = pooled_.get(n_pools_ * n);
    if (sketch && !dense_output) sketch->extend<T>(keys, n);
    decode_scorer_.score<T>(groups, keys, n, d, mode, pooling, pooled, n, nullptr, values, outputs,
                            dense_output ? nullptr : sketch);
  }
  // Without scores every set is all n candidates; keep_top reads no score then.
#pragma omp parallel for schedule(dynamic, 1) if (scored)
  for (int p = 0; p < n_pools_; ++p)
    keep_top(unit_index, p, scored ? pooled + p * n : nullptr, n, k, inner_k);
}

void Refiner::refine(const Step& step, std::span<const Unit> units, const SetLookup& candidates,
                     const Selector::Count& count) {
  const int n_kv = shape_.n_kv_heads;
  const int64_t n_items = int64_t(units.size()) * n_kv;
  sets_.assign(size_t(n_items), {});
  const size_t n_threads = size_t(std::max(1, omp_get_max_threads()));
  if (threads_.size() < n_threads) threads_.resize(n_threads);
  with_element_type(step.cache.type, [&]<typename T>(T) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t item = 0; item < n_items; ++item) {
      const int64_t u = n_items - 1 - item;  // longest rows first
      const Unit& unit = units[size_t(u / n_kv)];
      const int h = int(u % n_kv);
      refine_one<T>(step, unit, h, candidates(u / n_kv, h), count(unit),
                    threads_[omp_get_thread_num()], sets_[size_t(u)]);
    }
  });
}

template <typename T>
void Refiner::refine_one(const Step& step, const Unit& unit, int h,
                         std::span<const int32_t> candidates, int64_t k, ThreadScratch& scratch,
                         std::vector<int32_t>& set) {
  const int64_t m = int64_t(candidates.size());
  if (k >= m) {
    set.assign(candidates.begin(), candidates.end());
    return;
  }
  const int d = shape_.head_dim, g = shape_.group();
  const GroupQueries rows = unit_queries(shape_, step, unit, h * g, g);
  const int64_t n_rows = rows.n_rows();
  float* q = scratch.queries.get(n_rows * d);
  kernels::pack_queries(rows, d, q);
  const kernels::KeyList list{candidates.data(), 0, m};
  const kernels::Rows<T> keys = key_rows<T>(shape_, step.cache, h);
  // Scores in the kernels' log2 units, row r at scores + r * lds.
  const int64_t lds = kernels::round_up(m, kernels::kPanelWidth);
  float* scores = scratch.scores.get(n_rows * lds);
  if (rows.n_positions == 1) {  // decode: each key is read once, no packing
    kernels::dot_rows(q, n_rows, d, keys, list, scores, lds);
  } else {
    float* panels = scratch.panels.get(lds * d);
    kernels::pack_key_panels(keys, list, d, panels);
    kernels::qk_panels(q, n_rows, d, panels, m, scores, lds);
  }
  scratch.pooled.assign(size_t(m), 0.0f);
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* row = scores + r * lds;
    const float max = kernels::max_of(row, m);
    const float lse2 = max + std::log2(kernels::exp2_sum(row, m, max));
    kernels::add_exp2(scratch.pooled.data(), row, m, lse2);
  }
  set.resize(size_t(k));
  select_top_k(scratch.pooled.data(), m, k, set.data());
  for (int32_t& index : set) index = candidates[size_t(index)];  // ascending positions -> keys
}

}  // namespace kascade::attention
