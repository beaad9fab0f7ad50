// make_strategy: option validation and dispatch by name (see strategies.h).
#include "attention/strategies.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "attention/exact.h"
#include "attention/strategy_impl.h"
#include "core/error.h"

namespace kascade::attention {

namespace {

constexpr std::string_view kNames[] = {"dense",  "kascade", "oracle-topk", "streaming",
                                       "quest", "omnikv",  "lessismore"};

void check_layers(const std::optional<std::vector<int>>& layers, std::string_view option,
                  int n_layers) {
  if (!layers) return;
  for (size_t i = 0; i < layers->size(); ++i) {
    const int layer = (*layers)[i];
    if (layer < 0 || layer >= n_layers)
      fail("{}: layer {} outside [0, {})", option, layer, n_layers);
    if (i > 0 && layer <= (*layers)[i - 1])
      fail("{}: layers must be strictly ascending ({} after {})", option, layer, (*layers)[i - 1]);
  }
}

void check_fraction(double value, std::string_view option) {
  if (!(value >= 0 && value <= 1)) fail("{} {} must be in [0, 1]", option, value);
}

}  // namespace

std::span<const std::string_view> strategy_names() { return kNames; }

std::vector<int> scale_layers(std::span<const int> llama_layers, int n_layers) {
  std::vector<int> layers;
  for (int layer : llama_layers) {
    const int scaled =
        std::min(n_layers - 1, int(std::lround(double(layer) * n_layers / 32.0)));
    if (layers.empty() || scaled > layers.back()) layers.push_back(scaled);
  }
  return layers;
}

std::unique_ptr<Strategy> make_strategy(const StrategyOptions& options, const Shape& shape) {
  check_shape(shape);
  if (std::find(std::begin(kNames), std::end(kNames), options.name) == std::end(kNames))
    fail("unknown attention strategy '{}' (valid: {})", options.name, fmt::join(kNames, ", "));
  if (!(options.budget_percent > 0 && options.budget_percent <= 100))
    fail("budget {}% outside (0, 100]", options.budget_percent);
  if (options.min_k < 1) fail("min_k {} must be at least 1", options.min_k);
  if (options.tile <= 0) fail("tile size {} must be positive", options.tile);
  if (options.refine_factor < 1 || options.refine_factor > 64)
    fail("refine factor {} must be in [1, 64]", options.refine_factor);
  if (options.name == "kascade" && options.refine_factor > 1 && options.all_anchors)
    fail("refined reuse (refine factor {}) needs reuse (--reuse; in eval: kascade-reuse-refine{}): by default "
         "every layer is an anchor", options.refine_factor, options.refine_factor);
  if (options.sink_tokens < 0) fail("sink tokens {} must not be negative", options.sink_tokens);
  if (options.page_size <= 0) fail("page size {} must be positive", options.page_size);
  check_fraction(options.window_fraction, "window fraction");
  check_fraction(options.recent_fraction, "recent fraction");
  check_layers(options.dense_layers, "dense layers", shape.n_layers);
  check_layers(options.filter_layers, "omnikv filter layers", shape.n_layers);
  check_layers(options.selection_layers, "lessismore selection layers", shape.n_layers);
  if (options.profile) validate_profile(*options.profile, shape);

  const std::string& name = options.name;
  if (name == "dense") return make_dense(shape);
  if (name == "kascade") return make_kascade(options, shape);
  if (name == "oracle-topk") return make_oracle_topk(options, shape);
  if (name == "streaming") return make_streaming(options, shape);
  if (name == "quest") return make_quest(options, shape);
  if (name == "omnikv") return make_omnikv(options, shape);
  return make_lessismore(options, shape);
}

}  // namespace kascade::attention
