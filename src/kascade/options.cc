// The settings table, its parser and the eval names (see options.h).
#include "kascade/options.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "kascade/budget.h"

namespace kascade {
namespace {

constexpr std::string_view kMethodNames[] = {"dense",  "kascade", "oracle-topk", "streaming",
                                             "quest", "omnikv",  "lessismore"};
constexpr std::string_view kSparsePhasesNames[] = {"both", "decode", "prefill"};
constexpr std::string_view kSwitchValues[] = {"true", "false"};
constexpr std::string_view kScoringNames[] = {"sketch", "exact"};

template <typename Number>
std::optional<Number> parse_number(std::string_view text) {
  Number value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  if constexpr (std::is_floating_point_v<Number>)
    if (!std::isfinite(value)) return std::nullopt;
  return value;
}

template <typename Number>
Number number_in(std::string_view name, std::string_view text, Number low, Number high, std::string_view range) {
  const std::optional<Number> value = parse_number<Number>(text);
  if (!value || *value < low || *value > high) fail("{} '{}' is not {} in {}", name, text,
                                                    std::is_floating_point_v<Number> ? "a number" : "a whole number",
                                                    range);
  return *value;
}

bool switch_value(std::string_view name, std::string_view text) {
  if (text.empty() || text == "true") return true;
  if (text == "false") return false;
  fail("{} takes true or false, not '{}'", name, text);
}

template <typename T>
std::string text_of(T value) {
  return fmt::format("{}", value);
}

const AttentionSetting kSettings[] = {
    {"attention", SettingKind::Choice, "Attention method", true, kMethodNames,
      [](const AttentionOptions& o) { return std::string(method_name(o.method)); },
     [](AttentionOptions& o, std::string_view name, std::string_view v) {
       const auto* found = std::find(std::begin(kMethodNames), std::end(kMethodNames), v);
       if (found == std::end(kMethodNames))
         fail("{}: unknown method '{}' (known: {})", name, v, fmt::join(kMethodNames, ", "));
       o.method = Method(found - std::begin(kMethodNames));
     }},
    {"budget", SettingKind::Number, "Sparse budget, percent of the keys", true, {},
      [](const AttentionOptions& o) { return text_of(o.budget_percent); },
     [](AttentionOptions& o, std::string_view name, std::string_view v) {
       const std::optional<double> p = parse_number<double>(v);
       if (!p || !valid_budget_percent(*p)) fail("{} '{}' is not a percentage in (0, 100]", name, v);
       o.budget_percent = *p;
     }},
    {"min-k", SettingKind::Integer, "Keys below which attention stays dense", true, {},
      [](const AttentionOptions& o) { return text_of(o.min_k); },
     [](AttentionOptions& o, std::string_view name, std::string_view v) {
       o.min_k = number_in<int64_t>(name, v, 1, int64_t(1) << 30, "[1, 2^30]");
     }},
    {"tile", SettingKind::Integer, "Kascade prefill query tile", true, {},
      [](const AttentionOptions& o) { return text_of(o.tile); },
     [](AttentionOptions& o, std::string_view name, std::string_view v) {
       o.tile = number_in<int64_t>(name, v, 1, 1 << 20, "[1, 2^20]");
     }},
    {"sparse-phases", SettingKind::Choice, "Kascade: which phases are sparse: decode (dense prefill), both, prefill",
      true, kSparsePhasesNames, [](const AttentionOptions& o) { return std::string(kSparsePhasesNames[int(o.sparse_phases)]); },
     [](AttentionOptions& o, std::string_view name, std::string_view v) {
       const auto* found = std::find(std::begin(kSparsePhasesNames), std::end(kSparsePhasesNames), v);
       if (found == std::end(kSparsePhasesNames))
         fail("{} must be both, decode or prefill, not '{}'", name, v);
       o.sparse_phases = SparsePhases(found - std::begin(kSparsePhasesNames));
     }},
    {"reuse", SettingKind::Switch,
      "Kascade: reuse layers as the profile says (the paper's cross-layer reuse; faster, but it lost needles on "
      "real models: docs/accuracy.md); default: every layer selects its own keys",
      true, kSwitchValues, [](const AttentionOptions& o) { return text_of(!o.all_anchors); },
     [](AttentionOptions& o, std::string_view name, std::string_view v) { o.all_anchors = !switch_value(name, v); }},
    {"refine", SettingKind::Integer, "Kascade refined reuse: anchors keep C x budget candidates (1 = off)", true, {},
      [](const AttentionOptions& o) { return text_of(o.refine_factor); },
     [](AttentionOptions& o, std::string_view name, std::string_view v) {
       o.refine_factor = number_in<int>(name, v, 1, 64, "[1, 64]");
     }},
    {"scoring", SettingKind::Choice,
     "Kascade: what a selecting layer ranks keys from at decode: sketch (4-bit keys, about a quarter of the bytes) or "
     "exact (fp16 keys) (default: the engine's choice, sketch on the CPU, exact on the GPU)",
     true, kScoringNames,
     [](const AttentionOptions& o) {
       return o.scoring ? std::string(kScoringNames[int(*o.scoring)]) : std::string("engine");
     },
     [](AttentionOptions& o, std::string_view name, std::string_view v) {
       if (v == "engine") return o.scoring.reset();
       const auto* found = std::find(std::begin(kScoringNames), std::end(kScoringNames), v);
       if (found == std::end(kScoringNames)) fail("{} must be sketch or exact, not '{}'", name, v);
       o.scoring = Scoring(found - std::begin(kScoringNames));
     }},
    {"sparse-from", SettingKind::Integer,
     "Kascade: decode steps with fewer keys attend densely (default: the engine's measured break-even)", true, {},
     [](const AttentionOptions& o) { return o.sparse_from ? text_of(*o.sparse_from) : std::string("engine"); },
     [](AttentionOptions& o, std::string_view name, std::string_view v) {
       if (v == "engine") return o.sparse_from.reset();
       o.sparse_from = number_in<int64_t>(name, v, 0, int64_t(1) << 31, "[0, 2^31]");
     }},
    {"select-every", SettingKind::Integer,
     "Kascade: a selecting layer ranks keys at one decode step in N; in between it attends that selection, the "
     "selection shifted by the steps since, and the keys added since (1: every step; default: 2 where every layer "
     "selects, which kept the accuracy of 1 on Qwen2.5-Coder-1.5B and SmolLM2-135M, and 1 with --reuse; 4 lost 3 "
     "points at 2K: docs/accuracy.md)",
     true, {},
     [](const AttentionOptions& o) { return o.select_every ? text_of(*o.select_every) : std::string("default"); },
     [](AttentionOptions& o, std::string_view name, std::string_view v) {
       if (v == "default") return o.select_every.reset();
       o.select_every = number_in<int>(name, v, 1, 1 << 16, "[1, 65536]");
     }},
    {"wide-factor", SettingKind::Integer,
     "Kascade: at decode the profile's wide layers (by default the last quarter) select this many times the budget "
     "(1: every layer selects the budget; default: 3 where every layer selects, which recovered frequent-word "
     "counting on Qwen2.5-Coder-1.5B, 1 with --reuse: docs/accuracy.md)",
     true, {},
     [](const AttentionOptions& o) { return o.wide_factor ? text_of(*o.wide_factor) : std::string("default"); },
     [](AttentionOptions& o, std::string_view name, std::string_view v) {
       if (v == "default") return o.wide_factor.reset();
       o.wide_factor = number_in<int>(name, v, 1, 100, "[1, 100]");
     }},
    {"all-heads-pooled", SettingKind::Switch, "Kascade ablation: one index set for all KV heads", true, kSwitchValues,
      [](const AttentionOptions& o) { return text_of(o.all_heads_pooled); },
     [](AttentionOptions& o, std::string_view name, std::string_view v) { o.all_heads_pooled = switch_value(name, v); }},
    {"no-remap", SettingKind::Switch, "Kascade ablation: reuse head h reads anchor head h", true, kSwitchValues,
      [](const AttentionOptions& o) { return text_of(o.no_remap); },
     [](AttentionOptions& o, std::string_view name, std::string_view v) { o.no_remap = switch_value(name, v); }},
    {"pre-softmax-pooling", SettingKind::Switch, "Kascade ablation: pool logits, not probabilities", true,
      kSwitchValues, [](const AttentionOptions& o) { return text_of(o.pre_softmax_pooling); },
     [](AttentionOptions& o, std::string_view name, std::string_view v) { o.pre_softmax_pooling = switch_value(name, v); }},
    {"fixed-budget", SettingKind::Switch, "Kascade ablation: no rolling per-tile budget", true, kSwitchValues,
      [](const AttentionOptions& o) { return text_of(o.fixed_budget); },
     [](AttentionOptions& o, std::string_view name, std::string_view v) { o.fixed_budget = switch_value(name, v); }},
    {"own-tile-in-budget", SettingKind::Switch, "Kascade ablation: a tile's own keys count in its budget", true,
      kSwitchValues, [](const AttentionOptions& o) { return text_of(o.own_tile_in_budget); },
     [](AttentionOptions& o, std::string_view name, std::string_view v) { o.own_tile_in_budget = switch_value(name, v); }},
    {"sinks", SettingKind::Integer, "Sink tokens (streaming, lessismore)", true, {},
      [](const AttentionOptions& o) { return text_of(o.sink_tokens); },
     [](AttentionOptions& o, std::string_view name, std::string_view v) {
       o.sink_tokens = number_in<int64_t>(name, v, 0, int64_t(1) << 30, "[0, 2^30]");
     }},
    {"window-fraction", SettingKind::Number, "Streaming window as a share of the context (0 = budget)", true, {},
      [](const AttentionOptions& o) { return text_of(o.window_fraction); },
     [](AttentionOptions& o, std::string_view name, std::string_view v) {
       o.window_fraction = number_in<double>(name, v, 0.0, 1.0, "[0, 1]");
     }},
};

const AttentionSetting* find_setting(std::string_view name) {
  for (const AttentionSetting& s : kSettings)
    if (s.name == name) return &s;
  return nullptr;
}

// Eval's suffixes: each sets one setting, to `value`, or to the number
// after it when `value` is empty ("p5": budget 5).
struct Suffix {
  std::string_view suffix;
  std::string_view setting;
  std::string_view value;
  bool kascade_only;
  int lowest = 0;  // numeric suffixes: the least value that means anything here
};
constexpr Suffix kSuffixes[] = {
    {"all-heads-pooled", "all-heads-pooled", "true", true},
    {"no-remap", "no-remap", "true", true},
    {"pre-softmax-pooling", "pre-softmax-pooling", "true", true},
    {"fixed-budget", "fixed-budget", "true", true},
    {"sparse-prefill", "sparse-phases", "both", true},
    {"prefill-only", "sparse-phases", "prefill", true},
    {"reuse", "reuse", "true", true},
    {"own-tile-in-budget", "own-tile-in-budget", "true", true},
    {"sketch-scoring", "scoring", "sketch", true},
    {"exact-scoring", "scoring", "exact", true},
    {"refine", "refine", "", true, 2},
    {"from", "sparse-from", "", true},
    {"every", "select-every", "", true, 1},
    {"wide", "wide-factor", "", true, 1},
    {"mink", "min-k", "", false},
    {"p", "budget", "", false},
};

[[noreturn]] void bad_spec(std::string_view spec, std::string_view why) {
  std::vector<std::string> suffixes;
  for (const Suffix& s : kSuffixes) suffixes.push_back(fmt::format("-{}{}", s.suffix, s.value.empty() ? "<n>" : ""));
  fail("unknown strategy '{}': {} (strategies: {}; suffixes: {})", spec, why, fmt::join(kMethodNames, ", "),
       fmt::join(suffixes, ", "));
}

void check_fraction(double value, std::string_view option) {
  if (!(value >= 0 && value <= 1)) fail("{} {} must be in [0, 1]", option, value);
}

}  // namespace

std::span<const std::string_view> method_names() { return kMethodNames; }

std::string_view method_name(Method method) { return kMethodNames[size_t(method)]; }

std::span<const AttentionSetting> attention_settings() { return kSettings; }

void set_attention_option(AttentionOptions& options, std::string_view name, std::string_view value,
                          std::string_view shown_as) {
  const AttentionSetting* setting = find_setting(name);
  if (!setting) fail("unknown attention setting '{}'", shown_as.empty() ? name : shown_as);
  setting->set(options, shown_as.empty() ? name : shown_as, value);
}

AttentionOptions parse_attention_spec(std::string_view spec, const AttentionOptions& defaults) {
  AttentionOptions options = defaults;
  // The longest method name the entry starts with ("oracle-topk" has a hyphen itself).
  std::string_view base;
  for (const std::string_view name : kMethodNames)
    if (spec.starts_with(name) && (spec.size() == name.size() || spec[name.size()] == '-') && name.size() > base.size())
      base = name;
  if (base.empty()) bad_spec(spec, "no such strategy");
  set_attention_option(options, "attention", base);

  std::vector<std::string_view> given;
  std::string_view rest = spec.substr(base.size());
  while (!rest.empty()) {
    rest.remove_prefix(1);  // the '-'
    // Literal suffixes contain hyphens themselves: match those first, then numbers.
    const Suffix* match = nullptr;
    std::string_view number;
    for (const Suffix& s : kSuffixes) {
      if (!rest.starts_with(s.suffix)) continue;
      const std::string_view after = rest.substr(s.suffix.size());
      if (!s.value.empty() && (after.empty() || after[0] == '-')) {
        match = &s;
        break;
      }
      if (s.value.empty() && !after.empty() && (std::isdigit(static_cast<unsigned char>(after[0])) || after[0] == '.')) {
        match = &s;
        number = after.substr(0, after.find('-'));
        break;
      }
    }
    const std::string_view part = rest.substr(0, rest.find('-'));
    if (!match) bad_spec(spec, fmt::format("unknown suffix '-{}'", part));
    if (match->kascade_only && !options.kascade()) bad_spec(spec, fmt::format("-{} is a Kascade variant", part));
    if (std::find(given.begin(), given.end(), match->setting) != given.end())
      bad_spec(spec, fmt::format("-{} sets {} again", part, match->setting));
    given.push_back(match->setting);
    try {
      set_attention_option(options, match->setting, match->value.empty() ? number : match->value);
    } catch (const Error& error) {
      bad_spec(spec, error.what());
    }
    if (match->lowest > 0 && parse_number<int>(number).value_or(0) < match->lowest)
      bad_spec(spec, fmt::format("-{} must be at least {}", match->suffix, match->lowest));
    rest.remove_prefix(match->suffix.size() + number.size());
  }
  if (options.method == Method::Dense && !given.empty()) bad_spec(spec, "dense has no budget");
  return options;
}

int wide_factor_or_default(const AttentionOptions& options) {
  if (options.wide_factor) return *options.wide_factor;
  return options.kascade() && options.all_anchors ? kDefaultWideFactor : 1;
}

int select_every_or_default(const AttentionOptions& options) {
  if (options.select_every) return *options.select_every;
  return options.kascade() && options.all_anchors ? kDefaultSelectEvery : 1;
}

void validate_attention(const AttentionOptions& options, const Shape& shape) {
  check_shape(shape);
  if (!valid_budget_percent(options.budget_percent)) fail("budget {}% outside (0, 100]", options.budget_percent);
  if (options.min_k < 1) fail("min_k {} must be at least 1", options.min_k);
  if (options.tile <= 0) fail("tile size {} must be positive", options.tile);
  if (options.refine_factor < 1 || options.refine_factor > 64)
    fail("refine factor {} must be in [1, 64]", options.refine_factor);
  if (options.kascade() && options.refine_factor > 1 && options.all_anchors)
    fail("refined reuse (refine factor {}) needs reuse (--reuse; in eval: kascade-reuse-refine{}): by default "
         "every layer is an anchor",
         options.refine_factor, options.refine_factor);
  if (options.wide_factor && (*options.wide_factor < 1 || *options.wide_factor > 100))
    fail("wide factor {} must be in [1, 100]", *options.wide_factor);
  if (options.select_every && *options.select_every < 1)
    fail("select-every {} must be at least 1", *options.select_every);
  if (options.kascade() && options.select_every.value_or(1) > 1 && !options.all_anchors)
    fail("--select-every {} needs every layer selecting: reuse layers (--reuse) read their anchor's sets of the "
         "same step",
         *options.select_every);
  if (options.sink_tokens < 0) fail("sink tokens {} must not be negative", options.sink_tokens);
  if (options.page_size <= 0) fail("page size {} must be positive", options.page_size);
  check_fraction(options.window_fraction, "window fraction");
  check_fraction(options.recent_fraction, "recent fraction");
  if (options.dense_layers) check_layer_list(*options.dense_layers, "dense layers", shape.n_layers);
  if (options.filter_layers) check_layer_list(*options.filter_layers, "omnikv filter layers", shape.n_layers);
  if (options.selection_layers)
    check_layer_list(*options.selection_layers, "lessismore selection layers", shape.n_layers);
  if (options.profile) validate_profile(*options.profile, shape);
}

std::vector<int> scale_layers(std::span<const int> llama_layers, int n_layers) {
  std::vector<int> layers;
  for (int layer : llama_layers) {
    const int scaled = std::min(n_layers - 1, int(std::lround(double(layer) * n_layers / 32.0)));
    if (layers.empty() || scaled > layers.back()) layers.push_back(scaled);
  }
  return layers;
}

}  // namespace kascade
