#include "eval/strategy_spec.h"

#include <charconv>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace kascade::eval {
namespace {

using attention::SparsePhases;
using attention::StrategyOptions;

// Kascade's on/off variants: suffix and what it sets.
struct Flag {
  std::string_view suffix;
  void (*apply)(StrategyOptions&);
  bool (*is_set)(const StrategyOptions&);
};
constexpr Flag kFlags[] = {
    {"all-heads-pooled", [](StrategyOptions& o) { o.all_heads_pooled = true; },
     [](const StrategyOptions& o) { return o.all_heads_pooled; }},
    {"no-remap", [](StrategyOptions& o) { o.no_remap = true; },
     [](const StrategyOptions& o) { return o.no_remap; }},
    {"pre-softmax-pooling", [](StrategyOptions& o) { o.pre_softmax_pooling = true; },
     [](const StrategyOptions& o) { return o.pre_softmax_pooling; }},
    {"fixed-budget", [](StrategyOptions& o) { o.fixed_budget = true; },
     [](const StrategyOptions& o) { return o.fixed_budget; }},
    {"sparse-prefill", [](StrategyOptions& o) { o.sparse_phases = SparsePhases::Both; },
     [](const StrategyOptions& o) { return o.sparse_phases != SparsePhases::DecodeOnly; }},
    {"prefill-only", [](StrategyOptions& o) { o.sparse_phases = SparsePhases::PrefillOnly; },
     [](const StrategyOptions& o) { return o.sparse_phases != SparsePhases::DecodeOnly; }},
    {"reuse", [](StrategyOptions& o) { o.all_anchors = false; },
     [](const StrategyOptions& o) { return !o.all_anchors; }},
    {"own-tile-in-budget", [](StrategyOptions& o) { o.own_tile_in_budget = true; },
     [](const StrategyOptions& o) { return o.own_tile_in_budget; }},
};

constexpr std::string_view kNumberSuffixes = "-p<percent>, -refine<c>, -mink<keys>";

[[noreturn]] void bad_spec(std::string_view spec, std::string_view why) {
  std::vector<std::string_view> flags;
  for (const Flag& flag : kFlags) flags.push_back(flag.suffix);
  fail("unknown strategy '{}': {} (strategies: {}; suffixes: {}, -{})", spec, why,
       fmt::join(attention::strategy_names(), ", "), kNumberSuffixes, fmt::join(flags, ", -"));
}

// The number after `prefix` in `part` ("refine3" -> 3), or nullopt when
// `part` is not prefix + digits.
template <typename Number>
std::optional<Number> number_after(std::string_view part, std::string_view prefix) {
  if (!part.starts_with(prefix) || part.size() == prefix.size()) return std::nullopt;
  const char first = part[prefix.size()];
  if (!(first >= '0' && first <= '9') && first != '.') return std::nullopt;
  Number value{};
  const auto [ptr, ec] = std::from_chars(part.data() + prefix.size(), part.data() + part.size(), value);
  if (ec != std::errc() || ptr != part.data() + part.size()) return std::nullopt;
  return value;
}

}  // namespace

StrategySpec parse_strategy_spec(std::string_view spec, double default_budget_percent) {
  StrategySpec result;
  result.label = std::string(spec);
  StrategyOptions& options = result.options;
  options.budget_percent = default_budget_percent;
  // The longest strategy name that the entry starts with ("oracle-topk" has a hyphen itself).
  std::string_view base;
  for (const std::string_view name : attention::strategy_names())
    if (spec.starts_with(name) && (spec.size() == name.size() || spec[name.size()] == '-') && name.size() > base.size())
      base = name;
  if (base.empty()) bad_spec(spec, "no such strategy");
  options.name = std::string(base);
  const bool kascade = base == "kascade";

  std::string_view rest = spec.substr(base.size());
  bool budget_given = false, min_k_given = false, refine_given = false;
  while (!rest.empty()) {
    rest.remove_prefix(1);  // the '-'
    // Flag suffixes contain hyphens themselves: match them first.
    const Flag* flag = nullptr;
    for (const Flag& candidate : kFlags)
      if (rest.starts_with(candidate.suffix) &&
          (rest.size() == candidate.suffix.size() || rest[candidate.suffix.size()] == '-'))
        flag = &candidate;
    if (flag) {
      if (!kascade) bad_spec(spec, fmt::format("-{} is a Kascade variant", flag->suffix));
      if (flag->is_set(options)) bad_spec(spec, fmt::format("-{} conflicts with an earlier suffix", flag->suffix));
      flag->apply(options);
      rest.remove_prefix(flag->suffix.size());
      continue;
    }
    const size_t end = rest.find('-');
    const std::string_view part = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end);
    if (const auto percent = number_after<double>(part, "p")) {
      if (!(*percent > 0 && *percent <= 100))
        bad_spec(spec, fmt::format("budget '{}' is not a percentage in (0, 100]", part.substr(1)));
      if (budget_given) bad_spec(spec, "budget given twice");
      budget_given = true;
      options.budget_percent = *percent;
    } else if (const auto factor = number_after<int>(part, "refine")) {
      if (!kascade) bad_spec(spec, "-refine<c> is a Kascade variant");
      if (*factor < 2 || *factor > 64) bad_spec(spec, "the refine factor must be in [2, 64]");
      if (refine_given) bad_spec(spec, "refine factor given twice");
      refine_given = true;
      options.refine_factor = *factor;
    } else if (const auto min_k = number_after<int64_t>(part, "mink")) {
      if (*min_k < 1) bad_spec(spec, "-mink needs at least 1 key");
      if (min_k_given) bad_spec(spec, "min_k given twice");
      min_k_given = true;
      options.min_k = *min_k;
    } else {
      bad_spec(spec, fmt::format("unknown suffix '-{}'", part));
    }
  }
  if (options.name == "dense" && (budget_given || min_k_given)) bad_spec(spec, "dense has no budget");
  return result;
}

}  // namespace kascade::eval
