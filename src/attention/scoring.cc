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

void score_prefill_group(const float* q, const GroupQueries& rows, int64_t n_candidates, int d,
                         const float* key_panels, Pooling pooling, bool per_query_head,
                         float* pooled, int64_t ld, float* lse, ThreadScratch& scratch) {
  const int g = rows.group;
  const int64_t n_rows = rows.n_rows();
  const int64_t key_end = rows.first_position + rows.n_positions;
  const bool post = pooling == Pooling::PostSoftmax;
  // The candidates' scores wait in `kept` until the row LSE is known:
  // O(rows x N) for this tile only.
  const int64_t ldk = kernels::round_up(std::max<int64_t>(n_candidates, 1), 8);
  float* s = scratch.scores.get(n_rows * kKeyBlock);
  float* kept = post ? scratch.extra.get(n_rows * ldk) : nullptr;
  scratch.states.assign(size_t(n_rows), kernels::SoftmaxState{});
  auto pool_row = [&](int64_t r) { return pooled + (per_query_head ? r % g : 0) * ld; };

  for (int64_t b0 = 0; b0 < key_end; b0 += kKeyBlock) {
    const int64_t nb = std::min(kKeyBlock, key_end - b0);
    const int64_t nc = std::clamp<int64_t>(n_candidates - b0, 0, nb);  // candidate columns
    kernels::qk_panels(q, n_rows, d, key_panels + b0 * d, nb, s, kKeyBlock);
    for (int64_t r = 0; r < n_rows; ++r) {
      const float* row = s + r * kKeyBlock;
      const int64_t visible = std::clamp<int64_t>(rows.first_position + r / g + 1 - b0, 0, nb);
      if (nc > 0) {
        if (post)
          std::copy(row, row + nc, kept + r * ldk + b0);
        else
          kernels::axpy(pool_row(r) + b0, row, nc, kLn2);
      }
      if (visible == 0) continue;
      const float max = kernels::max_of(row, visible);
      fold(scratch.states[r], max, kernels::exp2_sum(row, visible, max));
    }
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    const float lse2 = scratch.states[r].max + std::log2(scratch.states[r].sum);
    if (lse) lse[r] = lse2 * kLn2;
    if (post && n_candidates > 0) kernels::add_exp2(pool_row(r), kept + r * ldk, n_candidates, lse2);
  }
}

template <typename T>
void DecodeScorer::score(std::span<const GroupQueries> groups,
                         std::span<const kernels::Rows<T>> keys, int64_t n_keys, int d,
                         PoolMode mode, Pooling pooling, float* pooled, int64_t ld, float* lse) {
  constexpr int64_t kSplitKeys = 512;
  const int n_groups = int(groups.size());
  const int g = groups[0].group;
  const int64_t n_splits = (n_keys + kSplitKeys - 1) / kSplitKeys;
  const int64_t lde = kernels::round_up(n_keys, 8);
  const bool post = pooling == Pooling::PostSoftmax;
  const bool all_heads = mode == PoolMode::AllHeadsSum || mode == PoolMode::AllHeadsMax;
  const int n_pools = all_heads ? 1 : mode == PoolMode::PerQueryHead ? n_groups * g : n_groups;
  const float init = mode == PoolMode::AllHeadsMax && !post ? kNegInf : 0.0f;
  for (int p = 0; p < n_pools; ++p) std::fill(pooled + p * ld, pooled + p * ld + n_keys, init);

  float* q = queries_.get(int64_t(n_groups) * g * d);
  for (int h = 0; h < n_groups; ++h) kernels::pack_queries(groups[h], d, q + int64_t(h) * g * d);
  float* scores = scores_.get(int64_t(n_groups) * g * lde);
  split_max_.assign(size_t(n_groups * n_splits * g), kNegInf);
  split_sum_.assign(size_t(n_groups * n_splits * g), 0.0f);
  auto split_index = [&](int h, int64_t sp, int r) { return (h * n_splits + sp) * g + r; };
  // Base-2 LSE of row (h, r) from its split states.
  auto row_lse2 = [&](int h, int r) {
    kernels::SoftmaxState state;
    for (int64_t sp = 0; sp < n_splits; ++sp) {
      const int64_t i = split_index(h, sp, r);
      if (split_max_[i] != kNegInf) fold(state, split_max_[i], split_sum_[i]);
    }
    return state.max + std::log2(state.sum);
  };

#pragma omp parallel
  {
    // Scores, and each split's softmax state for the rows' LSE.
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < n_groups * n_splits; ++item) {
      const int h = int(item / n_splits);
      const int64_t sp = item % n_splits, begin = sp * kSplitKeys;
      const int64_t count = std::min(kSplitKeys, n_keys - begin);
      float* rows = scores + int64_t(h) * g * lde + begin;
      kernels::dot_rows(q + int64_t(h) * g * d, g, d, keys[h],
                        kernels::KeyList{nullptr, begin, count}, rows, lde);
      if (!post) continue;
      for (int r = 0; r < g; ++r) {
        const float* row = rows + r * lde;
        const float max = kernels::max_of(row, count);
        split_max_[split_index(h, sp, r)] = max;
        split_sum_[split_index(h, sp, r)] = kernels::exp2_sum(row, count, max);
      }
    }
    // Pooling; pools shared by all heads are split over keys only.
    const int64_t n_items = all_heads ? n_splits : n_groups * n_splits;
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < n_items; ++item) {
      const int64_t sp = item % n_splits, begin = sp * kSplitKeys;
      const int64_t count = std::min(kSplitKeys, n_keys - begin);
      const int h_begin = all_heads ? 0 : int(item / n_splits);
      const int h_end = all_heads ? n_groups : h_begin + 1;
      for (int h = h_begin; h < h_end; ++h)
        for (int r = 0; r < g; ++r) {
          const float* row = scores + (int64_t(h) * g + r) * lde + begin;
          const int pool = all_heads ? 0 : mode == PoolMode::PerQueryHead ? h * g + r : h;
          float* target = pooled + pool * ld + begin;
          const bool max = mode == PoolMode::AllHeadsMax;
          if (post)
            kernels::add_exp2(target, row, count, row_lse2(h, r), max);
          else if (max)
            max_into(target, row, count, kLn2);
          else
            kernels::axpy(target, row, count, kLn2);
        }
    }
  }
  if (lse && post)
    for (int h = 0; h < n_groups; ++h)
      for (int r = 0; r < g; ++r) lse[h * g + r] = row_lse2(h, r) * kLn2;
}

template void DecodeScorer::score<float>(std::span<const GroupQueries>,
                                         std::span<const kernels::Rows<float>>, int64_t, int,
                                         PoolMode, Pooling, float*, int64_t, float*);
template void DecodeScorer::score<uint16_t>(std::span<const GroupQueries>,
                                            std::span<const kernels::Rows<uint16_t>>, int64_t,
                                            int, PoolMode, Pooling, float*, int64_t, float*);

}  // namespace kascade::attention
