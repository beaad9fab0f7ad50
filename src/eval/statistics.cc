#include "eval/statistics.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kascade::eval {

Interval wilson_interval(std::span<const double> scores) {
  const double n = double(scores.size());
  if (scores.empty()) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    return {nan, nan, nan};
  }
  double sum = 0;
  for (const double s : scores) sum += s;
  const double p = sum / n, z2 = kZ95 * kZ95;
  const double centre = (p + z2 / (2 * n)) / (1 + z2 / n);
  const double half = kZ95 / (1 + z2 / n) * std::sqrt(p * (1 - p) / n + z2 / (4 * n * n));
  return {p, std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

Interval paired_difference_interval(std::span<const double> differences) {
  const double n = double(differences.size());
  if (differences.empty()) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    return {nan, nan, nan};
  }
  double sum = 0;
  for (const double d : differences) sum += d;
  const double mean = sum / n;
  if (differences.size() < 2) return {mean, std::nan(""), std::nan("")};  // no spread to estimate
  double squares = 0;
  for (const double d : differences) squares += (d - mean) * (d - mean);
  const double half = kZ95 * std::sqrt(squares / (n - 1) / n);
  return {mean, mean - half, mean + half};
}

}  // namespace kascade::eval
