// Constructors of the strategies behind make_strategy (options already
// validated there). Internal to src/attention.
#pragma once

#include <memory>
#include <vector>

#include "attention/strategies.h"

namespace kascade::attention {

std::unique_ptr<Strategy> make_kascade(const AttentionOptions& options, const Shape& shape);
std::unique_ptr<Strategy> make_oracle_topk(const AttentionOptions& options, const Shape& shape);
std::unique_ptr<Strategy> make_streaming(const AttentionOptions& options, const Shape& shape);
std::unique_ptr<Strategy> make_quest(const AttentionOptions& options, const Shape& shape);
std::unique_ptr<Strategy> make_omnikv(const AttentionOptions& options, const Shape& shape);
std::unique_ptr<Strategy> make_lessismore(const AttentionOptions& options, const Shape& shape);

// A per-layer flag vector from a list of layers (or `fallback` when unset).
std::vector<bool> layer_flags(const std::optional<std::vector<int>>& layers,
                              const std::vector<int>& fallback, int n_layers);

}  // namespace kascade::attention
