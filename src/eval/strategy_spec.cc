#include "eval/strategy_spec.h"

namespace kascade::eval {

StrategySpec parse_strategy_spec(std::string_view spec, double default_budget_percent) {
  AttentionOptions defaults;
  defaults.budget_percent = default_budget_percent;
  return {std::string(spec), parse_attention_spec(spec, defaults)};
}

}  // namespace kascade::eval
