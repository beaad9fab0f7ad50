// The building blocks of Kascade attention (KASCADE.md), one KV head at a
// time, on plain fp32 pointers with explicit strides. They are the CPU twins of
// the CUDA kernels: the GPU tests compare index sets exactly and outputs within
// tolerance against these functions, and the CPU strategies are built from the
// same code (templated over the cache element type internally).
//
// Conventions shared by every function here:
//  - Scores are q.k / sqrt(head_dim); softmax and log-sum-exp use natural log.
//  - Query row (t, r) is position t of the tile and head r of the KV group; it
//    sees keys [0, first_position + t] (causal).
//  - Index sets are ascending key indices. Top-k ties go to the lower index.
// The budget is kascade/budget.h's, the top-k attention/rows.h's select_top_k.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "attention/rows.h"
#include "kascade/budget.h"

namespace kascade::attention {

// lse[t * group + r] = log sum_{j <= first_position + t} exp(q_{t,r} . k_j / sqrt(d)).
void row_lse(const GroupQueries& queries, const float* keys, int64_t key_stride, int head_dim,
             float* lse);

// Adds each candidate key's pooled score over the tile's rows to pooled[j],
// j in [0, n_candidates): PostSoftmax adds sum_{t,r} exp(score - lse[t*g+r]),
// PreSoftmax adds sum_{t,r} score (lse may be null). Accumulating lets the
// all-heads ablation sum several groups. Requires n_candidates <=
// first_position + 1, so every row sees every candidate.
void pool_scores(const GroupQueries& queries, const float* keys, int64_t key_stride, int head_dim,
                 const float* lse, int64_t n_candidates, Pooling pooling, float* pooled);

// How an anchor turns pooled scores into an index set.
struct SelectionRule {
  double percent = 10;
  int64_t min_k = 128;
  int64_t round_up_to = 1;
  Pooling pooling = Pooling::PostSoftmax;
  // Fixed-budget ablation: when >= 0, every prefill tile selects
  // min(fixed_count, s) keys instead of the rolling budget(s).
  int64_t fixed_count = -1;
  // Decode: keys below sketched_end(N) are scored from their 4-bit sketch
  // (key_sketch.h), the rest exactly.
  bool sketch = false;
  // Keys one selection keeps out of n_candidates.
  int64_t count(int64_t n_candidates) const;
};

// Index sets of consecutive tiles: set t is indices[offsets[t], offsets[t+1]).
struct TileIndexSets {
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> indices;
  int64_t n_sets() const { return int64_t(offsets.size()) - 1; }
  std::span<const int32_t> set(int64_t t) const {
    return {indices.data() + offsets[t], size_t(offsets[t + 1] - offsets[t])};
  }
};

// Anchor selection for one KV head over a prefill chunk: tile t covers
// positions [s, s + T) with s = queries.first_position + t * tile (the last
// tile may be shorter); its candidates are [0, s), pooled over the tile's
// rows; it keeps rule.count(s) of them (all of them when that is >= s).
TileIndexSets anchor_prefill(const GroupQueries& queries, const float* keys, int64_t key_stride,
                             int head_dim, int64_t tile, const SelectionRule& rule);

// Anchor selection for one KV head at a decode step (queries.n_positions == 1):
// the candidates are all N = first_position + 1 cached keys, the new one
// included. Writes rule.count(N) indices and returns that count.
int64_t anchor_decode(const GroupQueries& queries, const float* keys, int64_t key_stride,
                      int head_dim, const SelectionRule& rule, int32_t* indices);

// The keys a held decode step attends (AttentionOptions::select_every): the
// selection S made when the sequence had selected_keys keys, S shifted by the
// steps since (n_keys - selected_keys; shifted keys from selected_keys on are
// dropped, they come next), and every key added since, [selected_keys,
// n_keys). Ascending, each key once.
void held_keys(std::span<const int32_t> selected, int64_t selected_keys, int64_t n_keys, std::vector<int32_t>& keys);

// Attention of the group's rows restricted to the keys in `indices`, softmax
// renormalised over that set, plus, when own_tile is set (prefill), the tile's
// own keys [first_position, first_position + t] causally (then every index must
// be < first_position). Writes every output row.
void sparse_attention(const GroupQueries& queries, const KeyValueRows& kv, int head_dim,
                      std::span<const int32_t> indices, bool own_tile, const GroupOutput& out);

// Exact causal attention of the group's rows over keys [0, first_position + t].
void dense_attention(const GroupQueries& queries, const KeyValueRows& kv, int head_dim,
                     const GroupOutput& out);

}  // namespace kascade::attention
