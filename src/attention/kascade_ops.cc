// The Kascade building blocks on fp32 pointers (see kascade_ops.h), built on
// the same kernels and scoring code as the CPU strategies.
#include "attention/kascade_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "attention/exact.h"
#include "attention/kernels.h"
#include "attention/scoring.h"
#include "core/error.h"

namespace kascade::attention {

using kernels::KeyList;
using kernels::Rows;

int64_t SelectionRule::count(int64_t n_candidates) const {
  return budget(n_candidates, percent, min_k, round_up_to);
}


void row_lse(const GroupQueries& queries, const float* keys, int64_t key_stride, int head_dim,
             float* lse) {
  const int64_t key_end = queries.first_position + queries.n_positions;
  ThreadScratch scratch;
  float* panels = scratch.panels.get(kernels::round_up(key_end, kernels::kPanelWidth) * head_dim);
  kernels::pack_key_panels(Rows<float>{keys, key_stride}, KeyList{nullptr, 0, key_end}, head_dim,
                           panels);
  float* q = scratch.queries.get(queries.n_rows() * head_dim);
  kernels::pack_queries(queries, head_dim, q);
  score_prefill_group(q, queries, 0, head_dim, panels, Pooling::PostSoftmax, false, nullptr, 0,
                      lse, scratch);
}

void pool_scores(const GroupQueries& queries, const float* keys, int64_t key_stride, int head_dim,
                 const float* lse, int64_t n_candidates, Pooling pooling, float* pooled) {
  if (n_candidates > queries.first_position + 1)
    fail("pool_scores: {} candidates but the first query sees only {} keys", n_candidates,
         queries.first_position + 1);
  if (n_candidates <= 0) return;
  const int64_t n_rows = queries.n_rows();
  ThreadScratch scratch;
  float* panels =
      scratch.panels.get(kernels::round_up(n_candidates, kernels::kPanelWidth) * head_dim);
  kernels::pack_key_panels(Rows<float>{keys, key_stride}, KeyList{nullptr, 0, n_candidates},
                           head_dim, panels);
  float* q = scratch.queries.get(n_rows * head_dim);
  kernels::pack_queries(queries, head_dim, q);
  const int64_t lds = kernels::round_up(n_candidates, kernels::kPanelWidth);
  float* s = scratch.scores.get(n_rows * lds);
  kernels::qk_panels(q, n_rows, head_dim, panels, n_candidates, s, lds);
  for (int64_t r = 0; r < n_rows; ++r) {
    float* row = s + r * lds;
    if (pooling == Pooling::PreSoftmax) {
      kernels::axpy(pooled, row, n_candidates, kernels::kLn2);
    } else {
      kernels::exp2_shift_sum(row, n_candidates, lse[r] * kernels::kLog2e);
      kernels::axpy(pooled, row, n_candidates, 1.0f);
    }
  }
}

// Candidates [0, n) all kept, or the top `k` of the pooled scores.
static void keep_top(const std::vector<float>& pooled, int64_t n, int64_t k,
                     std::vector<int32_t>& out) {
  const size_t before = out.size();
  out.resize(before + size_t(std::min(k, n)));
  select_top_k(pooled.data(), n, std::min(k, n), out.data() + before);
}

TileIndexSets anchor_prefill(const GroupQueries& queries, const float* keys, int64_t key_stride,
                             int head_dim, int64_t tile, const SelectionRule& rule) {
  if (tile <= 0) fail("anchor_prefill: tile size {} must be positive", tile);
  const int64_t key_end = queries.first_position + queries.n_positions;
  ThreadScratch scratch;
  kernels::Scratch panel_buffer;
  float* packed = panel_buffer.get(kernels::round_up(key_end, kernels::kPanelWidth) * head_dim);
  kernels::pack_key_panels(Rows<float>{keys, key_stride}, KeyList{nullptr, 0, key_end}, head_dim,
                           packed);
  TileIndexSets sets;
  std::vector<float> pooled;
  for (int64_t offset = 0; offset < queries.n_positions; offset += tile) {
    GroupQueries rows = queries;
    rows.data = queries.row(offset, 0);
    rows.n_positions = std::min(tile, queries.n_positions - offset);
    rows.first_position = queries.first_position + offset;
    const int64_t s = rows.first_position;
    const int64_t k = rule.fixed_count >= 0 ? std::min(rule.fixed_count, s) : rule.count(s);
    if (k < s) {
      pooled.assign(size_t(s), 0.0f);
      float* q = scratch.queries.get(rows.n_rows() * head_dim);
      kernels::pack_queries(rows, head_dim, q);
      score_prefill_group(q, rows, s, head_dim, packed, rule.pooling, false, pooled.data(), s,
                          nullptr, scratch);
    }
    keep_top(pooled, s, k, sets.indices);
    sets.offsets.push_back(int64_t(sets.indices.size()));
  }
  return sets;
}

int64_t anchor_decode(const GroupQueries& queries, const float* keys, int64_t key_stride,
                      int head_dim, const SelectionRule& rule, int32_t* indices) {
  if (queries.n_positions != 1)
    fail("anchor_decode: {} query positions, expected 1", queries.n_positions);
  const int64_t n = queries.first_position + 1;
  const int64_t k = rule.count(n);
  std::vector<float> pooled(size_t(n), 0.0f);
  if (k < n) {
    DecodeScorer scorer;
    const Rows<float> key_rows{keys, key_stride};
    KeySketch sketch(1, head_dim);
    if (rule.sketch) sketch.extend<float>({&key_rows, 1}, n);
    scorer.score<float>({&queries, 1}, {&key_rows, 1}, n, head_dim, PoolMode::PerKvHead, rule.pooling, pooled.data(),
                        n, nullptr, {}, {}, rule.sketch ? &sketch : nullptr);
  }
  select_top_k(pooled.data(), n, k, indices);
  return k;
}

void sparse_attention(const GroupQueries& queries, const KeyValueRows& kv, int head_dim,
                      std::span<const int32_t> indices, bool own_tile, const GroupOutput& out) {
  std::vector<int32_t> list(indices.begin(), indices.end());
  if (own_tile) {
    for (int32_t j : indices)
      if (j >= queries.first_position)
        fail("sparse_attention: index {} is not before the tile at {}", j, queries.first_position);
    for (int64_t t = 0; t < queries.n_positions; ++t)
      list.push_back(int32_t(queries.first_position + t));
  }
  ThreadScratch scratch;
  attend_group(queries, Rows<float>{kv.keys, kv.stride}, Rows<float>{kv.values, kv.stride},
               KeyList{list.data(), 0, int64_t(list.size())}, head_dim, out, scratch);
}

void held_keys(std::span<const int32_t> selected, int64_t selected_keys, int64_t n_keys, std::vector<int32_t>& keys) {
  const int64_t age = n_keys - selected_keys;
  keys.clear();
  // Merge S with S + age (both ascending), then the new keys.
  auto shifted = selected.begin();
  for (const int32_t key : selected) {
    for (; shifted != selected.end() && *shifted + age < key; ++shifted) keys.push_back(int32_t(*shifted + age));
    if (shifted != selected.end() && *shifted + age == key) ++shifted;
    keys.push_back(key);
  }
  for (; shifted != selected.end() && *shifted + age < selected_keys; ++shifted) keys.push_back(int32_t(*shifted + age));
  for (int64_t key = selected_keys; key < n_keys; ++key) keys.push_back(int32_t(key));
}

void dense_attention(const GroupQueries& queries, const KeyValueRows& kv, int head_dim,
                     const GroupOutput& out) {
  ThreadScratch scratch;
  attend_group(queries, Rows<float>{kv.keys, kv.stride}, Rows<float>{kv.values, kv.stride},
               KeyList{nullptr, 0, queries.first_position + queries.n_positions}, head_dim, out,
               scratch);
}

}  // namespace kascade::attention
