// Tests for Kascade calibration: the anchor dynamic programme against brute
// force, head maps, the calibration strategy's statistics against a naive
// double-precision reference (full softmax rows, sorted top-k), known
// answers on synthetic attention, layer importance, dev set parsing, and an
// end-to-end run on the default model that must be reproducible.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>
#include <utility>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "calibration/anchor_search.h"
#include "calibration/attention_statistics.h"
#include "calibration/calibrate.h"
#include "calibration/dev_set.h"
#include "calibration/report.h"
#include "core/error.h"
#include "core/model_cache.h"
#include "kascade/profile.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace kascade::calibration {
namespace {

// ---------------------------------------------------------------------------
// Anchor search.

struct Problem {
  std::vector<double> sim;  // [a][b]
  std::vector<double> weights;
};

Problem random_problem(int n, std::mt19937& rng) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  Problem p;
  p.sim.assign(size_t(n) * n, 0.0);
  for (int a = 0; a < n; ++a) {
    p.sim[size_t(a) * n + a] = 1.0;
    for (int b = a + 1; b < n; ++b) p.sim[size_t(a) * n + b] = unit(rng);
  }
  for (int j = 0; j < n; ++j) p.weights.push_back(unit(rng));
  return p;
}

// Calls visit(anchors) for every anchor set of size m over n layers that contains layer 0.
template <typename Visit>
void for_each_anchor_set(int n, int m, const Visit& visit) {
  for (uint32_t mask = 0; mask < (1u << (n - 1)); ++mask) {
    if (std::popcount(mask) != m - 1) continue;
    std::vector<int> anchors{0};
    for (int j = 1; j < n; ++j)
      if (mask & (1u << (j - 1))) anchors.push_back(j);
    visit(anchors);
  }
}

// The best objective over every anchor set of size m containing layer 0.
double brute_force_best(const Problem& p, int m) {
  double best = -std::numeric_limits<double>::infinity();
  for_each_anchor_set(int(p.weights.size()), m, [&](const std::vector<int>& anchors) {
    best = std::max(best, anchor_objective(p.sim, p.weights, anchors));
  });
  return best;
}

TEST(AnchorSearch, DynamicProgrammeEqualsBruteForce) {
  std::mt19937 rng(20251216);
  int cases = 0;
  for (int n = 1; n <= 12; ++n)
    for (int trial = 0; trial < 6; ++trial) {
      const Problem p = random_problem(n, rng);
      for (int m = 1; m <= n; ++m) {
        const std::vector<int> anchors = choose_anchors(p.sim, p.weights, m);
        ASSERT_EQ(int(anchors.size()), m);
        EXPECT_EQ(anchors[0], 0);
        EXPECT_TRUE(std::is_sorted(anchors.begin(), anchors.end()));
        EXPECT_EQ(std::adjacent_find(anchors.begin(), anchors.end()), anchors.end());
        EXPECT_NEAR(anchor_objective(p.sim, p.weights, anchors), brute_force_best(p, m), 1e-12)
            << "L=" << n << " M=" << m << " trial " << trial;
        ++cases;
      }
    }
  EXPECT_EQ(cases, 6 * 78);
}

TEST(AnchorSearch, MoreAnchorsNeverScoreLower) {
  std::mt19937 rng(7);
  const Problem p = random_problem(12, rng);
  double previous = -1;
  for (int m = 1; m <= 12; ++m) {
    const double score = anchor_objective(p.sim, p.weights, choose_anchors(p.sim, p.weights, m));
    EXPECT_GE(score, previous - 1e-12);
    previous = score;
  }
  // Every layer an anchor: each counts sim(j, j) = 1.
  EXPECT_NEAR(previous, std::accumulate(p.weights.begin(), p.weights.end(), 0.0), 1e-12);
}

TEST(AnchorSearch, PicksTheObviousSegments) {
  // Layers 0-2 resemble layer 0, layers 3-5 resemble only layer 3.
  const int n = 6;
  Problem p;
  p.sim.assign(n * n, 0.0);
  p.weights.assign(n, 1.0);
  for (int a = 0; a < n; ++a)
    for (int b = a; b < n; ++b) p.sim[a * n + b] = (a < 3) == (b < 3) ? 1.0 : 0.1;
  EXPECT_EQ(choose_anchors(p.sim, p.weights, 2), (std::vector<int>{0, 3}));
  // Zero weight on layers 3-5: the second anchor may sit anywhere; the
  // earliest-start tie rule puts it at layer 1.
  p.weights = {1, 1, 1, 0, 0, 0};
  EXPECT_EQ(choose_anchors(p.sim, p.weights, 2), (std::vector<int>{0, 1}));
}

