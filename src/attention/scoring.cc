// Scoring for selection: exact row LSE and pooled candidate scores.
#include "attention/scoring.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

namespace kascade::attention {

using kernels::kKeyBlock;
using kernels::kLn2;
using kernels::kNegInf;

// Folds a block's (max, sum of exp2(s - max)) into a row's running state.
static void fold(kernels::SoftmaxState& state, float max, float sum) {
  if (max > state.max) {
    state.sum = state.sum * std::exp2(state.max - max) + sum;
    state.max = max;
  } else {
    state.sum += sum * std::exp2(max - state.max);
  }
}

static void max_into(float* y, const float* x, int64_t n, float a) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::max(y[i], a * x[i]);
}

void pool_kept_scores(const float* kept, int64_t ldk, int64_t n_rows, int group, int64_t n,
                      const float* lse2, Pooling pooling, bool per_query_head, float* pooled,
                      int64_t ld) {
  if (n <= 0) return;
  for (int64_t r = 0; r < n_rows; ++r) {
    float* target = pooled + (per_query_head ? r % group : 0) * ld;
    if (pooling == Pooling::PostSoftmax)
      kernels::add_exp2(target, kept + r * ldk, n, lse2[r]);
    else
      kernels::axpy(target, kept + r * ldk, n, kLn2);
  }
}

