// An eval entry: a strategy name as written (kascade-reuse-p5: the syntax of
// kascade/options.h, parse_attention_spec) and the options it sets.
#pragma once

#include <string>
#include <string_view>

#include "kascade/options.h"

namespace kascade::eval {

struct StrategySpec {
  std::string label;  // as written, the name in tables and plots
  AttentionOptions options;
};

// Throws Error naming the entry and listing the valid strategies and suffixes.
StrategySpec parse_strategy_spec(std::string_view spec, double default_budget_percent);

}  // namespace kascade::eval
