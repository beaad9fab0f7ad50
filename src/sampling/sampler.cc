// Sampler implementation. Weights are exp(scaled logit) with the best scaled
// logit at 0, so nothing overflows whatever the temperature. Every finite
// option gives a valid draw: a penalised logit that leaves float's range
// saturates at its largest finite value, scaled logits are computed in
// double and clamped to [-FLT_MAX, 0] (a temperature of 1e-38 or a penalty
// of 1e37 makes them overflow in float), and top-p's bins are computed in
// double from clamped values, so no NaN or infinity ever reaches an index.
// Exponentials are taken only after top-k, and only top-k's survivors and
// top-p's boundary bin are ever sorted.
#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace kascade::sampling {

namespace {

constexpr float kInfinity = std::numeric_limits<float>::infinity();
constexpr float kMinusInfinity = -kInfinity;
constexpr float kLargest = std::numeric_limits<float>::max();

// A finite logit pushed out of range by the penalty keeps its side of the
// range: the ranking stays what the arithmetic meant.
float saturate(float logit) { return std::clamp(logit, -kLargest, kLargest); }

void check_in_vocabulary(int32_t token, size_t vocabulary, const char* what) {
  if (token < 0 || size_t(token) >= vocabulary)
    fail("sampling: {} token {} is outside the vocabulary of {} tokens", what, token, vocabulary);
}

// Tokens are ranked by logit, ties broken towards the lower id, so the kept
// sets are fully determined.
// (A lambda rather than a function, so the std algorithms inline it.)
constexpr auto ranks_before = [](const auto& a, const auto& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
};

// Kept tokens are drawn in id order, which no selection algorithm affects.
template <typename Candidate>
void sort_by_id(std::vector<Candidate>& candidates) {
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
}

}  // namespace

void validate(const SamplerOptions& options) {
  if (!(options.temperature >= 0.0f) || std::isinf(options.temperature)) {
    fail("sampling: temperature must be a finite value >= 0, got {}", options.temperature);
  }
  if (options.top_k < 0) fail("sampling: top-k must be >= 0 (0 turns it off), got {}", options.top_k);
  if (!(options.top_p > 0.0f && options.top_p <= 1.0f)) {
    fail("sampling: top-p must be in (0, 1] (1 turns it off), got {}", options.top_p);
  }
  if (!(options.min_p >= 0.0f && options.min_p <= 1.0f)) {
    fail("sampling: min-p must be in [0, 1] (0 turns it off), got {}", options.min_p);
  }
  if (!(options.repetition_penalty > 0.0f) || std::isinf(options.repetition_penalty)) {
    fail("sampling: repetition penalty must be a finite value > 0 (1 turns it off), got {}",
         options.repetition_penalty);
  }
  if (options.repetition_window < 0) {
    fail("sampling: repetition window must be >= 0 tokens, got {}", options.repetition_window);
  }
  if (!std::isfinite(options.frequency_penalty))
    fail("sampling: frequency penalty must be finite (0 turns it off), got {}", options.frequency_penalty);
  if (!std::isfinite(options.presence_penalty))
    fail("sampling: presence penalty must be finite (0 turns it off), got {}", options.presence_penalty);
  for (const auto& [token, bias] : options.logit_bias) {
    if (token < 0) fail("sampling: logit bias token {} is negative", token);
    if (!std::isfinite(bias)) fail("sampling: the logit bias of token {} must be finite, got {}", token, bias);
  }
}

Sampler::Sampler(const SamplerOptions& options) : options_(options), rng_(options.seed) {
  validate(options_);
}

void Sampler::reset() {
  history_.clear();
  generated_counts_.clear();
  accepted_ = 0;
  rng_.seed(options_.seed);
}

void Sampler::accept(int32_t token) {
  ++accepted_;
  if (options_.repetition_window == 0) return;
  history_.push_back(token);
  if (history_.size() > size_t(options_.repetition_window)) history_.pop_front();
}

void Sampler::accept_generated(int32_t token) {
  accept(token);
  ++generated_counts_[token];
}

double Sampler::uniform() {
  return double(rng_() >> 11) * 0x1.0p-53;
}

void Sampler::apply_logit_bias(std::vector<float>& logits) const {
  for (const auto& [token, bias] : options_.logit_bias) {
    check_in_vocabulary(token, logits.size(), "logit bias");
    float& logit = logits[size_t(token)];
    if (logit != kMinusInfinity) logit = saturate(logit + bias);  // -inf stays never drawn
  }
}

void Sampler::apply_frequency_and_presence_penalties(std::vector<float>& logits) const {
  if (options_.frequency_penalty == 0.0f && options_.presence_penalty == 0.0f) return;
  for (const auto& [token, count] : generated_counts_) {
    check_in_vocabulary(token, logits.size(), "remembered");
    float& logit = logits[size_t(token)];
    if (logit == kMinusInfinity) continue;
    // In double: count * penalty can leave float's range.
    const double lowered = double(logit) - double(count) * double(options_.frequency_penalty) -
                           double(options_.presence_penalty);
    logit = float(std::clamp(lowered, -double(kLargest), double(kLargest)));
  }
}

void Sampler::apply_repetition_penalty(std::vector<float>& logits) const {
  if (options_.repetition_penalty == 1.0f || history_.empty()) return;
  // Each distinct token is penalised once, however often it occurs.
  std::vector<int32_t> distinct(history_.begin(), history_.end());
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  for (int32_t token : distinct) {
    check_in_vocabulary(token, logits.size(), "remembered");
    float& logit = logits[size_t(token)];
    if (logit == kMinusInfinity) continue;  // stays never drawn
    logit = saturate(logit > 0.0f ? logit / options_.repetition_penalty : logit * options_.repetition_penalty);
  }
}

