// The statistics Kascade calibration collects from the dense model
// (KASCADE.md, "Calibration"), gathered while the model runs:
//  - CalibrationStrategy: an attention strategy whose output is exact dense
//    attention (the dense model is what is calibrated) and which, for every
//    prefill query tile x of T tokens and every layer b, pools the tile's
//    post-softmax rows per KV head, keeps the top-k set of the prefix [0, s),
//    and scores every earlier layer's sets against it:
//      S_x(a,h'->b,h) = (mass of b,h on a,h' 's set + own-tile mass)
//                     / (mass of b,h on its own set + own-tile mass).
//    Per prompt it keeps the minimum over tiles and the mass the top-k keeps.
//  - ImportanceObserver: layer importance w_b = 1 - cos(x_b, x_b + attn_out_b).
// Memory per prompt is the k indices per (layer, KV head, tile) plus one
// tile's pooled rows per thread; no N x N matrix exists.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "attention/attention.h"
#include "calibration/anchor_search.h"
#include "model/model.h"

namespace kascade::calibration {

struct StatisticsSettings {
  int64_t tile = 32;           // T: prefill query tile
  int64_t top_k = 32;          // calibration budget: keys a tile keeps from its prefix
  // A second sparsity measurement at the budget Kascade runs with:
  // budget(s) = min(s, max(min_k, floor(percent * s / 100))) keys of the prefix.
  double budget_percent = 10;
  int64_t min_k = 128;
};

// Throws Error naming the setting that is out of range.
void validate(const StatisticsSettings& settings);

// The fewest tokens a prompt needs to measure anything: a tile must start
// past top_k keys (a shorter prefix is kept whole, so every similarity of
// every tile would be 1).
int64_t shortest_measured_prompt(const StatisticsSettings& settings);

// What one prompt contributes to the calibration.
struct PromptStatistics {
  // min over the prompt's tiles of S_x(a,h'->b,h).
  HeadSimilarity min_similarity;
  // Per [layer][kv head], summed over tiles: the fraction of the tile's pooled
  // attention mass that a sparse tile keeps (selected prefix keys + own tile),
  // at the calibration top-k and at budget(s). Only tiles whose selection
  // drops keys count (s > top_k, resp. budget(s) < s); *_tiles counts them.
  std::vector<double> captured_top_k_sum, captured_budget_sum;
  int64_t top_k_tiles = 0, budget_tiles = 0;
  int64_t n_tiles = 0;
};

class CalibrationStrategy final : public attention::Strategy {
 public:
  CalibrationStrategy(const kascade::Shape& shape, const StatisticsSettings& settings);
  ~CalibrationStrategy() override;

  std::string_view name() const override { return "calibration"; }
  int64_t prefill_alignment() const override { return settings_.tile; }
  // Starts a new prompt: forgets the index sets and the statistics.
  void reset() override;
  // Dense output, then the statistics of the step's tiles. Prefill only, with
  // an fp32 cache; chunks must start on the tile grid and layers come in order.
  void forward(const attention::Step& step) override;
  // The statistics alone, of a step another engine attended (the GPU's
  // prefill, engine::Backend::observe_prefill): the same rules, no output.
  void observe(const attention::Step& step);

  // The statistics since the last reset (complete once every layer has run
  // over the whole prompt).
  const PromptStatistics& prompt_statistics() const { return prompt_; }

 private:
  struct TileResult;
  struct ThreadBuffers;
  void begin_prompt(int64_t capacity);
  void collect(const attention::Step& step);
  void measure_tile(const attention::Step& step, int64_t start, int64_t length, TileResult& result,
                    ThreadBuffers& buffers);
  void merge_tile(int layer, const TileResult& result);
  int32_t* index_set(int layer, int kv_head, int64_t tile_index);

  kascade::Shape shape_;
  StatisticsSettings settings_;
  std::unique_ptr<attention::Strategy> dense_;
  PromptStatistics prompt_;
  // Top-k sets of the current prompt: [layer][kv head][tile][top_k] (the
  // first min(top_k, s) entries of a tile's slot are used).
  std::vector<int32_t> index_sets_;
  int64_t max_tiles_ = 0;
  // Tiles each layer has processed in this prompt (layers must come in order).
  std::vector<int64_t> tiles_done_;
  std::vector<TileResult> tile_results_;      // one per tile of the current chunk
  std::vector<ThreadBuffers> thread_buffers_;  // one per thread
};

// Layer importance: for every token of every call, 1 - cos(x_b, x_b + attn_out_b),
// averaged per layer over the tokens of the current prompt.
class ImportanceObserver final : public model::ForwardObserver {
 public:
  explicit ImportanceObserver(int n_layers);
  void on_attention_output(int layer, const float* residual, const float* attention_out,
                           int64_t n_tokens, int d_model) override;
  // Starts a new prompt.
  void reset();
  // Mean over the current prompt's tokens, per layer.
  std::vector<double> prompt_importance() const;

 private:
  std::vector<double> sum_;
  std::vector<int64_t> tokens_;
};

// 1 - cos(x, x + a) in double precision. When x or x + a is zero (no
// direction): 1 if a changed anything, else 0.
double attention_update_importance(const float* x, const float* attention_out, int d_model);

}  // namespace kascade::calibration
