// Kascade calibration of a model over development prompts (see calibrate.h).
#include "calibration/calibrate.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace kascade::calibration {

void validate(const CalibrationOptions& options, int n_layers) {
  validate(options.statistics);
  if (options.min_anchors < 1 || options.min_anchors > options.max_anchors || options.max_anchors > n_layers)
    fail("anchor counts {}..{} must satisfy 1 <= first <= last <= {} (the model's global attention layers)",
         options.min_anchors, options.max_anchors, n_layers);
  if (options.chunk_size < 1) fail("calibration chunk size must be at least 1, got {}", options.chunk_size);
  if (options.reuse_floor && !(*options.reuse_floor >= 0 && *options.reuse_floor <= 1))
    fail("the reuse floor {} is not a share in [0, 1]", *options.reuse_floor);
}

const AnchorSolution& CalibrationResult::solution(int n_anchors) const {
  for (const AnchorSolution& s : solutions)
    if (int(s.anchors.size()) == n_anchors) return s;
  fail("no anchor solution with {} anchors was computed", n_anchors);
}

void solve_anchors(CalibrationResult& result, const CalibrationOptions& options) {
  result.layer_similarity = layer_similarity_matrix(result.head_similarity);
  const double total_weight = std::accumulate(result.importance.begin(), result.importance.end(), 0.0);
  const auto solution = [&](std::vector<int> anchors) {
    AnchorSolution s;
    s.anchors = std::move(anchors);
    s.head_map = derive_head_map(result.head_similarity, s.anchors);
    s.score = anchor_objective(result.layer_similarity, result.importance, s.anchors);
    s.normalized_score = total_weight > 0 ? s.score / total_weight : 0.0;
    return s;
  };
  result.solutions.clear();
  for (int m = options.min_anchors; m <= options.max_anchors; ++m)
    result.solutions.push_back(solution(choose_anchors(result.layer_similarity, result.importance, m)));
  result.floor_solution.reset();
  if (options.reuse_floor)
    result.floor_solution =
        solution(fewest_anchors_above(result.layer_similarity, result.importance, *options.reuse_floor));
}

CalibrationResult calibrate(const model::Model& model, std::span<const std::vector<int32_t>> prompts,
                            const CalibrationOptions& options, const CalibrationProgress& progress) {
  const model::Config& config = model.config();
  const kascade::Shape shape = config.attention_shape();
  const int L = shape.n_layers, G = shape.n_kv_heads;
  validate(options, L);
  if (prompts.empty()) fail("calibration needs at least one prompt");
  int64_t longest = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t n = int64_t(prompts[i].size());
    if (n == 0) fail("calibration prompt {} is empty", i);
    if (n > config.context_length)
      fail("calibration prompt {} has {} tokens, more than the model's context of {}", i, n, config.context_length);
    longest = std::max(longest, n);
  }

  auto owned_strategy = std::make_unique<CalibrationStrategy>(shape, options.statistics);
  CalibrationStrategy& strategy = *owned_strategy;
  model::Sequence seq = model.new_sequence(longest, attention::KvType::F32, std::move(owned_strategy));
  ImportanceObserver importance(L);

  CalibrationResult result;
  result.n_layers = L;
  result.n_kv_heads = G;
  result.n_prompts = int(prompts.size());
  result.head_similarity = HeadSimilarity(L, G);
  result.importance.assign(size_t(L), 0.0);
  result.captured_top_k.assign(size_t(L) * G, 0.0);
  result.captured_budget.assign(size_t(L) * G, 0.0);

  const int64_t tile = options.statistics.tile;
  const int64_t chunk = std::max(tile, options.chunk_size / tile * tile);
  int64_t tokens_done = 0;
  for (const std::vector<int32_t>& prompt : prompts) {
    seq.reset();
    importance.reset();
    const std::span<const int32_t> tokens(prompt);
    for (int64_t done = 0; done < int64_t(tokens.size());) {
      const int64_t count = std::min(chunk, int64_t(tokens.size()) - done);
      model.forward(seq, tokens.subspan(size_t(done), size_t(count)), 0, nullptr, &importance);
      done += count;
      tokens_done += count;
      if (progress) progress(tokens_done);
    }

    const PromptStatistics& stats = strategy.prompt_statistics();
    std::span<double> sum = result.head_similarity.values();
    std::span<const double> minimum = stats.min_similarity.values();
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += minimum[i];
    const std::vector<double> prompt_importance = importance.prompt_importance();
    for (int l = 0; l < L; ++l) result.importance[size_t(l)] += prompt_importance[size_t(l)];
    for (size_t i = 0; i < result.captured_top_k.size(); ++i) {
      result.captured_top_k[i] += stats.captured_top_k_sum[i];
      result.captured_budget[i] += stats.captured_budget_sum[i];
    }
    result.top_k_tiles += stats.top_k_tiles;
    result.budget_tiles += stats.budget_tiles;
    result.prompt_tokens.push_back(int64_t(prompt.size()));
  }

  const double n_prompts = double(prompts.size());
  for (double& s : result.head_similarity.values()) s /= n_prompts;
  for (double& w : result.importance) w /= n_prompts;
  // With no tile dropping keys the sparse tile keeps everything.
  for (double& c : result.captured_top_k) c = result.top_k_tiles > 0 ? c / double(result.top_k_tiles) : 1.0;
  for (double& c : result.captured_budget) c = result.budget_tiles > 0 ? c / double(result.budget_tiles) : 1.0;
  solve_anchors(result, options);
  return result;
}

}  // namespace kascade::calibration