// Every anchor set containing layer 0 whose reuse layers all keep >= floor:
// the smallest size, and the best objective at that size.
std::pair<int, double> brute_force_fewest_above(const Problem& p, double floor) {
  const int n = int(p.weights.size());
  for (int m = 1; m <= n; ++m) {
    double best = -std::numeric_limits<double>::infinity();
    for_each_anchor_set(n, m, [&](const std::vector<int>& anchors) {
      const std::vector<int> owner = anchor_of_each_layer(n, anchors);
      bool qualifies = true;
      for (int j = 0; j < n; ++j) qualifies &= owner[size_t(j)] == j || p.sim[size_t(owner[size_t(j)]) * n + j] >= floor;
      if (qualifies) best = std::max(best, anchor_objective(p.sim, p.weights, anchors));
    });
    if (best > -std::numeric_limits<double>::infinity()) return {m, best};
  }
  return {0, 0.0};
}

TEST(AnchorSearch, FewestAnchorsAboveAFloorEqualsBruteForce) {
  std::mt19937 rng(29);
  for (int n = 1; n <= 11; ++n)
    for (int trial = 0; trial < 5; ++trial) {
      const Problem p = random_problem(n, rng);
      for (const double floor : {0.0, 0.3, 0.6, 0.9, 1.0}) {
        const std::vector<int> anchors = fewest_anchors_above(p.sim, p.weights, floor);
        const auto [count, objective] = brute_force_fewest_above(p, floor);
        SCOPED_TRACE(fmt::format("L={} trial {} floor {}", n, trial, floor));
        ASSERT_EQ(int(anchors.size()), count);
        EXPECT_EQ(anchors[0], 0);
        EXPECT_TRUE(std::is_sorted(anchors.begin(), anchors.end()));
        EXPECT_NEAR(anchor_objective(p.sim, p.weights, anchors), objective, 1e-12);
        const std::vector<int> owner = anchor_of_each_layer(n, anchors);
        for (int j = 0; j < n; ++j) {
          if (owner[size_t(j)] == j) continue;
          EXPECT_GE(p.sim[size_t(owner[size_t(j)]) * n + j], floor) << "layer " << j;
        }
      }
    }
}

