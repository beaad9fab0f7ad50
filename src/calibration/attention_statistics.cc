// Calibration statistics of the dense model's attention (see attention_statistics.h).
#include "calibration/attention_statistics.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "attention/kascade_ops.h"
#include "core/error.h"
#include "kascade/budget.h"
#include "ops/simd.h"

namespace kascade::calibration {

using attention::GroupQueries;

void validate(const StatisticsSettings& settings) {
  if (settings.tile < 1) fail("calibration tile must be at least 1, got {}", settings.tile);
  if (settings.top_k < 1) fail("calibration top-k must be at least 1, got {}", settings.top_k);
  if (!valid_budget_percent(settings.budget_percent))
    fail("calibration budget percent must be in (0, 100], got {}", settings.budget_percent);
  if (settings.min_k < 0) fail("calibration min_k must not be negative, got {}", settings.min_k);
}

int64_t shortest_measured_prompt(const StatisticsSettings& settings) {
  // The first tile start above top_k, and one token of that tile.
  return (settings.top_k / settings.tile + 1) * settings.tile + 1;
}

// The measurements of one tile at one layer, merged serially in tile order so
// the sums do not depend on the thread schedule.
struct CalibrationStrategy::TileResult {
  // S_x(a, h' -> b, h) at [(a * G + h') * G + h] for a <= b.
  std::vector<double> similarity;
  std::vector<double> captured_top_k, captured_budget;  // per KV head of b
  bool top_k_drops = false, budget_drops = false;
};

// Work buffers of one thread: one tile's pooled prefix distribution per KV head.
struct CalibrationStrategy::ThreadBuffers {
  std::vector<float> pooled;  // [kv head][s]
  std::vector<float> lse;     // [t * g + r]
  std::vector<int32_t> budget_indices;
  std::vector<double> own_tile_mass, own_set_mass;  // per KV head
};

CalibrationStrategy::CalibrationStrategy(const kascade::Shape& shape,
                                         const StatisticsSettings& settings)
    : shape_(shape), settings_(settings), dense_(attention::make_dense(shape)) {
  validate(settings);
  reset();
}

CalibrationStrategy::~CalibrationStrategy() = default;

void CalibrationStrategy::reset() {
  const int L = shape_.n_layers, G = shape_.n_kv_heads;
  prompt_ = PromptStatistics{};
  prompt_.min_similarity = HeadSimilarity(L, G);
  prompt_.captured_top_k_sum.assign(size_t(L) * G, 0.0);
  prompt_.captured_budget_sum.assign(size_t(L) * G, 0.0);
  // Every S_x is at most 1; the first tile lowers the minimum from here.
  for (int a = 0; a < L; ++a)
    for (int hf = 0; hf < G; ++hf)
      for (int b = a; b < L; ++b)
        for (int h = 0; h < G; ++h) prompt_.min_similarity.at(a, hf, b, h) = 1.0;
  tiles_done_.assign(size_t(L), 0);
  index_sets_.clear();
  max_tiles_ = 0;
}

void CalibrationStrategy::begin_prompt(int64_t capacity) {
  max_tiles_ = (capacity + settings_.tile - 1) / settings_.tile;
  index_sets_.assign(size_t(shape_.n_layers) * shape_.n_kv_heads * max_tiles_ * settings_.top_k, 0);
}

int32_t* CalibrationStrategy::index_set(int layer, int kv_head, int64_t tile_index) {
  return index_sets_.data() +
         ((int64_t(layer) * shape_.n_kv_heads + kv_head) * max_tiles_ + tile_index) * settings_.top_k;
}

namespace {

void require_measurable(const attention::Step& step) {
  if (step.phase != attention::Phase::Prefill)
    fail("calibration runs prefill only (layer {} got a decode step)", step.layer);
  if (step.cache.type != attention::KvType::F32) fail("calibration needs an fp32 KV cache");
}

}  // namespace

void CalibrationStrategy::forward(const attention::Step& step) {
  require_measurable(step);
  dense_->forward(step);  // validates the step
  collect(step);
}

void CalibrationStrategy::observe(const attention::Step& step) {
  require_measurable(step);
  collect(step);
}

void CalibrationStrategy::collect(const attention::Step& step) {
  const int64_t T = settings_.tile;
  const int layer = step.layer;
  if (step.first_position % T != 0)
    fail("calibration chunk starts at position {}, not a multiple of the tile {}", step.first_position, T);
  const int64_t first_tile = step.first_position / T;
  const int64_t n_tiles = (step.n_queries + T - 1) / T;
  // Layer b scores the sets earlier layers stored for the same tiles.
  const bool in_order = tiles_done_[size_t(layer)] == first_tile &&
                        (layer == 0 || tiles_done_[size_t(layer) - 1] >= first_tile + n_tiles);
  if (!in_order)
    fail("calibration needs every layer of a chunk in order from position 0 (layer {} at position {})",
         layer, step.first_position);
  if (layer == 0 && step.first_position == 0) begin_prompt(step.cache.capacity);
  if (step.cache.capacity > max_tiles_ * T) fail("calibration: the KV cache grew within a prompt");

  if (int64_t(tile_results_.size()) < n_tiles) tile_results_.resize(size_t(n_tiles));
  const int n_threads = std::max(1, omp_get_max_threads());
  if (int(thread_buffers_.size()) < n_threads) thread_buffers_.resize(size_t(n_threads));

#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n_tiles; ++i) {
    const int64_t start = step.first_position + i * T;
    const int64_t length = std::min(T, step.first_position + step.n_queries - start);
    measure_tile(step, start, length, tile_results_[size_t(i)], thread_buffers_[size_t(omp_get_thread_num())]);
  }
  for (int64_t i = 0; i < n_tiles; ++i) merge_tile(layer, tile_results_[size_t(i)]);
  tiles_done_[size_t(layer)] += n_tiles;
}

