// Kascade calibration of a model (KASCADE.md, "Calibration"): run the dense
// model over development prompts, average the per-prompt statistics
// (tile-minimum head similarities, layer importances, sparsity), and solve the
// anchor dynamic programme for every requested anchor count.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "calibration/anchor_search.h"
#include "calibration/attention_statistics.h"
#include "engine/backend.h"
#include "model/model.h"

namespace kascade::calibration {

struct CalibrationOptions {
  StatisticsSettings statistics;
  int min_anchors = 3;  // solve the programme for every count in [min_anchors, max_anchors]
  int max_anchors = 8;
  int64_t chunk_size = 1024;  // prefill chunk (rounded to the tile)
  // Also solve for the fewest anchors that let every reuse layer keep at
  // least this share of its own top-k mass (fewest_anchors_above).
  std::optional<double> reuse_floor;
};

// Throws Error naming the option that is out of range for a model of n_layers.
void validate(const CalibrationOptions& options, int n_layers);

struct AnchorSolution {
  std::vector<int> anchors;                // ascending, anchors[0] == 0
  std::vector<std::vector<int>> head_map;  // [layer][kv head] -> the anchor's KV head
  double score = 0;                        // sum_j w_j sim(anchor(j), j)
  double normalized_score = 0;             // score / sum_j w_j (1 = every layer as good as dense selection)
};

struct CalibrationResult {
  int n_layers = 0, n_kv_heads = 0;
  int n_prompts = 0;
  std::vector<int64_t> prompt_tokens;
  HeadSimilarity head_similarity;         // S(a,h'->b,h), averaged over prompts
  std::vector<double> layer_similarity;   // sim(a,b), [a][b]
  std::vector<double> importance;         // w_b
  // Mean fraction of a tile's attention mass the sparse tile keeps, [layer][kv head].
  std::vector<double> captured_top_k, captured_budget;
  int64_t top_k_tiles = 0, budget_tiles = 0;  // tiles the sparsity means are over
  std::vector<AnchorSolution> solutions;  // one per anchor count, ascending
  std::optional<AnchorSolution> floor_solution;  // with a reuse floor: fewest_anchors_above's
  const AnchorSolution& solution(int n_anchors) const;
  // The profile's solution: the reuse floor's where there is one, else the
  // programme's for `choose` anchors.
  const AnchorSolution& active(int choose) const { return floor_solution ? *floor_solution : solution(choose); }
};

// Progress: tokens done over all prompts so far.
using CalibrationProgress = std::function<void(int64_t tokens_done)>;

CalibrationResult calibrate(const model::Model& model, std::span<const std::vector<int32_t>> prompts,
                            const CalibrationOptions& options, const CalibrationProgress& progress = {});
// The same statistics from an engine that shows its prefill layer by layer
// (the GPU's, Backend::observe_prefill): it runs the dense model, one prompt
// in one chunk; the statistics and the programme run here, on the host.
CalibrationResult calibrate(engine::Backend& backend, std::span<const std::vector<int32_t>> prompts,
                            const CalibrationOptions& options, const CalibrationProgress& progress = {});

// The averaged statistics -> layer similarity, anchor solutions (used by
// calibrate(); exposed for tests).
void solve_anchors(CalibrationResult& result, const CalibrationOptions& options);

}  // namespace kascade::calibration