TEST(AnchorSearch, FloorAboveEverySimilarityMakesEveryLayerAnAnchor) {
  std::mt19937 rng(3);
  Problem p = random_problem(6, rng);
  for (int a = 0; a < 6; ++a)
    for (int b = a + 1; b < 6; ++b) p.sim[size_t(a) * 6 + b] = std::min(p.sim[size_t(a) * 6 + b], 0.5);
  EXPECT_EQ(fewest_anchors_above(p.sim, p.weights, 0.75), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(fewest_anchors_above(p.sim, p.weights, 0.0), (std::vector<int>{0}));
}

TEST(AnchorSearch, RejectsBadProblems) {
  const std::vector<double> sim(9, 1.0), weights(3, 1.0);
  EXPECT_THROW(choose_anchors(sim, weights, 0), Error);
  EXPECT_THROW(choose_anchors(sim, weights, 4), Error);
  EXPECT_THROW(choose_anchors(std::vector<double>(8, 1.0), weights, 2), Error);
  EXPECT_THROW(anchor_objective(sim, weights, std::vector<int>{1, 2}), Error);
  EXPECT_THROW(anchor_objective(sim, weights, std::vector<int>{0, 2, 1}), Error);
  EXPECT_THROW(anchor_objective(sim, weights, std::vector<int>{0, 3}), Error);
  EXPECT_THROW(fewest_anchors_above(std::vector<double>(8, 1.0), weights, 0.5), Error);
}

TEST(HeadMap, IdentityOnAnchorsArgmaxElsewhereTiesToLowerHead) {
  HeadSimilarity s(4, 3);
  for (double& v : s.values()) v = 0.5;
  // Layer 2 (reusing anchor 1): head 0 is best served by anchor head 2, head 1
  // has a tie between heads 0 and 1 (-> 0), head 2 by head 1.
  s.at(1, 2, 2, 0) = 0.9;
  s.at(1, 0, 2, 1) = 0.8;
  s.at(1, 1, 2, 1) = 0.8;
  s.at(1, 1, 2, 2) = 0.7;
  // Anchor layer 3 would prefer another head of itself, but anchors keep theirs.
  s.at(3, 1, 3, 0) = 1.0;
  s.at(3, 0, 3, 0) = 0.6;
  const std::vector<int> anchors{0, 1, 3};
  const auto map = derive_head_map(s, anchors);
  EXPECT_EQ(map[0], (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(map[1], (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(map[2], (std::vector<int>{2, 0, 1}));
  EXPECT_EQ(map[3], (std::vector<int>{0, 1, 2}));
  EXPECT_NEAR(s.layer_similarity(1, 2), (0.9 + 0.8 + 0.7) / 3, 1e-15);
}

// ---------------------------------------------------------------------------
// The calibration strategy against a naive reference.

struct Synthetic {
  kascade::Shape shape;
  int64_t n = 0;
  std::vector<std::vector<float>> queries;       // per layer [n][H][d]
  std::vector<std::vector<float>> keys, values;  // per layer [G][n][d]
};

Synthetic random_synthetic(const kascade::Shape& shape, int64_t n, uint32_t seed, float query_scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Synthetic s{shape, n, {}, {}, {}};
  const int64_t d = shape.head_dim;
  for (int l = 0; l < shape.n_layers; ++l) {
    std::vector<float> q(size_t(n * shape.n_heads * d)), k(size_t(shape.n_kv_heads * n * d)), v(k.size());
    for (float& x : q) x = query_scale * normal(rng);
    for (float& x : k) x = normal(rng);
    for (float& x : v) x = normal(rng);
    s.queries.push_back(std::move(q));
    s.keys.push_back(std::move(k));
    s.values.push_back(std::move(v));
  }
  return s;
}

// Runs the strategy over the whole prompt in chunks, layers in order; returns
// the outputs per layer.
std::vector<std::vector<float>> run_strategy(CalibrationStrategy& strategy, const Synthetic& s, int64_t chunk) {
  const int64_t row = int64_t(s.shape.n_heads) * s.shape.head_dim;
  std::vector<std::vector<float>> outputs(size_t(s.shape.n_layers), std::vector<float>(size_t(s.n * row)));
  strategy.reset();
  for (int64_t first = 0; first < s.n; first += chunk) {
    const int64_t count = std::min(chunk, s.n - first);
    for (int l = 0; l < s.shape.n_layers; ++l) {
      attention::Step step;
      step.layer = l;
      step.phase = attention::Phase::Prefill;
      step.queries = s.queries[size_t(l)].data() + first * row;
      step.n_queries = count;
      step.first_position = first;
      step.cache = {attention::KvType::F32, s.keys[size_t(l)].data(), s.values[size_t(l)].data(), s.n};
      step.output = outputs[size_t(l)].data() + first * row;
      strategy.forward(step);
    }
  }
  return outputs;
}

struct Reference {
  HeadSimilarity min_similarity;
  std::vector<double> captured_top_k_sum, captured_budget_sum;
  int64_t top_k_tiles = 0, budget_tiles = 0;
  std::vector<std::vector<double>> outputs;  // per layer [n][H][d]
};

// Pooled post-softmax distribution of one tile and KV head over keys
// [0, s + length): explicit softmax rows in double.
std::vector<double> reference_pooled(const Synthetic& s, int layer, int h, int64_t start, int64_t length,
                                     std::vector<double>* outputs) {
  const int d = s.shape.head_dim, H = s.shape.n_heads, g = s.shape.group();
  const float* keys = s.keys[size_t(layer)].data() + int64_t(h) * s.n * d;
  const float* values = s.values[size_t(layer)].data() + int64_t(h) * s.n * d;
  std::vector<double> pooled(size_t(start + length), 0.0);
  for (int64_t t = 0; t < length; ++t)
    for (int r = 0; r < g; ++r) {
      const float* q = s.queries[size_t(layer)].data() + ((start + t) * H + h * g + r) * d;
      const int64_t visible = start + t + 1;
      std::vector<double> p(static_cast<size_t>(visible));
      double max = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < visible; ++j) {
        double dot = 0;
        for (int i = 0; i < d; ++i) dot += double(q[i]) * double(keys[j * d + i]);
        p[size_t(j)] = dot / std::sqrt(double(d));
        max = std::max(max, p[size_t(j)]);
      }
      double sum = 0;
      for (double& x : p) sum += (x = std::exp(x - max));
      for (int64_t j = 0; j < visible; ++j) pooled[size_t(j)] += p[size_t(j)] / sum;
      double* out = outputs->data() + ((start + t) * H + h * g + r) * d;
      for (int i = 0; i < d; ++i) {
        double acc = 0;
        for (int64_t j = 0; j < visible; ++j) acc += p[size_t(j)] / sum * values[j * d + i];
        out[i] = acc;
      }
    }
  return pooled;
}

// Top-k of pooled[0, s) by a full sort: larger first, ties to the lower index.
std::vector<int> reference_top_k(const std::vector<double>& pooled, int64_t start, int64_t k) {
  std::vector<int> order(static_cast<size_t>(start));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int x, int y) {
    return pooled[size_t(x)] != pooled[size_t(y)] ? pooled[size_t(x)] > pooled[size_t(y)] : x < y;
  });
  order.resize(size_t(std::min(k, start)));
  return order;
}

double reference_budget(int64_t n, double percent, int64_t min_k) {
  return double(std::min<int64_t>(n, std::max<int64_t>(min_k, int64_t(std::floor(percent * double(n) / 100 + 1e-9)))));
}

Reference reference_statistics(const Synthetic& s, const StatisticsSettings& settings) {
  const int L = s.shape.n_layers, G = s.shape.n_kv_heads;
  Reference ref;
  ref.min_similarity = HeadSimilarity(L, G);
  for (double& v : ref.min_similarity.values()) v = std::numeric_limits<double>::infinity();
  ref.captured_top_k_sum.assign(size_t(L) * G, 0.0);
  ref.captured_budget_sum.assign(size_t(L) * G, 0.0);
  ref.outputs.assign(size_t(L), std::vector<double>(size_t(s.n * s.shape.n_heads * s.shape.head_dim)));
  for (int64_t start = 0; start < s.n; start += settings.tile) {
    const int64_t length = std::min(settings.tile, s.n - start);
    const int64_t budget = int64_t(reference_budget(start, settings.budget_percent, settings.min_k));
    ref.top_k_tiles += settings.top_k < start;
    ref.budget_tiles += budget < start;
    std::vector<std::vector<std::vector<int>>> sets(static_cast<size_t>(L));  // [layer][head]
    for (int b = 0; b < L; ++b) {
      std::vector<std::vector<double>> pooled(static_cast<size_t>(G));
      std::vector<double> own_tile(static_cast<size_t>(G)), own_set(static_cast<size_t>(G));
      for (int h = 0; h < G; ++h) {
        pooled[size_t(h)] = reference_pooled(s, b, h, start, length, &ref.outputs[size_t(b)]);
        sets[size_t(b)].push_back(reference_top_k(pooled[size_t(h)], start, settings.top_k));
        double prefix = 0, tile = 0, kept = 0, kept_budget = 0;
        for (int64_t j = 0; j < start; ++j) prefix += pooled[size_t(h)][size_t(j)];
        for (int64_t j = start; j < start + length; ++j) tile += pooled[size_t(h)][size_t(j)];
        for (int j : sets[size_t(b)][size_t(h)]) kept += pooled[size_t(h)][size_t(j)];
        for (int j : reference_top_k(pooled[size_t(h)], start, budget)) kept_budget += pooled[size_t(h)][size_t(j)];
        own_tile[size_t(h)] = tile;
        own_set[size_t(h)] = kept;
        if (settings.top_k < start) ref.captured_top_k_sum[size_t(b) * G + h] += (kept + tile) / (prefix + tile);
        if (budget < start) ref.captured_budget_sum[size_t(b) * G + h] += (kept_budget + tile) / (prefix + tile);
      }
      for (int a = 0; a <= b; ++a)
        for (int hf = 0; hf < G; ++hf)
          for (int h = 0; h < G; ++h) {
            double mass = 0;
            for (int j : sets[size_t(a)][size_t(hf)]) mass += pooled[size_t(h)][size_t(j)];
            const double ratio = (mass + own_tile[size_t(h)]) / (own_set[size_t(h)] + own_tile[size_t(h)]);
            double& minimum = ref.min_similarity.at(a, hf, b, h);
            minimum = std::min(minimum, ratio);
          }
    }
  }
  return ref;
}

TEST(CalibrationStrategy, MatchesNaiveReference) {
  // Odd sizes: 77 tokens (not a multiple of the tile 8), g = 2, d = 16.
  const kascade::Shape shape{4, 4, 2, 16};
  const StatisticsSettings settings{.tile = 8, .top_k = 5, .budget_percent = 25, .min_k = 4};
  // Larger queries make attention peaky, as in real models.
  const Synthetic s = random_synthetic(shape, 77, 11, 2.0f);
  CalibrationStrategy strategy(shape, settings);
  const auto outputs = run_strategy(strategy, s, 24);
  const PromptStatistics& got = strategy.prompt_statistics();
  const Reference want = reference_statistics(s, settings);

  EXPECT_EQ(got.n_tiles, 10);
  EXPECT_EQ(got.top_k_tiles, want.top_k_tiles);
  EXPECT_EQ(got.budget_tiles, want.budget_tiles);
  for (int a = 0; a < shape.n_layers; ++a)
    for (int hf = 0; hf < shape.n_kv_heads; ++hf)
      for (int b = a; b < shape.n_layers; ++b)
        for (int h = 0; h < shape.n_kv_heads; ++h)
          EXPECT_NEAR(got.min_similarity.at(a, hf, b, h), want.min_similarity.at(a, hf, b, h), 2e-5)
              << "S(" << a << "," << hf << " -> " << b << "," << h << ")";
  for (size_t i = 0; i < want.captured_top_k_sum.size(); ++i) {
    EXPECT_NEAR(got.captured_top_k_sum[i], want.captured_top_k_sum[i], 1e-4) << i;
    EXPECT_NEAR(got.captured_budget_sum[i], want.captured_budget_sum[i], 1e-4) << i;
  }
  // The output is dense attention.
  for (int l = 0; l < shape.n_layers; ++l)
    for (size_t i = 0; i < outputs[size_t(l)].size(); ++i)
      ASSERT_NEAR(outputs[size_t(l)][i], want.outputs[size_t(l)][i], 2e-5) << "layer " << l << " element " << i;
  // Some similarities are well below 1, so the comparison above is not vacuous.
  EXPECT_LT(*std::min_element(got.min_similarity.values().begin(), got.min_similarity.values().end()), 0.9);
}

// A prompt one token shorter than shortest_measured_prompt measures nothing
// (every tile's prefix is kept whole: every similarity is 1); one of that
// length has a tile that drops keys.
TEST(CalibrationStrategy, ShortestMeasuredPromptIsTheFirstToDropKeys) {
  const kascade::Shape shape{3, 4, 2, 16};
  const struct {
    StatisticsSettings settings;
    int64_t shortest;  // the first tile start past top_k, plus one token
  } cases[] = {{{.tile = 8, .top_k = 5}, 9}, {{.tile = 8, .top_k = 8}, 17}, {{.tile = 4, .top_k = 10}, 13},
               {{.tile = 32, .top_k = 32}, 65}};
  for (const auto& c : cases) {
    SCOPED_TRACE(testing::Message() << "tile " << c.settings.tile << ", top-k " << c.settings.top_k);
    EXPECT_EQ(shortest_measured_prompt(c.settings), c.shortest);
    CalibrationStrategy strategy(shape, c.settings);
    run_strategy(strategy, random_synthetic(shape, c.shortest - 1, 4, 2.0f), c.shortest);
    EXPECT_EQ(strategy.prompt_statistics().top_k_tiles, 0);
    const HeadSimilarity& similarity = strategy.prompt_statistics().min_similarity;
    for (int a = 0; a < shape.n_layers; ++a)
      for (int hf = 0; hf < shape.n_kv_heads; ++hf)
        for (int b = a; b < shape.n_layers; ++b)
          for (int h = 0; h < shape.n_kv_heads; ++h) ASSERT_EQ(similarity.at(a, hf, b, h), 1.0);
    run_strategy(strategy, random_synthetic(shape, c.shortest, 4, 2.0f), c.shortest);
    EXPECT_EQ(strategy.prompt_statistics().top_k_tiles, 1);
  }
}

TEST(CalibrationStrategy, ChunkingDoesNotChangeTheStatistics) {
  const kascade::Shape shape{3, 6, 2, 32};
  const StatisticsSettings settings{.tile = 16, .top_k = 8, .budget_percent = 10, .min_k = 16};
  const Synthetic s = random_synthetic(shape, 150, 5, 1.5f);
  CalibrationStrategy one(shape, settings), many(shape, settings);
  run_strategy(one, s, 150);
  run_strategy(many, s, 32);
  const PromptStatistics &a = one.prompt_statistics(), &b = many.prompt_statistics();
  EXPECT_TRUE(std::ranges::equal(a.min_similarity.values(), b.min_similarity.values()));
  EXPECT_EQ(a.captured_top_k_sum, b.captured_top_k_sum);
  EXPECT_EQ(a.captured_budget_sum, b.captured_budget_sum);
  // reset() starts over: a second run gives the same numbers.
  run_strategy(one, s, 64);
  EXPECT_TRUE(std::ranges::equal(a.min_similarity.values(), b.min_similarity.values()));
}

TEST(CalibrationStrategy, AgreeingSetsScoreOneAndHeadSwapsAreFound) {
  // Layer 1 repeats layer 0; layer 2 is layer 0 with its two KV heads (and
  // their query groups) swapped; layer 3 is unrelated.
  const kascade::Shape shape{4, 4, 2, 16};
  const int64_t n = 100, d = 16, g = 2;
  Synthetic s = random_synthetic(shape, n, 3, 2.0f);
  s.queries[1] = s.queries[0];
  s.keys[1] = s.keys[0];
  s.values[1] = s.values[0];
  for (int64_t p = 0; p < n; ++p)
    for (int h = 0; h < 2; ++h)
      std::copy_n(s.queries[0].begin() + (p * 4 + h * g) * d, g * d, s.queries[2].begin() + (p * 4 + (1 - h) * g) * d);
  for (int h = 0; h < 2; ++h) {
    std::copy_n(s.keys[0].begin() + h * n * d, n * d, s.keys[2].begin() + (1 - h) * n * d);
    std::copy_n(s.values[0].begin() + h * n * d, n * d, s.values[2].begin() + (1 - h) * n * d);
  }
  CalibrationStrategy strategy(shape, {.tile = 8, .top_k = 6, .budget_percent = 10, .min_k = 8});
  run_strategy(strategy, s, 40);
  const HeadSimilarity& S = strategy.prompt_statistics().min_similarity;
  for (int h = 0; h < 2; ++h) {
    EXPECT_EQ(S.at(0, h, 1, h), 1.0);
    EXPECT_EQ(S.at(0, 1 - h, 2, h), 1.0);
    EXPECT_EQ(S.at(1, 1 - h, 2, h), 1.0);
    EXPECT_LT(S.at(0, h, 2, h), 1.0);
    EXPECT_LT(S.at(0, h, 3, h), 1.0);
  }
  EXPECT_EQ(S.layer_similarity(0, 1), 1.0);
  EXPECT_EQ(S.layer_similarity(0, 2), 1.0);
  EXPECT_LT(S.layer_similarity(0, 3), 1.0);
  const auto map = derive_head_map(S, std::vector<int>{0});
  EXPECT_EQ(map[1], (std::vector<int>{0, 1}));
  EXPECT_EQ(map[2], (std::vector<int>{1, 0}));
}

TEST(CalibrationStrategy, RejectsWhatItCannotMeasure) {
  const kascade::Shape shape{2, 2, 1, 8};
  const Synthetic s = random_synthetic(shape, 16, 1, 1.0f);
  std::vector<float> out(16 * 2 * 8);
  CalibrationStrategy strategy(shape, {.tile = 4, .top_k = 2});
  attention::Step step;
  step.queries = s.queries[0].data();
  step.n_queries = 16;
  step.cache = {attention::KvType::F32, s.keys[0].data(), s.values[0].data(), 16};
  step.output = out.data();
  step.layer = 1;  // layer 0 has not run
  EXPECT_THROW(strategy.forward(step), Error);
  step.layer = 0;
  step.phase = attention::Phase::Decode;
  EXPECT_THROW(strategy.forward(step), Error);
  step.phase = attention::Phase::Prefill;
  step.cache.type = attention::KvType::F16;
  EXPECT_THROW(strategy.forward(step), Error);
  step.cache.type = attention::KvType::F32;
  step.first_position = 2;  // off the tile grid
  step.n_queries = 14;
  EXPECT_THROW(strategy.forward(step), Error);
  EXPECT_THROW(CalibrationStrategy(shape, {.tile = 0}), Error);
  EXPECT_THROW(CalibrationStrategy(shape, {.top_k = 0}), Error);
  EXPECT_THROW(CalibrationStrategy(shape, {.budget_percent = 0}), Error);
}

// ---------------------------------------------------------------------------
// Layer importance.

TEST(Importance, OneMinusCosineOfTheResidualUpdate) {
  const float x[2] = {1, 0}, a[2] = {0, 1}, zero[2] = {0, 0}, back[2] = {-1, 0};
  EXPECT_NEAR(attention_update_importance(x, a, 2), 1 - 1 / std::sqrt(2.0), 1e-12);
  EXPECT_EQ(attention_update_importance(x, zero, 2), 0.0);
  EXPECT_EQ(attention_update_importance(x, back, 2), 1.0);  // x + a = 0: no direction left
  EXPECT_EQ(attention_update_importance(zero, zero, 2), 0.0);
  ImportanceObserver observer(2);
  const float xs[4] = {1, 0, 1, 0}, as[4] = {0, 1, 0, 0};
  observer.on_attention_output(1, xs, as, 2, 2);
  observer.on_attention_output(1, x, zero, 1, 2);
  const std::vector<double> w = observer.prompt_importance();
  EXPECT_EQ(w[0], 0.0);
  EXPECT_NEAR(w[1], (1 - 1 / std::sqrt(2.0)) / 3, 1e-12);
  observer.reset();
  EXPECT_EQ(observer.prompt_importance()[1], 0.0);
}

// ---------------------------------------------------------------------------
// Development sets.

TEST(DevSet, ParsesDocumentsAndComments) {
  const auto docs = parse_dev_set("# comment\n\n@@@ document: a.txt\nline 1\nline 2\n@@@ document: b\r\nx", "t");
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0].source, "a.txt");
  EXPECT_EQ(docs[0].text, "line 1\nline 2\n");
  EXPECT_EQ(docs[1].source, "b");
  EXPECT_EQ(docs[1].text, "x");
}