void Sampler::keep_top_p(double wanted_mass) {
  // Find the last token (best first) that top-p keeps without sorting: a
  // histogram of the mass over logit bins finds the bin where the running
  // mass crosses `wanted_mass`, and only that bin is sorted.
  // Logits are finite, in [-FLT_MAX, 0]; in double, neither the bin width
  // (even for a lowest logit of -1e-45) nor any product overflows.
  constexpr int kBins = 1024;
  double lowest = 0.0;  // the best logit is 0
  for (const Candidate& c : candidates_) lowest = std::min(lowest, double(c.logit));
  const double bins_per_logit = lowest < 0.0 ? double(kBins) / -lowest : 0.0;
  auto bin_of = [&](const Candidate& c) {
    return int(std::clamp(-double(c.logit) * bins_per_logit, 0.0, double(kBins - 1)));
  };

  std::vector<double> bin_mass(kBins, 0.0);
  std::vector<int> bin_count(kBins, 0);
  for (const Candidate& c : candidates_) {
    bin_mass[size_t(bin_of(c))] += c.weight;
    ++bin_count[size_t(bin_of(c))];
  }
  double remaining = wanted_mass;
  int crossing_bin = 0;
  while (crossing_bin < kBins - 1 && bin_mass[size_t(crossing_bin)] < remaining) {
    remaining -= bin_mass[size_t(crossing_bin)];
    ++crossing_bin;
  }
  // Rounding can carry the walk past the last occupied bin: step back to it
  // (bin 0 always holds the best token).
  while (crossing_bin > 0 && bin_count[size_t(crossing_bin)] == 0) --crossing_bin;

  boundary_bin_.clear();
  for (const Candidate& c : candidates_) {
    if (bin_of(c) == crossing_bin) boundary_bin_.push_back(c);
  }
  std::sort(boundary_bin_.begin(), boundary_bin_.end(), ranks_before);
  Candidate last_kept = boundary_bin_.back();  // if rounding leaves the mass short, keep the bin
  for (const Candidate& c : boundary_bin_) {
    remaining -= c.weight;
    if (remaining <= 0.0) {
      last_kept = c;
      break;
    }
  }
  // Stable: the survivors stay in id order.
  std::erase_if(candidates_, [&](const Candidate& c) { return ranks_before(last_kept, c); });
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (logits.empty()) fail("sampling: empty logits row");
  logits_.assign(logits.begin(), logits.end());
  // NaN and +inf come from the model (its weights, an overflow in the
  // forward pass), and are reported as its error, not the sampler's.
  for (size_t i = 0; i < logits_.size(); ++i) {
    if (std::isnan(logits_[i]) || logits_[i] == kInfinity) {
      fail("the model produced non-finite logits at position {} (the logit of token {} is {})", accepted_ - 1, i,
           logits_[i]);
    }
  }
  apply_logit_bias(logits_);
  apply_repetition_penalty(logits_);
  apply_frequency_and_presence_penalties(logits_);

  // max_element returns the first maximum: greedy ties go to the lower id.
  const auto best = std::max_element(logits_.begin(), logits_.end());
  const float max_logit = *best;
  if (max_logit == kMinusInfinity)
    fail("the model produced non-finite logits at position {} (every logit is -inf)", accepted_ - 1);
  if (options_.temperature == 0.0f) return int32_t(best - logits_.begin());

  // In double, then clamped: (logit - max) / temperature leaves float's
  // range for tiny temperatures or a wide spread of logits, and such a
  // token's weight is exp(-FLT_MAX) = 0 all the same.
  const double inverse_temperature = 1.0 / double(options_.temperature);
  candidates_.clear();
  for (size_t i = 0; i < logits_.size(); ++i) {
    if (logits_[i] == kMinusInfinity) continue;  // weight 0: never drawn
    const double scaled = (double(logits_[i]) - double(max_logit)) * inverse_temperature;
    candidates_.push_back({int32_t(i), float(std::max(scaled, -double(kLargest))), 0.0f});
  }

  const size_t top_k = size_t(options_.top_k);
  if (top_k > 0 && top_k < candidates_.size()) {
    const auto kth = candidates_.begin() + ptrdiff_t(top_k);
    std::nth_element(candidates_.begin(), kth, candidates_.end(), ranks_before);
    candidates_.resize(top_k);
    sort_by_id(candidates_);
  }
  for (Candidate& candidate : candidates_) candidate.weight = std::exp(candidate.logit);

  // min-p keeps p >= min_p * p(best); with the best at logit 0 that is logit >= log(min_p).
  const float min_p_floor = options_.min_p > 0.0f ? std::log(options_.min_p) : kMinusInfinity;
  if (options_.top_p < 1.0f) {
    double mass = 0.0;
    for (const Candidate& candidate : candidates_) mass += candidate.weight;
    keep_top_p(double(options_.top_p) * mass);
  }
  std::erase_if(candidates_, [&](const Candidate& c) { return c.logit < min_p_floor; });

  // Inverse CDF over the kept tokens in id order.
  double total = 0.0;
  for (const Candidate& candidate : candidates_) total += candidate.weight;
  const double target = uniform() * total;
  double cumulative = 0.0;
  for (const Candidate& candidate : candidates_) {
    cumulative += candidate.weight;
    if (target < cumulative) return candidate.id;
  }
  return candidates_.back().id;  // target fell past the sum by rounding
}

}  // namespace kascade::sampling
