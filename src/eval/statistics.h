// Confidence intervals for the eval tables (95%, z = 1.96).
//  - A strategy's mean score: the Wilson score interval on the mean over n
//    samples. Scores are fractions in [0, 1] (binary for single-answer tasks);
//    their variance is at most p(1 - p), so Wilson's interval, exact in
//    spirit for 0/1 outcomes, is conservative for fractional ones, and unlike
//    the normal interval it never collapses to a point at 0 or 1.
//  - A strategy's difference to dense: both ran on the same prompts, so the
//    interval is the normal one on the paired per-sample differences,
//    mean +- 1.96 s / sqrt(n), far tighter than comparing two Wilson
//    intervals (most prompts are answered alike).
#pragma once

#include <cstdint>
#include <span>

namespace kascade::eval {

struct Interval {
  double mean = 0, low = 0, high = 0;
};

inline constexpr double kZ95 = 1.959963984540054;

// Mean of scores in [0, 1] with its Wilson interval; n = 0 gives NaNs.
Interval wilson_interval(std::span<const double> scores);
// Mean of paired differences with its normal interval; n = 0 gives NaNs,
// n = 1 the value with NaN ends (one pair says nothing about the spread).
Interval paired_difference_interval(std::span<const double> differences);

}  // namespace kascade::eval