namespace {

// Sum of pooled[j] over the set, accumulated in double in index order.
double set_mass(const float* pooled, const int32_t* set, int64_t count) {
  double mass = 0;
  for (int64_t i = 0; i < count; ++i) mass += pooled[set[i]];
  return mass;
}

// The pooled mass the tile's rows put on its own keys [s, s + t] (causal).
double own_tile_mass(const GroupQueries& queries, const float* keys, int head_dim, const float* lse) {
  const double scale = 1.0 / std::sqrt(double(head_dim));
  double mass = 0;
  for (int64_t t = 0; t < queries.n_positions; ++t)
    for (int r = 0; r < queries.group; ++r) {
      const float* q = queries.row(t, r);
      for (int64_t j = queries.first_position; j <= queries.first_position + t; ++j)
        mass += std::exp(scale * ops::dot_f32(q, keys + j * head_dim, head_dim) - lse[t * queries.group + r]);
    }
  return mass;
}

// (mass on the set + own tile) / (mass on b's own set + own tile); 1 when
// nothing is kept at all. At most 1: b's own top-k is the heaviest set.
double similarity_ratio(double set_mass, double own_set_mass, double own_tile) {
  const double denominator = own_set_mass + own_tile;
  if (denominator <= 0) return 1.0;
  return std::min(1.0, (set_mass + own_tile) / denominator);
}

}  // namespace

void CalibrationStrategy::measure_tile(const attention::Step& step, int64_t start, int64_t length,
                                       TileResult& result, ThreadBuffers& buffers) {
  const int G = shape_.n_kv_heads, g = shape_.group(), d = shape_.head_dim;
  const int layer = step.layer;
  const int64_t tile_index = start / settings_.tile;
  const int64_t kept = std::min(settings_.top_k, start);
  const int64_t budget = kascade::budget(start, settings_.budget_percent, settings_.min_k);
  const float* all_keys = static_cast<const float*>(step.cache.keys);

  result.top_k_drops = kept < start;
  result.budget_drops = budget < start;
  result.captured_top_k.assign(size_t(G), 0.0);
  result.captured_budget.assign(size_t(G), 0.0);
  buffers.pooled.assign(size_t(G) * start, 0.0f);
  buffers.lse.resize(size_t(length * g));
  buffers.budget_indices.resize(size_t(budget));
  buffers.own_tile_mass.assign(size_t(G), 0.0);
  buffers.own_set_mass.assign(size_t(G), 0.0);

  for (int h = 0; h < G; ++h) {
    const GroupQueries queries{step.queries + ((start - step.first_position) * shape_.n_heads + h * g) * d,
                               length, g, int64_t(shape_.n_heads) * d, d, start};
    const float* keys = all_keys + int64_t(h) * step.cache.capacity * d;
    float* pooled = buffers.pooled.data() + int64_t(h) * start;
    attention::row_lse(queries, keys, d, d, buffers.lse.data());
    if (start > 0)
      attention::pool_scores(queries, keys, d, d, buffers.lse.data(), start,
                             attention::Pooling::PostSoftmax, pooled);
    const double own_tile = own_tile_mass(queries, keys, d, buffers.lse.data());
    double prefix = 0;
    for (int64_t j = 0; j < start; ++j) prefix += pooled[j];

    int32_t* set = index_set(layer, h, tile_index);
    attention::select_top_k(pooled, start, kept, set);
    const double own_set = set_mass(pooled, set, kept);
    const double total = prefix + own_tile;
    buffers.own_tile_mass[size_t(h)] = own_tile;
    buffers.own_set_mass[size_t(h)] = own_set;
    if (total > 0) {
      result.captured_top_k[size_t(h)] = (own_set + own_tile) / total;
      if (result.budget_drops) {
        attention::select_top_k(pooled, start, budget, buffers.budget_indices.data());
        result.captured_budget[size_t(h)] =
            (set_mass(pooled, buffers.budget_indices.data(), budget) + own_tile) / total;
      } else {
        result.captured_budget[size_t(h)] = 1.0;
      }
    }
  }

  // Every earlier layer's sets (and this layer's other heads) against b's pooled mass.
  result.similarity.assign(size_t(layer + 1) * G * G, 1.0);
  for (int a = 0; a <= layer; ++a)
    for (int hf = 0; hf < G; ++hf) {
      const int32_t* set = index_set(a, hf, tile_index);
      for (int h = 0; h < G; ++h) {
        if (a == layer && hf == h) continue;  // b's own set: exactly 1
        const float* pooled = buffers.pooled.data() + int64_t(h) * start;
        result.similarity[(size_t(a) * G + hf) * G + h] =
            similarity_ratio(set_mass(pooled, set, kept), buffers.own_set_mass[size_t(h)],
                             buffers.own_tile_mass[size_t(h)]);
      }
    }
}

