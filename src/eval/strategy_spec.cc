#include "eval/strategy_spec.h"

#include <cctype>
#include <charconv>

#include <fmt/format.h>

#include "core/error.h"

namespace kascade::eval {
namespace {

constexpr std::string_view kAblations[] = {"all-heads-pooled", "no-remap", "pre-softmax-pooling", "fixed-budget"};

[[noreturn]] void bad_spec(std::string_view spec, std::string_view why) {
  fail("unknown strategy '{}': {} (strategies: {}; suffixes: -p<percent>, -{})", spec, why,
       fmt::join(attention::strategy_names(), ", "), fmt::join(kAblations, ", -"));
}

}  // namespace

StrategySpec parse_strategy_spec(std::string_view spec, double default_budget_percent) {
  StrategySpec result;
  result.label = std::string(spec);
  result.options.budget_percent = default_budget_percent;
  // The longest strategy name that the entry starts with ("oracle-topk" has a hyphen itself).
  std::string_view base;
  for (const std::string_view name : attention::strategy_names())
    if (spec.starts_with(name) && (spec.size() == name.size() || spec[name.size()] == '-') && name.size() > base.size())
      base = name;
  if (base.empty()) bad_spec(spec, "no such strategy");
  result.options.name = std::string(base);

  std::string_view rest = spec.substr(base.size());
  bool budget_given = false;
  while (!rest.empty()) {
    rest.remove_prefix(1);  // the '-'
    const size_t end = rest.find('-');
    const std::string_view part = rest.substr(0, end);
    bool matched = false;
    if (part.size() > 1 && part[0] == 'p' && (std::isdigit(uint8_t(part[1])) || part[1] == '.')) {
      double percent = 0;
      const auto [ptr, ec] = std::from_chars(part.data() + 1, part.data() + part.size(), percent);
      if (ec != std::errc() || ptr != part.data() + part.size() || !(percent > 0 && percent <= 100))
        bad_spec(spec, fmt::format("budget '{}' is not a percentage in (0, 100]", part.substr(1)));
      if (budget_given) bad_spec(spec, "budget given twice");
      budget_given = true;
      result.options.budget_percent = percent;
      rest = end == std::string_view::npos ? std::string_view() : rest.substr(end);
      continue;
    }
    for (const std::string_view ablation : kAblations) {
      if (!rest.starts_with(ablation) || (rest.size() > ablation.size() && rest[ablation.size()] != '-')) continue;
      if (base != "kascade") bad_spec(spec, fmt::format("-{} is a Kascade ablation", ablation));
      bool& flag = ablation == "all-heads-pooled" ? result.options.all_heads_pooled
                   : ablation == "no-remap"       ? result.options.no_remap
                   : ablation == "pre-softmax-pooling" ? result.options.pre_softmax_pooling
                                                       : result.options.fixed_budget;
      if (flag) bad_spec(spec, fmt::format("-{} given twice", ablation));
      flag = true;
      rest.remove_prefix(ablation.size());
      matched = true;
      break;
    }
    if (!matched) bad_spec(spec, fmt::format("unknown suffix '-{}'", part));
  }
  if (result.options.name == "dense" && budget_given) bad_spec(spec, "dense has no budget");
  return result;
}

}  // namespace kascade::eval
