// Scoring for selection: each query row's exact log-sum-exp over its causal
// row and the pooled scores of candidate keys, reading keys only. Prefill
// scores one (tile, KV group) at a time with O(rows x N) scratch; decode
// scores one query for all KV heads, split over keys across threads.
// Internal to src/attention.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "attention/exact.h"
#include "attention/kernels.h"
#include "attention/key_sketch.h"
#include "attention/rows.h"

namespace kascade::attention {

// How rows' scores pool into selection scores.
enum class PoolMode {
  PerKvHead,     // one pool per KV head: sum over its g query heads (Kascade)
  PerQueryHead,  // one pool per query head (oracle top-k, LessIsMore's per-head ranks)
  AllHeadsSum,   // one pool: sum over every head (all-heads-pooled ablation)
  AllHeadsMax,   // one pool: max over every head (OmniKV)
};

// Prefill: pooled scores of one tile's rows of one KV group. q holds the rows
// packed by kernels::pack_queries (row (t, r) sees keys [0, first_position + t]),
// key_panels the keys [0, first_position + n_positions) packed by
// pack_key_panels. Adds, for candidates j < n_candidates, row (t, r)'s score
// into pooled[pool * ld + j] with pool = per_query_head ? r : 0 (PostSoftmax
// adds exp(s - lse), PreSoftmax s). Writes each row's natural LSE to lse
// (t * g + r order) unless null.
void score_prefill_group(const float* q, const GroupQueries& rows, int64_t n_candidates, int d,
                         const float* key_panels, Pooling pooling, bool per_query_head,
                         float* pooled, int64_t ld, float* lse, ThreadScratch& scratch);

// Row stride of kept raw scores of n candidates.
inline int64_t kept_stride(int64_t n) { return kernels::round_up(std::max<int64_t>(n, 1), 8); }

// Pools rows' kept raw scores (log2 units, kernels.h) of candidates [0, n):
// PostSoftmax adds exp2(s - lse2[r]), PreSoftmax s * ln(2), into
// pooled[pool * ld + j], pool = per_query_head ? r % group : 0. Row by row in
// order, so equal scores pool to bit-equal values (exact ties).
void pool_kept_scores(const float* kept, int64_t ldk, int64_t n_rows, int group, int64_t n,
                      const float* lse2, Pooling pooling, bool per_query_head, float* pooled,
                      int64_t ld);

// Decode: one query (groups[h] its rows of KV head h, n_positions 1) scored
// against keys [0, n_keys), split over keys across threads. pooled has
// pool rows of ld floats, zeroed here; pools by `mode` (PerKvHead: pool h,
// PerQueryHead: pool h * g + r, AllHeads*: pool 0). lse (natural, h * g + r)
// unless null. With `values` and `outputs` (one per group) it also writes the
// dense attention output: a selection fused with a dense layer, reading each
// key once. With a `sketch` (no dense output), keys below sketch->sketched()
// are scored from it and the rest exactly.
class DecodeScorer {
 public:
  template <typename T>
  void score(std::span<const GroupQueries> groups, std::span<const kernels::Rows<T>> keys,
             int64_t n_keys, int d, PoolMode mode, Pooling pooling, float* pooled, int64_t ld,
             float* lse, std::span<const kernels::Rows<T>> values = {},
             std::span<const GroupOutput> outputs = {}, const KeySketch* sketch = nullptr);

 private:
  kernels::Scratch queries_, scores_, split_acc_;
  std::vector<kernels::SoftmaxState> split_states_;
  std::vector<float> row_lse2_, row_max_;
};

}  // namespace kascade::attention