void score_prefill_group(const float* q, const GroupQueries& rows, int64_t n_candidates, int d,
                         const float* key_panels, Pooling pooling, bool per_query_head,
                         float* pooled, int64_t ld, float* lse, ThreadScratch& scratch) {
  const int g = rows.group;
  const int64_t n_rows = rows.n_rows();
  const int64_t key_end = rows.first_position + rows.n_positions;
  // The candidates' scores wait in `kept` until the row LSE is known:
  // O(rows x N) for this tile only.
  const int64_t ldk = kept_stride(n_candidates);
  float* s = scratch.scores.get(n_rows * kKeyBlock);
  float* kept = scratch.extra.get(n_rows * ldk);
  scratch.states.assign(size_t(n_rows), kernels::SoftmaxState{});
  for (int64_t b0 = 0; b0 < key_end; b0 += kKeyBlock) {
    const int64_t nb = std::min(kKeyBlock, key_end - b0);
    const int64_t nc = std::clamp<int64_t>(n_candidates - b0, 0, nb);  // candidate columns
    kernels::qk_panels(q, n_rows, d, key_panels + b0 * d, nb, s, kKeyBlock);
    for (int64_t r = 0; r < n_rows; ++r) {
      const float* row = s + r * kKeyBlock;
      const int64_t visible = std::clamp<int64_t>(rows.first_position + r / g + 1 - b0, 0, nb);
      std::copy(row, row + nc, kept + r * ldk + b0);
      if (visible == 0) continue;
      const float max = kernels::max_of(row, visible);
      fold(scratch.states[r], max, kernels::exp2_sum(row, visible, max));
    }
  }
  std::vector<float>& lse2 = scratch.row_values;
  lse2.resize(size_t(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) {
    lse2[r] = scratch.states[r].lse2();
    if (lse) lse[r] = lse2[r] * kLn2;
  }
  pool_kept_scores(kept, ldk, n_rows, g, n_candidates, lse2.data(), pooling, per_query_head,
                   pooled, ld);
}

template <typename T>
void DecodeScorer::score(std::span<const GroupQueries> groups,
                         std::span<const kernels::Rows<T>> keys, int64_t n_keys, int d,
                         PoolMode mode, Pooling pooling, float* pooled, int64_t ld, float* lse,
                         std::span<const kernels::Rows<T>> values,
                         std::span<const GroupOutput> outputs, const KeySketch* sketch) {
  const int n_groups = int(groups.size());
  const int g = groups[0].group;
  const int64_t split_keys = kernels::decode_chunk_keys(n_keys);
  const int64_t n_splits = split_keys > 0 ? (n_keys + split_keys - 1) / split_keys : 0;
  const int64_t lds = kernels::round_up(n_keys, 8);
  const int64_t lda = kernels::acc_stride(d);
  const bool post = pooling == Pooling::PostSoftmax;
  const bool dense = !outputs.empty();
  const bool all_heads = mode == PoolMode::AllHeadsSum || mode == PoolMode::AllHeadsMax;
  const int n_pools = all_heads ? 1 : mode == PoolMode::PerQueryHead ? n_groups * g : n_groups;
  const float init = mode == PoolMode::AllHeadsMax && !post ? kNegInf : 0.0f;
  for (int p = 0; p < n_pools; ++p) std::fill(pooled + p * ld, pooled + p * ld + n_keys, init);

  float* q = queries_.get(int64_t(n_groups) * g * d);
  for (int h = 0; h < n_groups; ++h) kernels::pack_queries(groups[h], d, q + int64_t(h) * g * d);
  float* scores = scores_.get(int64_t(n_groups) * g * lds);
  // Per (group, split, row): softmax state of the split, and with a dense
  // output its unnormalised output.
  const int64_t n_states = int64_t(n_groups) * n_splits * g;
  split_states_.assign(size_t(n_states), kernels::SoftmaxState{});
  float* split_acc = dense ? split_acc_.get(n_states * lda) : nullptr;
  if (dense) std::fill(split_acc, split_acc + n_states * lda, 0.0f);
  row_lse2_.resize(size_t(n_groups * g));
  row_max_.resize(size_t(n_groups * g));

#pragma omp parallel
  {
    kernels::Scratch block_scores;
    // Scores and each split's softmax state; with a dense output, the split's
    // attention too (the dense decode's arithmetic, so the same output bits).
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < n_groups * n_splits; ++item) {
      const int h = int(item / n_splits);
      const int64_t sp = item % n_splits, begin = sp * split_keys;
      const kernels::KeyList list{nullptr, begin, std::min(split_keys, n_keys - begin)};
      float* rows = scores + int64_t(h) * g * lds + begin;
      kernels::SoftmaxState* states = split_states_.data() + item * g;
      if (dense) {
        const kernels::KeptScores kept{rows, lds, list.count};
        kernels::attend_block_rows(q + int64_t(h) * g * d, g, d, keys[h], values[h], list,
                                   nullptr, nullptr, states, split_acc + item * g * lda,
                                   block_scores, &kept);
        continue;
      }
      const int64_t from_sketch = sketch ? std::clamp<int64_t>(sketch->sketched() - begin, 0, list.count) : 0;
      if (from_sketch > 0) sketch->dot_rows(q + int64_t(h) * g * d, g, h, begin, from_sketch, rows, lds);
      if (from_sketch < list.count)
        kernels::dot_rows(q + int64_t(h) * g * d, g, d, keys[h],
                          kernels::KeyList{nullptr, begin + from_sketch, list.count - from_sketch}, rows + from_sketch,
                          lds);
      if (post)
        for (int r = 0; r < g; ++r) states[r].max = kernels::max_of(rows + r * lds, list.count);
    }
    // Without a dense output each score becomes exp2(s - max) in place, max
    // the row's maximum over all splits: one exponential per score. The
    // pooling below scales a row by 2^(max - lse2), the same factor for
    // every key, so equal scores still pool to equal sums (exact ties).
    if (post && !dense) {
#pragma omp single
      for (int i = 0; i < n_groups * g; ++i) {
        float max = kNegInf;
        for (int64_t sp = 0; sp < n_splits; ++sp)
          max = std::max(max, split_states_[size_t(((i / g) * n_splits + sp) * g + i % g)].max);
        row_max_[size_t(i)] = max;
      }
#pragma omp for schedule(dynamic, 1)
      for (int64_t item = 0; item < n_groups * n_splits; ++item) {
        const int h = int(item / n_splits);
        const int64_t begin = (item % n_splits) * split_keys, count = std::min(split_keys, n_keys - begin);
        for (int r = 0; r < g; ++r) {
          kernels::SoftmaxState& state = split_states_[size_t(item * g + r)];
          state.max = row_max_[size_t(h * g + r)];
          state.sum = kernels::exp2_shift_sum(scores + (int64_t(h) * g + r) * lds + begin, count, state.max);
        }
      }
    }
#pragma omp single
    for (int h = 0; h < n_groups; ++h)
      for (int r = 0; r < g; ++r) {
        kernels::SoftmaxState state;
        for (int64_t sp = 0; sp < n_splits; ++sp) {
          const kernels::SoftmaxState& split = split_states_[(h * n_splits + sp) * g + r];
          if (split.max != kNegInf) fold(state, split.max, split.sum);
        }
        row_lse2_[h * g + r] = state.lse2();
      }
    // Pooling; pools shared by all heads are split over keys only.
    const int64_t n_items = all_heads ? n_splits : n_groups * n_splits;
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < n_items; ++item) {
      const int64_t sp = item % n_splits, begin = sp * split_keys;
      const int64_t count = std::min(split_keys, n_keys - begin);
      const int h_begin = all_heads ? 0 : int(item / n_splits);
      const int h_end = all_heads ? n_groups : h_begin + 1;
      for (int h = h_begin; h < h_end; ++h)
        for (int r = 0; r < g; ++r) {
          const float* row = scores + (int64_t(h) * g + r) * lds + begin;
          const int pool = all_heads ? 0 : mode == PoolMode::PerQueryHead ? h * g + r : h;
          float* target = pooled + pool * ld + begin;
          const bool max = mode == PoolMode::AllHeadsMax;
          if (post && !dense) {  // row holds exp2(s - max)
            const float scale = std::exp2(row_max_[size_t(h * g + r)] - row_lse2_[h * g + r]);
            if (max)
              max_into(target, row, count, scale);
            else
              kernels::axpy(target, row, count, scale);
          } else if (post) {
            kernels::add_exp2(target, row, count, row_lse2_[h * g + r], max);
          } else if (max) {
            max_into(target, row, count, kLn2);
          } else {
            kernels::axpy(target, row, count, kLn2);
          }
        }
    }
  }
  if (lse && (post || dense))
    for (int i = 0; i < n_groups * g; ++i) lse[i] = row_lse2_[i] * kLn2;
  if (!dense) return;
  for (int h = 0; h < n_groups; ++h) {
    kernels::SoftmaxState* states = split_states_.data() + h * n_splits * g;
    float* acc = split_acc + h * n_splits * g * lda;
    for (int64_t sp = 1; sp < n_splits; ++sp)
      for (int r = 0; r < g; ++r)
        states[r].merge(states[sp * g + r], acc + r * lda, acc + (sp * g + r) * lda, d);
    kernels::write_output(states, acc, 1, g, d, outputs[h]);
  }
}

template void DecodeScorer::score<float>(std::span<const GroupQueries>,
                                         std::span<const kernels::Rows<float>>, int64_t, int,
                                         PoolMode, Pooling, float*, int64_t, float*,
                                         std::span<const kernels::Rows<float>>,
                                         std::span<const GroupOutput>, const KeySketch*);
template void DecodeScorer::score<uint16_t>(std::span<const GroupQueries>,
                                            std::span<const kernels::Rows<uint16_t>>, int64_t,
                                            int, PoolMode, Pooling, float*, int64_t, float*,
                                            std::span<const kernels::Rows<uint16_t>>,
                                            std::span<const GroupOutput>, const KeySketch*);

}  // namespace kascade::attention