TEST(DevSet, RejectsMalformedFiles) {
  EXPECT_THROW(parse_dev_set("", "t"), Error);
  EXPECT_THROW(parse_dev_set("# only comments\n", "t"), Error);
  EXPECT_THROW(parse_dev_set("text first\n@@@ document: a\nx\n", "t"), Error);
  EXPECT_THROW(parse_dev_set("@@@ document: a\n\n@@@ document: b\nx\n", "t"), Error);
  EXPECT_THROW(parse_dev_set("@@@ document: \nx\n", "t"), Error);
  EXPECT_THROW(load_dev_set("/nonexistent/devset.txt"), Error);
  try {
    parse_dev_set("@@@ document: a\nx\n@@@ document: b\n \n", "set.txt");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'set.txt' line 3"), std::string::npos) << e.what();
  }
}

TEST(DevSet, BuiltinSetMatchesItsSourceList) {
  const std::string dir = std::string(KASCADE_SOURCE_DIR) + "/data/devset/";
  const auto docs = load_dev_set(dir + "devset.txt");
  std::ifstream sources(dir + "sources.txt");
  std::vector<std::string> listed;
  for (std::string line; std::getline(sources, line);)
    if (!line.empty() && line[0] != '#') listed.push_back(line.substr(0, line.find(' ')));
  ASSERT_EQ(docs.size(), listed.size());
  for (size_t i = 0; i < docs.size(); ++i) {
    EXPECT_EQ(docs[i].source, listed[i]);
    EXPECT_GT(docs[i].text.size(), 5000u) << docs[i].source;
  }
}

