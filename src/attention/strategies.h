// Choosing an attention strategy by name, with its options (the CLI's
// --attention and friends), and the strategies' constructors.
//
// Strategies (KASCADE.md):
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
// The defaults, decode-only with every layer an anchor, are what kept dense
// accuracy on real models at p = 10 (docs/accuracy.md): cross-layer reuse
// (all_anchors = false) and sparse prefill lost needles on them.
//   own_tile_in_budget   a prefill tile's k counts its own tile (the reference
//                        code's k -= T) instead of adding it on top.
// Kascade variant (KASCADE.md, "refined reuse"):
//   refine_factor c > 1  anchors keep c x budget candidates per KV head; each
//                        reuse layer scores its candidates (through the head
//                        map) with its own queries, post-softmax pooled over the
//                        group and normalised over the candidates, and attends
//                        its own top budget of them. An anchor attends its own
//                        top budget, as without refinement.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "attention/attention.h"
#include "kascade/profile.h"

namespace kascade::attention {

// Which phases Kascade makes sparse; the other attends densely.
enum class SparsePhases { Both, DecodeOnly, PrefillOnly };

struct StrategyOptions {
  std::string name = "dense";
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
};

// The valid strategy names, in the order above.
std::span<const std::string_view> strategy_names();

// Validates the options against the shape (Error naming the option) and
// builds the strategy.
std::unique_ptr<Strategy> make_strategy(const StrategyOptions& options, const Shape& shape);

// Layer choices published for 32-layer Llama models mapped to n_layers:
// round(l * n_layers / 32), clamped to the last layer, duplicates dropped.
std::vector<int> scale_layers(std::span<const int> llama_layers, int n_layers);

}  // namespace kascade::attention