void CalibrationStrategy::merge_tile(int layer, const TileResult& result) {
  const int G = shape_.n_kv_heads;
  for (int a = 0; a <= layer; ++a)
    for (int hf = 0; hf < G; ++hf)
      for (int h = 0; h < G; ++h) {
        double& minimum = prompt_.min_similarity.at(a, hf, layer, h);
        minimum = std::min(minimum, result.similarity[(size_t(a) * G + hf) * G + h]);
      }
  for (int h = 0; h < G; ++h) {
    const size_t slot = size_t(layer) * G + h;
    if (result.top_k_drops) prompt_.captured_top_k_sum[slot] += result.captured_top_k[size_t(h)];
    if (result.budget_drops) prompt_.captured_budget_sum[slot] += result.captured_budget[size_t(h)];
  }
  if (layer == 0) {
    ++prompt_.n_tiles;
    prompt_.top_k_tiles += result.top_k_drops;
    prompt_.budget_tiles += result.budget_drops;
  }
}

double attention_update_importance(const float* x, const float* attention_out, int d_model) {
  double dot = 0, norm_x = 0, norm_y = 0, norm_a = 0;
  for (int i = 0; i < d_model; ++i) {
    const double xi = x[i], ai = attention_out[i], yi = xi + ai;
    dot += xi * yi;
    norm_x += xi * xi;
    norm_y += yi * yi;
    norm_a += ai * ai;
  }
  // A zero vector has no direction: count it as orthogonal when the update changed anything.
  if (norm_x <= 0 || norm_y <= 0) return norm_a > 0 ? 1.0 : 0.0;
  return 1.0 - dot / std::sqrt(norm_x * norm_y);
}

ImportanceObserver::ImportanceObserver(int n_layers)
    : sum_(size_t(n_layers), 0.0), tokens_(size_t(n_layers), 0) {}

void ImportanceObserver::reset() {
  std::fill(sum_.begin(), sum_.end(), 0.0);
  std::fill(tokens_.begin(), tokens_.end(), 0);
}

void ImportanceObserver::on_attention_output(int layer, const float* residual, const float* attention_out,
                                             int64_t n_tokens, int d_model) {
  if (layer < 0 || layer >= int(sum_.size())) fail("importance observer: layer {} out of range", layer);
  for (int64_t t = 0; t < n_tokens; ++t)
    sum_[size_t(layer)] += attention_update_importance(residual + t * d_model, attention_out + t * d_model, d_model);
  tokens_[size_t(layer)] += n_tokens;
}

std::vector<double> ImportanceObserver::prompt_importance() const {
  std::vector<double> mean(sum_.size(), 0.0);
  for (size_t l = 0; l < sum_.size(); ++l)
    if (tokens_[l] > 0) mean[l] = sum_[l] / double(tokens_[l]);
  return mean;
}

}  // namespace kascade::calibration
