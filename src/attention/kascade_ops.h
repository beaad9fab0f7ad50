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
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kascade::attention {

// Keys kept out of n_keys candidates at budget `percent` (KASCADE.md):
//   min(n_keys, round_up(max(min_k, floor(percent * n_keys / 100)), round_up_to)).
// round_up_to lets a GPU kernel that works in blocks reproduce its rounding
// here (1 = no rounding). floor() forgives a relative 1e-9 of binary
// round-off, so 10% of 1000 is 100, not 99.
int64_t budget(int64_t n_keys, double percent, int64_t min_k, int64_t round_up_to = 1);

// The indices of the k largest of scores[0, n), written ascending into
// out_indices_ascending[0, k). Ties go to the lower index, so the result is
// unique. Linear time (radix selection on the float bits). Requires 0 <= k <= n
// and no NaN in scores; -0.0 counts as equal to +0.0.
void select_top_k(const float* scores, int64_t n, int64_t k, int32_t* out_indices_ascending);

// The query rows of one KV group for a tile of consecutive positions (prefill)
// or one position (decode).
struct GroupQueries {
  const float* data = nullptr;   // row (t, r) at data + t * position_stride + r * head_stride
  int64_t n_positions = 0;       // T for a prefill tile (fewer for the last), 1 for decode
  int group = 1;                 // g query heads that share the KV head
  int64_t position_stride = 0;   // elements between consecutive positions
  int64_t head_stride = 0;       // elements between the group's consecutive heads
  int64_t first_position = 0;    // absolute position of t = 0
  int64_t n_rows() const { return n_positions * group; }
  const float* row(int64_t t, int r) const { return data + t * position_stride + r * head_stride; }
};

// Where the outputs of a GroupQueries go (same row layout).
struct GroupOutput {
  float* data = nullptr;
  int64_t position_stride = 0;
  int64_t head_stride = 0;
  float* row(int64_t t, int r) const { return data + t * position_stride + r * head_stride; }
};

// Key/value rows of one KV head: key j at keys + j * stride (same for values).
struct KeyValueRows {
  const float* keys = nullptr;
  const float* values = nullptr;
  int64_t stride = 0;
};

enum class Pooling {
  PostSoftmax,  // sum of softmax probabilities (the method)
  PreSoftmax,   // sum of raw scores q.k / sqrt(d) (ablation)
};

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
