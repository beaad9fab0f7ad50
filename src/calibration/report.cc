// Calibration outputs: profile, statistics JSON, pictures (see report.h).
#include "calibration/report.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/fingerprint.h"
#include "plot/plot.h"

namespace kascade::calibration {

using nlohmann::json;

std::string content_fingerprint(std::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const char c : bytes) {
    hash ^= uint8_t(c);
    hash *= 0x100000001b3ull;
  }
  return fmt::format("fnv1a64:{:016x}", hash);
}

namespace {

// The shape a profile describes is the strategy's: the global attention
// layers only, for models that also have sliding-window layers.
kascade::ModelIdentity identity_of(const model::Config& c) {
  const kascade::Shape shape = c.attention_shape();
  return {c.architecture_name, c.name, shape.n_layers, shape.n_heads, shape.n_kv_heads, shape.head_dim};
}

std::vector<std::vector<double>> square(const std::vector<double>& values, int n) {
  std::vector<std::vector<double>> rows(static_cast<size_t>(n));
  for (int a = 0; a < n; ++a) rows[size_t(a)].assign(values.begin() + a * n, values.begin() + (a + 1) * n);
  return rows;
}

// [layer][kv head] rows of a flat per-(layer, head) array.
std::vector<std::vector<double>> per_layer_head(const std::vector<double>& values, int n_layers, int n_heads) {
  std::vector<std::vector<double>> rows(static_cast<size_t>(n_layers));
  for (int l = 0; l < n_layers; ++l)
    rows[size_t(l)].assign(values.begin() + l * n_heads, values.begin() + (l + 1) * n_heads);
  return rows;
}

std::string anchor_list(const std::vector<int>& anchors) { return fmt::format("{{{}}}", fmt::join(anchors, ",")); }

// Colour scale from the smallest value (rounded down to 0.1) to 1.
double lower_colour_bound(const std::vector<std::vector<double>>& values) {
  double low = 1.0;
  for (const auto& row : values)
    for (double v : row)
      if (std::isfinite(v)) low = std::min(low, v);
  low = std::floor(low * 10) / 10;
  return std::min(low, 0.9);
}

// Each layer's role and why: the share of its own top-k mass it keeps on the
// previous anchor's sets, against the floor or the programme's choice.
std::vector<kascade::LayerRole> layer_roles(const CalibrationResult& result, const AnchorSolution& chosen,
                                            std::optional<double> floor) {
  const int L = result.n_layers;
  const std::vector<int> owner = anchor_of_each_layer(L, chosen.anchors);
  const std::string rule = floor ? fmt::format("the floor {:.3f}", *floor)
                                 : fmt::format("the best {} anchors' objective", chosen.anchors.size());
  std::vector<kascade::LayerRole> roles(static_cast<size_t>(L));
  int previous = 0;  // the last anchor before j
  for (int j = 0; j < L; ++j) {
    kascade::LayerRole& role = roles[size_t(j)];
    role.anchor = owner[size_t(j)] == j;
    role.reads = owner[size_t(j)];
    if (j == 0) {
      role.why = "layer 0 always selects (its attention is flat)";
      continue;
    }
    const int from = role.anchor ? previous : role.reads;
    const double keeps = result.layer_similarity[size_t(from) * L + j];
    role.keeps = keeps;
    if (role.anchor) {
      role.why = floor ? fmt::format("reusing layer {} would keep {:.3f} of its top-k mass, below {}", from, keeps, rule)
                       : fmt::format("selects: reusing layer {} would keep {:.3f} of its top-k mass ({})", from, keeps,
                                     rule);
      previous = j;
    } else {
      role.why = fmt::format("reuses layer {}: keeps {:.3f} of its top-k mass ({})", from, keeps,
                             floor ? "at least " + rule : rule);
    }
  }
  return roles;
}

}  // namespace

kascade::KascadeProfile make_profile(const CalibrationResult& result, const CalibrationOptions& options,
                                       int chosen_anchors, const model::Config& config, const gguf::File& file,
                                       const DevSetInfo& dev_set) {
  const AnchorSolution& chosen = result.active(chosen_anchors);
  kascade::KascadeProfile profile;
  profile.model = identity_of(config);
  profile.weights_fingerprint = model::weights_fingerprint(file);
  profile.calibration.dev_set = dev_set.name;
  profile.calibration.n_prompts = result.n_prompts;
  profile.calibration.prompt_tokens =
      result.prompt_tokens.empty() ? 0 : *std::max_element(result.prompt_tokens.begin(), result.prompt_tokens.end());
  profile.calibration.selected_keys = options.statistics.top_k;
  profile.calibration.tile = options.statistics.tile;
  profile.calibration.seed = 0;  // calibration draws no random numbers
  profile.calibration.reuse_floor = options.reuse_floor;
  profile.anchors = chosen.anchors;
  profile.head_map = chosen.head_map;
  profile.wide_layers = kascade::default_wide_layers(result.n_layers);
  profile.roles = layer_roles(result, chosen, options.reuse_floor);
  profile.similarity = square(result.layer_similarity, result.n_layers);
  profile.importance = result.importance;
  for (const AnchorSolution& s : result.solutions)
    profile.dp_scores.push_back({int(s.anchors.size()), s.score, s.anchors});
  return profile;
}

