// Constructors of the strategies behind make_strategy (options already
// validated there). Internal to src/attention.
#pragma once

#include <memory>
#include <vector>

#include "attention/strategies.h"

namespace kascade::attention {

std::unique_ptr<Strategy> make_kascade(const StrategyOptions& options, const Shape& shape);
std::unique_ptr<Strategy> make_oracle_topk(const StrategyOptions& options, const Shape& shape);
std::unique_ptr<Strategy> make_streaming(const StrategyOptions& options, const Shape& shape);
std::unique_ptr<Strategy> make_quest(const StrategyOptions& options, const Shape& shape);
std::unique_ptr<Strategy> make_omnikv(const StrategyOptions& options, const Shape& shape);
std::unique_ptr<Strategy> make_lessismore(const StrategyOptions& options, const Shape& shape);

// A per-layer flag vector from a list of layers (or `fallback` when unset).
std::vector<bool> layer_flags(const std::optional<std::vector<int>>& layers,
                              const std::vector<int>& fallback, int n_layers);

}  // namespace kascade::attention
