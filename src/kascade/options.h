// The attention a sequence runs, as the front ends state it, and the one
// parser of those settings. The CLI's flags (--budget 5 --reuse), the
// server's per-request "kascade" object ({"budget": 5, "reuse": true}) and
// eval's strategy names (kascade-p5-reuse) all set AttentionOptions through
// the table of settings here, so a setting is defined, checked and named once.
//
// Methods (KASCADE.md):
//   dense        exact causal attention.
//   kascade      anchors select per-KV-head top-k keys (post-softmax pooled over
//                the group and, in prefill, a tile of T queries; rolling budget
//                budget(s) over [0, s) plus the own tile causally; in decode
//                budget(N) over all N keys); reuse layers read the most recent
//                anchor's sets through head_map. Dense layers (default {0})
//                attend densely; an anchor among them still selects.
//   oracle-topk  every layer selects each query head's own top-k (per tile in
//                prefill, per token in decode); dense layers default {0}.
//   streaming    sink_tokens first keys + the most recent keys of each query
//                (window = budget(N) - sinks, or ceil(window_fraction * N)),
//                in prefill and decode.
//   quest        decode only: pages of page_size keys, page score
//                sum_c max(q_c kmax_c, q_c kmin_c), top ceil(budget/page_size)
//                pages per query head; dense layers default {0, 1}.
//   omnikv       decode only: filter layers attend densely and select one
//                top-k by the max over all heads of the softmax; later layers
//                reuse it; layers before the first filter and right after
//                each filter are dense.
//   lessismore   decode only: layers before the first selection layer are
//                dense; selection layers attend densely and take the union of
//                per-head top-k (rank by rank, heads in order, until the
//                union fills (1 - recent_fraction) of the budget), plus
//                sink_tokens sinks and the most recent keys in the remaining
//                share; later layers reuse the set.
//
// Kascade ablations:
//   all_heads_pooled     one set per unit for every KV head, pooled over all heads.
//   no_remap             reuse layer head h reads anchor head h (head_map ignored).
//   pre_softmax_pooling  pool raw scores q.k/sqrt(d) instead of probabilities.
//   fixed_budget         every prefill tile of a step selects
//                        k = budget(first_position + n_queries) keys (capped at
//                        its s candidates) instead of the rolling budget(s):
//                        with a one-chunk prefill, p% of the whole prompt for
//                        every tile. Decode is unchanged (budget(N)).
//   sparse_phases        which phases are sparse: both (the paper), decode
//                        only (dense prefill, the reference code's
//                        DecodeOnlyKascadeStrategy) or prefill only.
//   all_anchors          every layer an anchor: pooling, tiles and the rolling
//                        budget without reuse; false reuses as the profile says.
//   own_tile_in_budget   a prefill tile's k counts its own tile (the reference
//                        code's k -= T) instead of adding it on top.
// Kascade's cheap selection (ours):
//   scoring              sketch: a selecting layer ranks keys at decode from
//                        a 4-bit per-channel copy of the keys and attends its
//                        top budget exactly; exact: from the fp16 keys;
//                        unset: the engine's measured choice.
//   sparse_from          decode steps with fewer keys attend densely.
//   select_every S       a selecting layer ranks keys at one decode step in
//                        S; at the S - 1 steps after it, it attends its
//                        selection, the selection shifted by the steps since
//                        (a head copying text moves one key a step) and every
//                        key added since (Recycled Attention's and
//                        TokenSelect's observation: consecutive decode queries
//                        want mostly the same keys). Up to twice the budget.
//                        Needs every layer selecting (no reuse). The GPU
//                        holds only for a batch unchanged since it selected
//                        (gpu/backend.h).
//                        Unset: 2 with every layer selecting, else 1.
//   wide_factor F        at decode, the profile's wide layers (by default the
//                        last quarter: KascadeProfile::wide_layers) select F
//                        times the budget (at most every key); 1: every layer
//                        selects the budget. Unset: 3 with every layer
//                        selecting, else 1 (the paper's method unchanged).
// The defaults, decode-only with every layer an anchor holding its selection
// every other step, are what kept dense accuracy on real models at p = 10
// (docs/accuracy.md): cross-layer reuse (all_anchors = false) and sparse
// prefill lost needles on them.
// Kascade variant (KASCADE.md, "refined reuse"):
//   refine_factor c > 1  anchors keep c x budget candidates per KV head; each
//                        reuse layer scores its candidates (through the head
//                        map) with its own queries, post-softmax pooled over the
//                        group and normalised over the candidates, and attends
//                        its own top budget of them. An anchor attends its own
//                        top budget, as without refinement.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kascade/profile.h"
#include "kascade/shape.h"