// ---------------------------------------------------------------------------
// End to end on the default model.

TEST(Calibrate, DefaultModelIsReproducibleAndConsistent) {
  if (!std::filesystem::exists(default_model_path())) GTEST_SKIP() << "no model at " << default_model_path();
  const model::Model model = model::Model::load(default_model_path());
  const tokenizer::Tokenizer tokenizer(model.file());
  const auto docs = load_dev_set(std::string(KASCADE_SOURCE_DIR) + "/data/devset/devset.txt");
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 2; ++i) {
    std::vector<int32_t> tokens = tokenizer.encode(docs[size_t(i)].text);
    tokens.resize(100);  // not a multiple of the tile
    prompts.push_back(tokens);
  }
  CalibrationOptions options;
  options.chunk_size = 64;
  const CalibrationResult first = calibrate(model, prompts, options);
  const CalibrationResult second = calibrate(model, prompts, options);
  const int L = model.config().n_layers;
  ASSERT_EQ(first.solutions.size(), 6u);
  EXPECT_TRUE(std::ranges::equal(first.head_similarity.values(), second.head_similarity.values()));
  EXPECT_EQ(first.importance, second.importance);
  EXPECT_EQ(first.captured_top_k, second.captured_top_k);
  for (int l = 0; l < L; ++l) {
    EXPECT_GT(first.importance[size_t(l)], 0.0);
    EXPECT_LT(first.importance[size_t(l)], 2.0);
    EXPECT_EQ(first.layer_similarity[size_t(l) * L + l], 1.0);
  }
  for (const AnchorSolution& s : first.solutions) {
    EXPECT_EQ(s.anchors[0], 0);
    EXPECT_LE(s.normalized_score, 1.0 + 1e-12);
    EXPECT_GT(s.normalized_score, 0.0);
    for (int a : s.anchors)
      for (int h = 0; h < model.config().n_kv_heads; ++h) EXPECT_EQ(s.head_map[size_t(a)][size_t(h)], h);
  }

  // The profile is valid for the model, and its JSON is the same both times.
  const DevSetInfo dev{"test", content_fingerprint("x"), 100};
  const kascade::KascadeProfile profile = make_profile(first, options, 5, model.config(), model.file(), dev);
  EXPECT_NO_THROW(kascade::validate_profile(profile, model.config().attention_shape()));
  EXPECT_EQ(profile.anchors, first.solution(5).anchors);
  EXPECT_EQ(kascade::profile_to_json(profile).dump(),
            kascade::profile_to_json(make_profile(second, options, 5, model.config(), model.file(), dev)).dump());
  EXPECT_EQ(statistics_json(first, options, 5, model.config(), model.file(), dev).dump(),
            statistics_json(second, options, 5, model.config(), model.file(), dev).dump());

  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "kascade_calibration_test_plots";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  write_plots(first, options, 5, "test", dir.string());
  for (const char* name : {"similarity.png", "importance.png", "sparsity.png", "anchor_scores.png"})
    EXPECT_GT(std::filesystem::file_size(dir / name), 1000u) << name;
  std::filesystem::remove_all(dir);
}