json statistics_json(const CalibrationResult& result, const CalibrationOptions& options, int chosen_anchors,
                     const model::Config& config, const gguf::File& file, const DevSetInfo& dev_set) {
  const int L = result.n_layers, G = result.n_kv_heads;
  const kascade::ModelIdentity m = identity_of(config);
  json out;
  out["model"] = {{"architecture", m.architecture}, {"name", m.name},         {"n_layers", m.n_layers},
                  {"n_heads", m.n_heads},           {"n_kv_heads", m.n_kv_heads}, {"head_dim", m.head_dim}};
  out["weights_fingerprint"] = model::weights_fingerprint(file);
  out["dev_set"] = {{"name", dev_set.name},
                    {"fingerprint", dev_set.fingerprint},
                    {"max_tokens", dev_set.max_tokens},
                    {"n_prompts", result.n_prompts},
                    {"prompt_tokens", result.prompt_tokens}};
  const StatisticsSettings& s = options.statistics;
  out["settings"] = {{"tile", s.tile},
                     {"top_k", s.top_k},
                     {"budget_percent", s.budget_percent},
                     {"min_k", s.min_k},
                     {"aggregate_over_tiles", "min"},
                     {"aggregate_over_prompts", "mean"}};
  out["chosen_anchors"] = int(result.active(chosen_anchors).anchors.size());
  if (options.reuse_floor) {
    const AnchorSolution& floor = *result.floor_solution;
    out["reuse_floor"] = {{"floor", *options.reuse_floor},
                          {"anchors", floor.anchors},
                          {"head_map", floor.head_map},
                          {"score", floor.score},
                          {"normalized_score", floor.normalized_score}};
  }
  out["importance"] = result.importance;
  out["layer_similarity"] = square(result.layer_similarity, L);
  // head_similarity[a][h'][b][h] = S(a, h' -> b, h); entries with a > b are 0.
  json heads = json::array();
  for (int a = 0; a < L; ++a) {
    json from_layer = json::array();
    for (int hf = 0; hf < G; ++hf) {
      json from_head = json::array();
      for (int b = 0; b < L; ++b) {
        std::vector<double> to(static_cast<size_t>(G));
        for (int h = 0; h < G; ++h) to[size_t(h)] = result.head_similarity.at(a, hf, b, h);
        from_head.push_back(to);
      }
      from_layer.push_back(from_head);
    }
    heads.push_back(from_layer);
  }
  out["head_similarity"] = heads;
  out["sparsity"] = {
      {"top_k", {{"keys", s.top_k}, {"tiles", result.top_k_tiles}, {"captured", per_layer_head(result.captured_top_k, L, G)}}},
      {"budget",
       {{"percent", s.budget_percent},
        {"min_k", s.min_k},
        {"tiles", result.budget_tiles},
        {"captured", per_layer_head(result.captured_budget, L, G)}}}};
  json solutions = json::array();
  for (const AnchorSolution& solution : result.solutions)
    solutions.push_back({{"n_anchors", solution.anchors.size()},
                         {"anchors", solution.anchors},
                         {"head_map", solution.head_map},
                         {"score", solution.score},
                         {"normalized_score", solution.normalized_score}});
  out["solutions"] = solutions;
  return out;
}

void write_plots(const CalibrationResult& result, const CalibrationOptions& options, int chosen_anchors,
                 const std::string& model_name, const std::string& dir) {
  const int L = result.n_layers, G = result.n_kv_heads;
  const AnchorSolution& chosen = result.active(chosen_anchors);
  std::vector<std::string> layer_labels;
  for (int l = 0; l < L; ++l) layer_labels.push_back(std::to_string(l));

  std::vector<std::vector<double>> similarity = square(result.layer_similarity, L);
  for (int a = 0; a < L; ++a)
    for (int b = 0; b < a; ++b) similarity[size_t(a)][size_t(b)] = std::numeric_limits<double>::quiet_NaN();
  plot::heatmap(dir + "/similarity.png",
                fmt::format("{}: layer similarity sim(a,b), chosen anchors {}", model_name, anchor_list(chosen.anchors)),
                similarity, "reusing layer b", "anchor layer a", lower_colour_bound(similarity), 1.0, layer_labels,
                layer_labels);

  plot::bar_chart(dir + "/importance.png", fmt::format("{}: layer importance w = 1 - cos(x, x + attn)", model_name),
                  layer_labels, result.importance, "layer", "importance");

  // Sparsity: one row per (budget, KV head), one column per layer.
  std::vector<std::vector<double>> sparsity;
  std::vector<std::string> sparsity_labels;
  auto add_rows = [&](const std::vector<double>& captured, const std::string& budget) {
    for (int h = 0; h < G; ++h) {
      std::vector<double> row(static_cast<size_t>(L));
      for (int l = 0; l < L; ++l) row[size_t(l)] = captured[size_t(l) * G + h];
      sparsity.push_back(std::move(row));
      sparsity_labels.push_back(fmt::format("{} h{}", budget, h));
    }
  };
  add_rows(result.captured_top_k, fmt::format("k={}", options.statistics.top_k));
  add_rows(result.captured_budget, fmt::format("{}%", options.statistics.budget_percent));
  plot::heatmap(dir + "/sparsity.png",
                fmt::format("{}: attention mass kept (top-k keys + own tile; {}%: min {} keys)", model_name,
                            options.statistics.budget_percent, options.statistics.min_k),
                sparsity, "layer", "KV head", lower_colour_bound(sparsity), 1.0, layer_labels,
                sparsity_labels);

  plot::Series series{"sum w sim / sum w", {}, {}, {}, {}};
  for (const AnchorSolution& s : result.solutions) {
    series.x.push_back(double(s.anchors.size()));
    series.y.push_back(s.normalized_score);
  }
  plot::line_chart(dir + "/anchor_scores.png", fmt::format("{}: best anchor set score per anchor count", model_name),
                   {series}, "anchors", "normalized score");
}

}  // namespace kascade::calibration
