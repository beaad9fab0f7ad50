// The Kascade building blocks (kascade_ops.h) against the naive double
// references of attention_reference.h: budget, top-k selection with ties to
// the lower index, row LSE, pooled scores, anchor selection in prefill and
// decode, and sparse / dense attention of one KV group.
#include <gtest/gtest.h>

#include <random>

#include "attention/kascade_ops.h"
#include "attention_reference.h"
#include "core/error.h"

namespace kascade::attention {
namespace {

using reference::Problem;

TEST(AttentionOps, Budget) {
  EXPECT_EQ(budget(1000, 10, 128), 128);  // min_k wins
  EXPECT_EQ(budget(2000, 10, 128), 200);
  EXPECT_EQ(budget(1000, 10, 1), 100);    // exactly 10%, not 99
  EXPECT_EQ(budget(8192, 10, 128), 819);  // floor
  EXPECT_EQ(budget(100, 10, 128), 100);   // never more than the keys
  EXPECT_EQ(budget(5000, 100, 128), 5000);
  EXPECT_EQ(budget(0, 10, 128), 0);
  EXPECT_EQ(budget(2000, 10, 128, 64), 256);  // rounded up to whole GPU blocks
  EXPECT_EQ(budget(250, 10, 100, 64), 128);
  EXPECT_EQ(budget(110, 10, 100, 64), 110);   // rounding capped by the keys
  for (int64_t n = 1; n < 3000; n += 7)
    EXPECT_EQ(budget(n, 3.5, 16), reference::budget(n, 3.5, 16)) << n;
}

// Sort-based reference: best first, ties to the lower index, then ascending.
std::vector<int32_t> sorted_top_k(const std::vector<float>& x, int64_t k) {
  std::vector<double> scores(x.begin(), x.end());
  return reference::top_k(scores, k);
}

TEST(AttentionOps, SelectTopKMatchesSortWithTiesToLowerIndex) {
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal;
  for (int trial = 0; trial < 400; ++trial) {
    // Long rows take the sampled-threshold path (select_top_k), short ones not.
    const int64_t n = 1 + int64_t(rng() % (trial % 10 < 7 ? 3000 : 20000));
    std::vector<float> x(static_cast<size_t>(n));
    const int kind = trial % 5;
    for (float& v : x) {
      if (kind == 0) v = normal(rng);                                  // distinct
      if (kind == 1) v = float(rng() % 5);                             // few values: many ties
      if (kind == 2) v = std::exp(normal(rng) * 8);                    // wide dynamic range
      if (kind == 3) v = (rng() % 2 ? 1.0f : -1.0f) * float(rng() % 3);  // signs, +-0
      if (kind == 4) v = std::abs(normal(rng)) * 1e-3f;
    }
    if (kind == 4)  // large values exactly where a strided sample looks: its threshold finds too few
      for (int64_t i = 0; i < 256; ++i) x[size_t(i * n / 256)] = 100.0f + float(i);
    if (kind == 3)
      for (size_t i = 0; i < x.size(); i += 3) x[i] = -0.0f;
    for (int64_t k : {int64_t(0), int64_t(1), n / 10, n / 2, n - 1, n}) {
      std::vector<int32_t> got(static_cast<size_t>(k));
      select_top_k(x.data(), n, k, got.data());
      ASSERT_EQ(got, sorted_top_k(x, k)) << "trial " << trial << " n " << n << " k " << k;
    }
  }
}

TEST(AttentionOps, SelectTopKAllEqualTakesTheFirst) {
  std::vector<float> x(1000, 0.25f);
  std::vector<int32_t> got(37);
  select_top_k(x.data(), 1000, 37, got.data());
  for (int i = 0; i < 37; ++i) EXPECT_EQ(got[i], i);
}

struct GroupView {
  GroupQueries queries;
  const float* keys;
  const float* values;
  int64_t stride;
};

// Rows of KV head h of layer 0 at positions [first, first + n).
GroupView view(const Problem& p, int h, int64_t first, int64_t n) {
  const Shape& s = p.shape;
  GroupQueries q{p.query(0, first, h * s.group()), n, s.group(), int64_t(s.n_heads) * p.d(),
                 p.d(), first};
  return {q, p.key(0, h, 0), p.value(0, h, 0), p.d()};
}

// S = {0, 3, 4, 9} selected at 10 keys, held 2 steps later (12 keys): S,
// S + 2 below 10 ({2, 5, 6}; 11 comes with the new keys), then 10 and 11.
TEST(AttentionOps, HeldKeysMergeSelectionShiftAndNewKeys) {
  const std::vector<int32_t> selected{0, 3, 4, 9};
  std::vector<int32_t> keys{42};  // overwritten
  held_keys(selected, 10, 12, keys);
  EXPECT_EQ(keys, (std::vector<int32_t>{0, 2, 3, 4, 5, 6, 9, 10, 11}));
  held_keys(selected, 10, 11, keys);  // one step: 4 = 3 + 1 is kept once
  EXPECT_EQ(keys, (std::vector<int32_t>{0, 1, 3, 4, 5, 9, 10}));
  held_keys({}, 10, 13, keys);
  EXPECT_EQ(keys, (std::vector<int32_t>{10, 11, 12}));
}

TEST(AttentionOps, RowLseAndPooledScores) {
  for (const Shape& shape : {Shape{1, 6, 2, 64}, Shape{1, 8, 1, 128}, Shape{1, 3, 3, 40}}) {
    const Problem p = reference::make_problem(shape, 300, KvType::F32, 3, 2.5);
    const int g = shape.group();
    const int64_t first = 231, n = 29, candidates = first;
    const GroupView v = view(p, shape.n_kv_heads - 1, first, n);
    std::vector<float> lse(size_t(n * g));
    row_lse(v.queries, v.keys, v.stride, p.d(), lse.data());
    std::vector<double> want_post(size_t(candidates), 0.0), want_pre(want_post);
    for (int64_t t = 0; t < n; ++t)
      for (int r = 0; r < g; ++r) {
        const int head = (shape.n_kv_heads - 1) * g + r;
        double max = -1e300, sum = 0;
        for (int64_t j = 0; j <= first + t; ++j) max = std::max(max, reference::score(p, 0, first + t, head, j));
        for (int64_t j = 0; j <= first + t; ++j) sum += std::exp(reference::score(p, 0, first + t, head, j) - max);
        EXPECT_NEAR(lse[t * g + r], max + std::log(sum), 1e-5 * (1 + std::abs(max)));
        const std::vector<double> row = reference::softmax_row(p, 0, first + t, head);
        for (int64_t j = 0; j < candidates; ++j) {
          want_post[j] += row[j];
          want_pre[j] += reference::score(p, 0, first + t, head, j);
        }
      }
    std::vector<float> post(size_t(candidates), 1.0f), pre(size_t(candidates), 0.0f);
    pool_scores(v.queries, v.keys, v.stride, p.d(), lse.data(), candidates,
                Pooling::PostSoftmax, post.data());
    pool_scores(v.queries, v.keys, v.stride, p.d(), nullptr, candidates, Pooling::PreSoftmax,
                pre.data());
    for (int64_t j = 0; j < candidates; ++j) {
      EXPECT_NEAR(post[j], 1.0 + want_post[j], 2e-5 * (1 + want_post[j])) << j;  // accumulated
      EXPECT_NEAR(pre[j], want_pre[j], 1e-4 * (1 + std::abs(want_pre[j]))) << j;
    }
    EXPECT_THROW(pool_scores(v.queries, v.keys, v.stride, p.d(), lse.data(), first + 2,
                             Pooling::PostSoftmax, post.data()),
                 Error);
  }
}

TEST(AttentionOps, AnchorPrefillMatchesReference) {
  reference::Stats stats;
  for (const Shape& shape : {Shape{1, 9, 3, 64}, Shape{1, 4, 4, 32}, Shape{1, 16, 2, 128}}) {
    const Problem p = reference::make_problem(shape, 420, KvType::F32, 4, 2.0);
    const int g = shape.group();
    for (int64_t tile : {32, 13}) {
      for (int64_t fixed : {int64_t(-1), int64_t(20)}) {
        const int64_t first = 64, n = 420 - first;
        const GroupView v = view(p, 0, first, n);
        SelectionRule rule;
        rule.percent = 10;
        rule.min_k = 16;
        rule.fixed_count = fixed;
        const TileIndexSets sets = anchor_prefill(v.queries, v.keys, v.stride, p.d(), tile, rule);
        ASSERT_EQ(sets.n_sets(), (n + tile - 1) / tile);
        for (int64_t t = 0; t < sets.n_sets(); ++t) {
          const int64_t s = first + t * tile, len = std::min(tile, n - t * tile);
          const int64_t k = fixed >= 0 ? std::min(fixed, s) : reference::budget(s, 10, 16);
          std::vector<double> pooled(size_t(s), 0.0);
          for (int64_t u = 0; u < len; ++u)
            for (int r = 0; r < g; ++r) {
              const std::vector<double> row = reference::softmax_row(p, 0, s + u, r);
              for (int64_t j = 0; j < s; ++j) pooled[j] += row[j];
            }
          const std::span<const int32_t> got = sets.set(t);
          reference::check_selection(pooled, k, std::vector<int32_t>(got.begin(), got.end()), stats,
                                     fmt::format("tile {} of {}", t, tile));
        }
      }
    }
  }
  stats.print("anchor_prefill");
}

TEST(AttentionOps, AnchorDecodeMatchesReference) {
  reference::Stats stats;
  for (const Shape& shape : {Shape{1, 9, 3, 64}, Shape{1, 8, 1, 256}}) {
    const Problem p = reference::make_problem(shape, 1500, KvType::F32, 5, 2.0);
    for (int64_t position : {int64_t(99), int64_t(700), int64_t(1499)})
      for (Pooling pooling : {Pooling::PostSoftmax, Pooling::PreSoftmax}) {
        const GroupView v = view(p, 0, position, 1);
        SelectionRule rule;
        rule.min_k = 32;
        rule.pooling = pooling;
        const int64_t n = position + 1;
        std::vector<int32_t> got(static_cast<size_t>(n));
        const int64_t k = anchor_decode(v.queries, v.keys, v.stride, p.d(), rule, got.data());
        ASSERT_EQ(k, reference::budget(n, 10, 32));
        got.resize(size_t(k));
        std::vector<double> pooled(size_t(n), 0.0);
        for (int r = 0; r < shape.group(); ++r) {
          const std::vector<double> row = reference::softmax_row(p, 0, position, r);
          for (int64_t j = 0; j < n; ++j)
            pooled[j] += pooling == Pooling::PostSoftmax ? row[j] : reference::score(p, 0, position, r, j);
        }
        reference::check_selection(pooled, k, got, stats, fmt::format("decode at {}", position));
      }
  }
  stats.print("anchor_decode");
}

TEST(AttentionOps, SparseAndDenseAttentionMatchReference) {
  for (const Shape& shape : {Shape{1, 9, 3, 64}, Shape{1, 5, 1, 72}, Shape{1, 4, 2, 256}}) {
    const Problem p = reference::make_problem(shape, 600, KvType::F32, 6, 2.0);
    const int g = shape.group(), d = p.d();
    std::mt19937_64 rng(7);
    for (int64_t n : {int64_t(1), int64_t(5), int64_t(32)}) {
      const int64_t first = 517;
      std::vector<int32_t> indices;
      for (int32_t j = 0; j < first; ++j)
        if (rng() % 9 == 0) indices.push_back(j);
      const GroupView v = view(p, 1 % shape.n_kv_heads, first, n);
      std::vector<float> out(size_t(n * shape.n_heads * d), std::nanf(""));
      const GroupOutput o{out.data(), int64_t(shape.n_heads) * d, d};
      for (int mode = 0; mode < 3; ++mode) {
        const bool own = mode == 0, dense = mode == 2;
        if (dense)
          dense_attention(v.queries, {v.keys, v.values, v.stride}, d, o);
        else
          sparse_attention(v.queries, {v.keys, v.values, v.stride}, d, indices, own, o);
        for (int64_t t = 0; t < n; ++t)
          for (int r = 0; r < g; ++r) {
            std::vector<int32_t> keys = dense ? reference::all_keys(first + t + 1) : indices;
            if (own)
              for (int64_t j = first; j <= first + t; ++j) keys.push_back(int32_t(j));
            const int head = (1 % shape.n_kv_heads) * g + r;
            const std::vector<double> want = reference::attend(p, 0, first + t, head, keys);
            const double tol = reference::tolerance(p, 0, first + t, head, keys);
            for (int c = 0; c < d; ++c)
              ASSERT_NEAR(out[t * shape.n_heads * d + r * d + c], want[c], tol)
                  << "mode " << mode << " t " << t << " r " << r << " c " << c;
          }
      }
      std::vector<int32_t> late = indices;
      late.push_back(int32_t(first));
      EXPECT_THROW(sparse_attention(v.queries, {v.keys, v.values, v.stride}, d, late, true, o),
                   Error);
    }
  }
}

}  // namespace
}  // namespace kascade::attention
