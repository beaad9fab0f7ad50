// Strategy names on the eval command line: a strategy of
// attention/strategies.h, optionally followed by variant suffixes, so one run
// can compare budgets and Kascade ablations side by side:
//   <strategy>[-p<percent>][-<variant>...]
//   -p<percent>            budget for this entry (default: --budget), e.g. kascade-p5
//   -mink<keys>            min_k of this entry (default 128)
//   -all-heads-pooled      Kascade: one index set for all KV heads
//   -no-remap              Kascade: reuse layer head h reads anchor head h
//   -pre-softmax-pooling   Kascade: pool logits instead of probabilities
//   -fixed-budget          Kascade: no rolling per-tile prefill budget
//   -reuse                 Kascade: reuse layers as the profile says (default:
//                          every layer an anchor; docs/accuracy.md says why)
//   -sparse-prefill        Kascade: sparse prefill too (default: dense prefill)
//   -prefill-only          Kascade: sparse prefill, dense decode
//   -own-tile-in-budget    Kascade: a prefill tile's own keys count in its budget
//   -refine<c>             Kascade: refined reuse with c x budget candidates (with -reuse)
// e.g. dense, kascade, kascade-p5, kascade-reuse-sparse-prefill (the paper's
// method), kascade-reuse-refine3, quest-p20.
#pragma once

#include <string>
#include <string_view>

#include "attention/strategies.h"

namespace kascade::eval {

struct StrategySpec {
  std::string label;  // as written, the name in tables and plots
  attention::StrategyOptions options;
};

// Throws Error naming the entry and listing the valid strategies and suffixes.
StrategySpec parse_strategy_spec(std::string_view spec, double default_budget_percent);

}  // namespace kascade::eval