namespace kascade {

enum class Method { Dense, Kascade, OracleTopK, Streaming, Quest, OmniKv, LessIsMore };

// "dense", "kascade", ...: the names front ends take, in the order above.
std::span<const std::string_view> method_names();
std::string_view method_name(Method method);

// Which phases Kascade makes sparse; the other attends densely.
enum class SparsePhases { Both, DecodeOnly, PrefillOnly };

// What a selecting layer ranks keys from at decode: the 4-bit key sketch
// (attention/key_sketch.h: about a quarter of the key bytes), or the fp16 keys.
// Each engine picks its default (kCpuScoring, kGpuScoring): both score from
// the sketch, which decodes faster than exact scoring at the same accuracy
// (docs/benchmarks.md, docs/gpu_engine.md).
enum class Scoring { Sketch, Exact };

struct AttentionOptions {
  Method method = Method::Dense;
  double budget_percent = 10;  // p, in (0, 100]
  int64_t min_k = 128;         // >= 1
  int64_t tile = 32;           // prefill query tile T (kascade, oracle-topk), > 0

  bool all_heads_pooled = false;
  bool no_remap = false;
  bool pre_softmax_pooling = false;
  bool fixed_budget = false;
  SparsePhases sparse_phases = SparsePhases::DecodeOnly;
  bool all_anchors = true;
  bool own_tile_in_budget = false;
  int refine_factor = 1;  // c; 1 = plain reuse; > 1 needs reuse (all_anchors false)
  // What selecting layers rank keys from; unset: the engine's choice (the
  // CPU's integer sketch scorer pays, the GPU's sketch decode does not).
  std::optional<Scoring> scoring;
  // Decode steps that see fewer keys attend densely (below it the sparse
  // path costs more than it saves); unset: the engine's measured break-even
  // (the GPU's also counts the keys of the whole batch, gpu/backend.h).
  std::optional<int64_t> sparse_from;
  // Decode steps per selection of a selecting layer (1: it selects at every
  // step); unset: select_every_or_default's.
  std::optional<int> select_every;
  // The decode budget of the profile's wide layers, as a multiple of
  // budget_percent; unset: wide_factor_or_default's.
  std::optional<int> wide_factor;

  // Layers attended densely; unset: kascade/oracle-topk {0}, quest {0, 1}.
  std::optional<std::vector<int>> dense_layers;
  // Kascade anchors and head maps; unset: default_profile(shape).
  std::optional<KascadeProfile> profile;

  int64_t sink_tokens = 4;     // streaming, lessismore
  double window_fraction = 0;  // streaming: > 0 sets the window to this share of N
  int64_t page_size = 16;      // quest
  // omnikv filter layers; unset: Llama's {2, 8, 18} scaled to the depth.
  std::optional<std::vector<int>> filter_layers;
  // lessismore selection layers; unset: Llama's {2, 13} scaled to the depth.
  std::optional<std::vector<int>> selection_layers;
  double recent_fraction = 0.25;  // lessismore: budget share of sinks + recent keys