// A model with sliding-window layers: Kascade attends only its global
// layers, so the profile must describe those and load for the model.
TEST(Calibrate, ProfileOfASlidingWindowModelCoversItsGlobalLayers) {
  const model::Model model =
      model::Model::load(std::string(KASCADE_SOURCE_DIR) + "/tests/data/logits_gemma3/tiny_gemma3.gguf");
  const kascade::Shape shape = model.config().attention_shape();
  ASSERT_EQ(shape.n_layers, 2);  // 12 layers, every sixth global
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> token(0, model.config().vocab_size - 1);
  std::vector<std::vector<int32_t>> prompts(2, std::vector<int32_t>(90));
  for (auto& prompt : prompts)
    for (int32_t& t : prompt) t = token(rng);
  CalibrationOptions options;
  options.min_anchors = 1;
  options.max_anchors = 2;
  const CalibrationResult result = calibrate(model, prompts, options);
  const kascade::KascadeProfile profile =
      make_profile(result, options, 1, model.config(), model.file(), DevSetInfo{"test", content_fingerprint("x"), 90});
  EXPECT_EQ(profile.model.n_layers, 2);
  EXPECT_EQ(profile.anchors, std::vector<int>{0});
  EXPECT_NO_THROW(kascade::validate_profile(profile, shape));
  options.max_anchors = 3;
  EXPECT_THROW(calibrate(model, prompts, options), Error);

  // The reuse floor decides layer 1's role from sim(0, 1), and the profile says so.
  options.max_anchors = 2;
  CalibrationResult solved = result;
  const double keeps = result.layer_similarity[1];  // sim(0, 1)
  ASSERT_GT(keeps, 0.0);
  ASSERT_LT(keeps, 1.0);
  for (const double floor : {keeps, std::nextafter(keeps, 2.0)}) {
    options.reuse_floor = floor;
    solve_anchors(solved, options);
    const kascade::KascadeProfile floored =
        make_profile(solved, options, 1, model.config(), model.file(), DevSetInfo{"test", content_fingerprint("x"), 90});
    EXPECT_NO_THROW(kascade::validate_profile(floored, shape));
    const bool reuse = floor <= keeps;
    EXPECT_EQ(floored.anchors, reuse ? std::vector<int>({0}) : std::vector<int>({0, 1}));
    EXPECT_EQ(floored.calibration.reuse_floor, floor);
    ASSERT_EQ(floored.roles.size(), 2u);
    EXPECT_TRUE(floored.roles[0].anchor);
    EXPECT_EQ(floored.roles[1].anchor, !reuse);
    EXPECT_EQ(floored.roles[1].reads, reuse ? 0 : 1);
    EXPECT_EQ(floored.roles[1].keeps, keeps);
    EXPECT_NE(floored.roles[1].why.find(reuse ? "reuses layer 0" : "below the floor"), std::string::npos)
        << floored.roles[1].why;
    const kascade::KascadeProfile loaded = kascade::profile_from_json(kascade::profile_to_json(floored), "test");
    EXPECT_EQ(loaded.roles[1].why, floored.roles[1].why);
  }
}

TEST(Calibrate, RejectsBadOptions) {
  CalibrationOptions options;
  EXPECT_NO_THROW(validate(options, 30));
  options.max_anchors = 31;
  EXPECT_THROW(validate(options, 30), Error);
  options = {};
  options.min_anchors = 0;
  EXPECT_THROW(validate(options, 30), Error);
  options = {};
  options.min_anchors = 6;
  options.max_anchors = 5;
  EXPECT_THROW(validate(options, 30), Error);
  options = {};
  options.reuse_floor = 1.5;
  EXPECT_THROW(validate(options, 30), Error);
  options.reuse_floor = std::nan("");
  EXPECT_THROW(validate(options, 30), Error);
  options.reuse_floor = 0.9;
  EXPECT_NO_THROW(validate(options, 30));
}

}  // namespace
}  // namespace kascade::calibration
