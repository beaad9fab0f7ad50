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

namespace {

// Throws for an empty prompt list, an empty prompt or one past the context;
// returns the longest prompt's length.
int64_t check_prompts(std::span<const std::vector<int32_t>> prompts, int64_t context_length) {
  if (prompts.empty()) fail("calibration needs at least one prompt");
  int64_t longest = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t n = int64_t(prompts[i].size());
    if (n == 0) fail("calibration prompt {} is empty", i);
    if (n > context_length)
      fail("calibration prompt {} has {} tokens, more than the model's context of {}", i, n, context_length);
    longest = std::max(longest, n);
  }
  return longest;
}

CalibrationResult empty_result(const kascade::Shape& shape, int n_prompts) {
  const int L = shape.n_layers, G = shape.n_kv_heads;
  CalibrationResult result;
  result.n_layers = L;
  result.n_kv_heads = G;
  result.n_prompts = n_prompts;
  result.head_similarity = HeadSimilarity(L, G);
  result.importance.assign(size_t(L), 0.0);
  result.captured_top_k.assign(size_t(L) * G, 0.0);
  result.captured_budget.assign(size_t(L) * G, 0.0);
  return result;
}

// Adds one prompt's statistics to the sums.
void add_prompt(CalibrationResult& result, const PromptStatistics& stats, const ImportanceObserver& importance,
                int64_t prompt_tokens) {
  std::span<double> sum = result.head_similarity.values();
  std::span<const double> minimum = stats.min_similarity.values();
  for (size_t i = 0; i < sum.size(); ++i) sum[i] += minimum[i];
  const std::vector<double> prompt_importance = importance.prompt_importance();
  for (size_t l = 0; l < result.importance.size(); ++l) result.importance[l] += prompt_importance[l];
  for (size_t i = 0; i < result.captured_top_k.size(); ++i) {
    result.captured_top_k[i] += stats.captured_top_k_sum[i];
    result.captured_budget[i] += stats.captured_budget_sum[i];
  }
  result.top_k_tiles += stats.top_k_tiles;
  result.budget_tiles += stats.budget_tiles;
  result.prompt_tokens.push_back(prompt_tokens);
}

// The sums to means, then the anchor programme.
void finish(CalibrationResult& result, const CalibrationOptions& options) {
  const double n_prompts = double(result.n_prompts);
  for (double& s : result.head_similarity.values()) s /= n_prompts;
  for (double& w : result.importance) w /= n_prompts;
  // With no tile dropping keys the sparse tile keeps everything.
  for (double& c : result.captured_top_k) c = result.top_k_tiles > 0 ? c / double(result.top_k_tiles) : 1.0;
  for (double& c : result.captured_budget) c = result.budget_tiles > 0 ? c / double(result.budget_tiles) : 1.0;
  solve_anchors(result, options);
}

}  // namespace

CalibrationResult calibrate(const model::Model& model, std::span<const std::vector<int32_t>> prompts,
                            const CalibrationOptions& options, const CalibrationProgress& progress) {
  const model::Config& config = model.config();
  const kascade::Shape shape = config.attention_shape();
  validate(options, shape.n_layers);
  const int64_t longest = check_prompts(prompts, config.context_length);

  auto owned_strategy = std::make_unique<CalibrationStrategy>(shape, options.statistics);
  CalibrationStrategy& strategy = *owned_strategy;
  model::Sequence seq = model.new_sequence(longest, attention::KvType::F32, std::move(owned_strategy));
  ImportanceObserver importance(shape.n_layers);
  CalibrationResult result = empty_result(shape, int(prompts.size()));

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
    add_prompt(result, strategy.prompt_statistics(), importance, int64_t(prompt.size()));
  }
  finish(result, options);
  return result;
}

CalibrationResult calibrate(engine::Backend& backend, std::span<const std::vector<int32_t>> prompts,
                            const CalibrationOptions& options, const CalibrationProgress& progress) {
  const model::Config& config = backend.config();
  const kascade::Shape shape = config.attention_shape();
  if (shape.n_layers != config.n_layers)
    fail("calibration through the {} engine needs a model without sliding-window layers", backend.device_name());
  validate(options, shape.n_layers);
  check_prompts(prompts, config.context_length);

  CalibrationStrategy statistics(shape, options.statistics);
  ImportanceObserver importance(shape.n_layers);
  CalibrationResult result = empty_result(shape, int(prompts.size()));
  int64_t tokens_done = 0;
  for (const std::vector<int32_t>& prompt : prompts) {
    statistics.reset();
    importance.reset();
    const int64_t n = int64_t(prompt.size());
    engine::SequenceOptions sequence_options;
    sequence_options.capacity = n;  // dense attention: AttentionOptions' default
    sequence_options.kv_type = attention::KvType::F32;
    const std::unique_ptr<engine::BackendSequence> sequence = backend.new_sequence(sequence_options);
    backend.observe_prefill(*sequence, prompt, [&](const engine::PrefillLayerView& view) {
      attention::Step step;
      step.layer = view.layer;
      step.phase = attention::Phase::Prefill;
      step.queries = view.queries;
      step.n_queries = view.n_tokens;
      step.first_position = view.first_position;
      step.cache = {attention::KvType::F32, view.keys, nullptr, view.key_capacity};
      statistics.observe(step);
      importance.on_attention_output(view.layer, view.residual, view.attention_out, view.n_tokens, config.d_model);
      if (progress) progress(tokens_done + n * (view.layer + 1) / shape.n_layers);
    });
    tokens_done += n;
    add_prompt(result, statistics.prompt_statistics(), importance, n);
  }
  finish(result, options);
  return result;
}

}  // namespace kascade::calibration