  bool kascade() const { return method == Method::Kascade; }
};

// ---------------------------------------------------------------------------
// The settings front ends expose, by name.

enum class SettingKind { Switch, Integer, Number, Choice };

struct AttentionSetting {
  std::string_view name;  // the CLI flag without "--"; the server's field with '_' for '-'
  SettingKind kind;
  std::string_view help;
  bool per_request;                         // the server's "kascade" object takes it
  std::span<const std::string_view> choices;  // kind Choice: the values it takes
  std::string (*current)(const AttentionOptions&);  // the value as text (CLI help's default)
  // Parses `value` into the options; `shown_as` names the setting in errors.
  void (*set)(AttentionOptions&, std::string_view shown_as, std::string_view value);
};

std::span<const AttentionSetting> attention_settings();

// Sets one option from its text: a switch takes "" or "true" (on) and
// "false"; numbers are decimal; choices one of their values. Throws Error
// naming the setting (as `shown_as`, e.g. "--budget"; default its name) and
// what it takes.
void set_attention_option(AttentionOptions& options, std::string_view name, std::string_view value,
                          std::string_view shown_as = {});

// Eval's strategy names: a method, optionally followed by suffixes that set
// one option each, so one run can compare budgets and variants side by side:
//   <method>[-p<percent>][-<variant>...]
//   -p<percent>            budget (default: the defaults' budget), e.g. kascade-p5
//   -mink<keys>            min_k
//   -refine<c>             Kascade: refined reuse with c x budget candidates (with -reuse)
//   -all-heads-pooled, -no-remap, -pre-softmax-pooling, -fixed-budget,
//   -own-tile-in-budget    the Kascade ablations above
//   -reuse                 Kascade: reuse layers as the profile says
//   -sketch-scoring        Kascade: selecting layers rank keys from the 4-bit key sketch
//   -exact-scoring         Kascade: ... from the fp16 keys (default: the engine's choice)
//   -from<keys>            Kascade: sparse decode from this many keys on
//   -every<steps>          Kascade: selecting layers rank keys at one decode step in this many
//   -wide<factor>          Kascade: the profile's wide layers select factor x the budget
//   -sparse-prefill        Kascade: sparse prefill too (default: dense prefill)
//   -prefill-only          Kascade: sparse prefill, dense decode
// e.g. dense, kascade, kascade-p5, kascade-reuse-sparse-prefill (the paper's
// method), kascade-reuse-refine3, quest-p20. Throws Error naming the entry
// and listing the methods and suffixes.
AttentionOptions parse_attention_spec(std::string_view spec, const AttentionOptions& defaults = {});

// Checks the options against the attention shape (Error naming the option):
// the one check every front end and both engines run before a sequence.
void validate_attention(const AttentionOptions& options, const Shape& shape);

// Kascade's selecting layers hold their selection for one decode step in two
// by default: on Qwen2.5-Coder-1.5B (8K, 16K, 24K, 200 paired samples each)
// and SmolLM2-135M (2K, 4K, 8K) it kept the accuracy of selecting at every
// step within 1.2 points either way, and it decodes faster on both engines
// (docs/accuracy.md, "Held selections"; docs/benchmarks.md; docs/gpu_engine.md).
inline constexpr int kDefaultSelectEvery = 2;
// options.select_every where set, else kDefaultSelectEvery where every layer
// selects (Kascade without reuse) and 1 otherwise.
int select_every_or_default(const AttentionOptions& options);

// The default's wide layers select three times the budget at decode: on
// Qwen2.5-Coder-1.5B it took frequent-word counting (fwe) from -6.3 / -8.0 /
// -10.7 points against dense to -1.0 / +0.0 / -3.3 at 8K / 16K / 24K, left
// the other tasks within a point, and cost 6 % of the decode speed at 30K x
// 16 (docs/accuracy.md, "Wide layers").
inline constexpr int kDefaultWideFactor = 3;
// options.wide_factor where set, else kDefaultWideFactor where every layer
// selects (Kascade without reuse) and 1 otherwise.
int wide_factor_or_default(const AttentionOptions& options);

// Layer choices published for 32-layer Llama models mapped to n_layers:
// round(l * n_layers / 32), clamped to the last layer, duplicates dropped.
std::vector<int> scale_layers(std::span<const int> llama_layers, int n_layers);

}  // namespace kascade
