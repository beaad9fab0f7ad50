// Tests for the sampler and the stop-string matcher. Distributions are checked
// against an exact reference written here in probability space with full
// sorts (a different route from the sampler's), using a chi-square bound on
// many draws; exact draws are checked against an inverse CDF fed by our own
// copy of the random stream.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "sampling/sampler.h"
#include "sampling/stop_strings.h"

namespace kascade::sampling {
namespace {

// The filtered, renormalised distribution the sampler should draw from:
// logit bias, repetition penalty over the last tokens of the prompt
// (`history`) and the generated ones, OpenAI's frequency and presence
// penalties over the generated ones (counted here with a map), then, as
// transformers, temperature, top-k, top-p, min-p.
std::vector<double> reference_distribution(std::vector<float> logits, const SamplerOptions& options,
                                           const std::vector<int32_t>& history,
                                           const std::vector<int32_t>& generated = {}) {
  for (const auto& [token, bias] : options.logit_bias) logits[size_t(token)] += bias;
  std::vector<int32_t> accepted = history;
  accepted.insert(accepted.end(), generated.begin(), generated.end());
  const size_t window = std::min(accepted.size(), size_t(options.repetition_window));
  const std::set<int32_t> penalised(accepted.end() - ptrdiff_t(window), accepted.end());
  for (int32_t token : penalised) {
    float& logit = logits[size_t(token)];
    logit = logit > 0 ? logit / options.repetition_penalty : logit * options.repetition_penalty;
  }
  std::map<int32_t, int> counts;
  for (int32_t token : generated) ++counts[token];
  for (const auto& [token, count] : counts)
    logits[size_t(token)] -= float(count) * options.frequency_penalty + options.presence_penalty;
  const size_t vocab = logits.size();
  std::vector<double> probs(vocab);
  for (size_t i = 0; i < vocab; ++i) probs[i] = std::exp(double(logits[i]) / options.temperature);
  auto normalise = [&] {
    const double sum = std::accumulate(probs.begin(), probs.end(), 0.0);
    for (double& p : probs) p /= sum;
  };
  normalise();
  std::vector<size_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return probs[a] > probs[b]; });
  if (options.top_k > 0) {
    for (size_t rank = size_t(options.top_k); rank < vocab; ++rank) probs[order[rank]] = 0;
    normalise();
  }
  double cumulative = 0;
  bool reached = false;
  for (size_t rank = 0; rank < vocab; ++rank) {
    if (reached) probs[order[rank]] = 0;
    cumulative += probs[order[rank]];
    reached = reached || cumulative >= options.top_p;
  }
  normalise();
  const double best = probs[order[0]];
  for (double& p : probs) {
    if (p < options.min_p * best) p = 0;
  }
  normalise();
  return probs;
}

// Pearson's chi-square of `draws` samples against `expected`; tokens the
// reference excludes must never be drawn. Tokens expected fewer than 5 times
// share one cell, as the chi-square approximation needs.
void expect_matches_distribution(Sampler& sampler, const std::vector<float>& logits,
                                 const std::vector<double>& expected, int draws) {
  std::vector<int> counts(logits.size());
  for (int i = 0; i < draws; ++i) ++counts[size_t(sampler.sample(logits))];
  double chi_square = 0;
  int cells = 0;
  double pooled_mean = 0;
  int pooled_count = 0;
  for (size_t token = 0; token < logits.size(); ++token) {
    if (expected[token] == 0) {
      EXPECT_EQ(counts[token], 0) << "token " << token << " is filtered out but was drawn";
      continue;
    }
    const double mean = expected[token] * draws;
    if (mean < 5) {
      pooled_mean += mean;
      pooled_count += counts[token];
      continue;
    }
    chi_square += (counts[token] - mean) * (counts[token] - mean) / mean;
    ++cells;
  }
  if (pooled_mean > 0) {
    chi_square += (pooled_count - pooled_mean) * (pooled_count - pooled_mean) / std::max(pooled_mean, 5.0);
    ++cells;
  }
  // Mean + 6 standard deviations of the chi-square distribution: a correct
  // sampler fails this with probability far below 1e-6, a wrong one by far.
  const int degrees_of_freedom = std::max(cells - 1, 1);
  const double bound = degrees_of_freedom + 6 * std::sqrt(2.0 * degrees_of_freedom);
  EXPECT_LT(chi_square, bound) << "degrees of freedom " << degrees_of_freedom;
}

std::vector<float> random_logits(size_t vocab, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::vector<float> logits(vocab);
  for (float& logit : logits) logit = scale * (float(rng() % 20001) / 10000.0f - 1.0f);
  return logits;
}

SamplerOptions plain(float temperature) {
  return {.temperature = temperature, .top_k = 0, .top_p = 1, .min_p = 0,
          .repetition_penalty = 1, .repetition_window = 64, .seed = 7};
}

struct DistributionCase {
  const char* name;
  SamplerOptions options;
};

TEST(Sampler, DrawsFromTheFilteredDistribution) {
  // 200 tokens over 8 nats: dense enough that every filter's boundary falls
  // between close neighbours.
  const std::vector<float> logits = random_logits(200, 1, 4.0f);
  const std::vector<int32_t> history = {3, 3, 17, 25, 8, 1, 150, 199};
  std::vector<DistributionCase> cases;
  cases.push_back({"temperature 1", plain(1.0f)});
  cases.push_back({"temperature 0.5", plain(0.5f)});
  cases.push_back({"temperature 2", plain(2.0f)});
  auto top_k = plain(1.0f); top_k.top_k = 37;
  cases.push_back({"top-k 37", top_k});
  auto top_p = plain(1.0f); top_p.top_p = 0.6f;
  cases.push_back({"top-p 0.6", top_p});
  auto min_p = plain(1.0f); min_p.min_p = 0.1f;
  cases.push_back({"min-p 0.1", min_p});
  auto combined = plain(0.7f); combined.top_k = 60; combined.top_p = 0.9f; combined.min_p = 0.02f;
  cases.push_back({"combined", combined});
  auto penalised = plain(1.0f); penalised.repetition_penalty = 1.8f; penalised.repetition_window = 5;
  cases.push_back({"penalty over the last 5", penalised});
  auto everything = combined; everything.repetition_penalty = 1.3f;
  cases.push_back({"everything", everything});
  auto frequency = plain(1.0f); frequency.frequency_penalty = 0.7f;
  cases.push_back({"frequency penalty", frequency});
  auto presence = plain(1.0f); presence.presence_penalty = 1.5f;
  cases.push_back({"presence penalty", presence});
  auto negative = plain(1.0f); negative.frequency_penalty = -0.4f; negative.presence_penalty = -1.0f;
  cases.push_back({"negative penalties", negative});
  auto bias = plain(1.0f); bias.logit_bias = {{0, 5.0f}, {42, -3.5f}, {150, 2.0f}};
  cases.push_back({"logit bias", bias});
  auto all = everything; all.frequency_penalty = 0.5f; all.presence_penalty = 0.8f;
  all.logit_bias = {{3, -2.0f}, {60, 4.0f}};
  cases.push_back({"everything with penalties and bias", all});

  // Generated tokens: 17 three times, 3 twice, 60 and 120 once.
  const std::vector<int32_t> generated = {17, 3, 17, 60, 120, 3, 17};
  for (const DistributionCase& c : cases) {
    SCOPED_TRACE(c.name);
    Sampler sampler(c.options);
    for (int32_t token : history) sampler.accept(token);
    for (int32_t token : generated) sampler.accept_generated(token);
    expect_matches_distribution(sampler, logits, reference_distribution(logits, c.options, history, generated),
                                40000);
  }
}

TEST(Sampler, TopPOverALargeFlatVocabularyStaysInTheNucleus) {
  // A flat 150K vocabulary makes the nucleus tens of thousands of tokens wide,
  // so the sampler has to grow its sorted prefix several times.
  const std::vector<float> logits = random_logits(150000, 2, 1.0f);
  SamplerOptions options = plain(1.0f);
  options.top_p = 0.3f;
  const std::vector<double> expected = reference_distribution(logits, options, {});
  const auto nucleus = std::count_if(expected.begin(), expected.end(), [](double p) { return p > 0; });
  ASSERT_GT(nucleus, 20000);
  ASSERT_LT(nucleus, 100000);

  // Tokens bucketed by id keep the chi-square test meaningful with few draws.
  constexpr int kBuckets = 10;
  constexpr int kDraws = 400;
  std::vector<double> bucket_mass(kBuckets);
  for (size_t token = 0; token < expected.size(); ++token) bucket_mass[token % kBuckets] += expected[token];
  std::vector<int> bucket_counts(kBuckets);
  Sampler sampler(options);
  for (int i = 0; i < kDraws; ++i) {
    const int32_t token = sampler.sample(logits);
    ASSERT_GT(expected[size_t(token)], 0) << "token " << token << " lies outside the nucleus";
    ++bucket_counts[size_t(token) % kBuckets];
  }
  double chi_square = 0;
  for (int b = 0; b < kBuckets; ++b) {
    const double mean = bucket_mass[b] * kDraws;
    chi_square += (bucket_counts[b] - mean) * (bucket_counts[b] - mean) / mean;
  }
  EXPECT_LT(chi_square, (kBuckets - 1) + 6 * std::sqrt(2.0 * (kBuckets - 1)));
}

// The sampler's documented stream: u = (mt19937_64 >> 11) / 2^53, then the
// inverse CDF over the kept tokens in id order.
int32_t inverse_cdf(const std::vector<double>& probs, double u) {
  double cumulative = 0;
  int32_t last_kept = -1;
  for (size_t token = 0; token < probs.size(); ++token) {
    if (probs[token] == 0) continue;
    cumulative += probs[token];
    last_kept = int32_t(token);
    if (u < cumulative) return last_kept;
  }
  return last_kept;
}

TEST(Sampler, TopPCutsInsideATightCluster) {
  // 599 near-equal tokens and one far below: the cut falls inside a dense
  // cluster, where a coarse selection would keep or drop too much.
  std::vector<float> logits(600);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = 1e-3f * float((i * 7919) % 599) / 599.0f;
  logits[0] = -30.0f;
  SamplerOptions options = plain(1.0f);
  options.top_p = 0.5f;
  Sampler sampler(options);
  const std::vector<double> expected = reference_distribution(logits, options, {});
  expect_matches_distribution(sampler, logits, expected, 12000);
}

TEST(Sampler, FollowsTheDocumentedRandomStream) {
  const std::vector<float> logits = random_logits(30, 3, 3.0f);
  for (const bool filtered : {false, true}) {
    SCOPED_TRACE(filtered ? "top-k and top-p" : "temperature only");
    SamplerOptions options = plain(0.9f);
    options.seed = 12345;
    if (filtered) {
      options.top_k = 10;
      options.top_p = 0.8f;
    }
    const std::vector<double> probs = reference_distribution(logits, options, {});
    std::mt19937_64 stream(options.seed);
    Sampler sampler(options);
    for (int i = 0; i < 1000; ++i) {
      const double u = double(stream() >> 11) * 0x1.0p-53;
      ASSERT_EQ(sampler.sample(logits), inverse_cdf(probs, u)) << "draw " << i;
    }
  }
}

TEST(Sampler, SameSeedSameTokensAndResetRestarts) {
  const std::vector<float> logits = random_logits(1000, 4, 2.0f);
  SamplerOptions options;  // the defaults: every filter on
  options.seed = 99;
  Sampler first(options), second(options);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 200; ++i) {
    tokens.push_back(first.sample(logits));
    ASSERT_EQ(second.sample(logits), tokens.back());
  }
  first.reset();
  for (int i = 0; i < 200; ++i) ASSERT_EQ(first.sample(logits), tokens[size_t(i)]);
  options.seed = 100;
  Sampler other_seed(options);
  int differences = 0;
  for (int i = 0; i < 200; ++i) differences += other_seed.sample(logits) != tokens[size_t(i)];
  EXPECT_GT(differences, 20);
}

TEST(Sampler, GreedyPicksTheLowestIdAmongTies) {
  Sampler greedy(plain(0.0f));
  EXPECT_EQ(greedy.sample(std::vector<float>{1, 5, 2, 5, -3}), 1);
  EXPECT_EQ(greedy.sample(std::vector<float>{-2, -1, -1}), 1);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(greedy.sample(std::vector<float>{-inf, -inf, 0.5f}), 2);
}

TEST(Sampler, TopKOneIsGreedy) {
  SamplerOptions top_one = plain(1.5f);
  top_one.top_k = 1;
  Sampler sampler(top_one), greedy(plain(0.0f));
  for (uint32_t row = 0; row < 200; ++row) {
    std::vector<float> logits = random_logits(500, 100 + row, 5.0f);
    // Force ties at the top every other row: copy the best logit to a later id.
    if (row % 2 == 0) {
      const auto best = std::max_element(logits.begin(), logits.end());
      logits.back() = *best;
    }
    const auto expected = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    ASSERT_EQ(greedy.sample(logits), expected);
    ASSERT_EQ(sampler.sample(logits), expected);
  }
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogitsOnce) {
  SamplerOptions options = plain(0.0f);
  options.repetition_penalty = 2.0f;
  options.repetition_window = 3;

  // Token 2 (3.0) beats token 7 (1.4) until penalised once: 3.0 / 2 = 1.5 > 1.4
  // still wins; penalising per occurrence (0.375) would lose.
  std::vector<float> positive(10, 0.0f);
  positive[2] = 3.0f;
  positive[7] = 1.4f;
  Sampler once(options);
  for (int32_t token : {2, 2, 2}) once.accept(token);
  EXPECT_EQ(once.sample(positive), 2);
  positive[7] = 1.6f;  // now 1.5 < 1.6
  EXPECT_EQ(once.sample(positive), 7);

  // Negative logits are multiplied: token 0 goes from -1 to -2, below token 1's -1.5.
  std::vector<float> negative = {-1.0f, -1.5f, -4.0f};
  Sampler penalised(options);
  penalised.accept(0);
  EXPECT_EQ(penalised.sample(negative), 1);

  // The window holds the last 3 tokens: after three more, token 0 is forgotten.
  for (int32_t token : {2, 2, 2}) penalised.accept(token);
  EXPECT_EQ(penalised.sample(negative), 0);

  // A window of 0 turns the penalty off.
  options.repetition_window = 0;
  Sampler no_window(options);
  no_window.accept(0);
  EXPECT_EQ(no_window.sample(negative), 0);
}

TEST(Sampler, FrequencyAndPresencePenaltiesCountOnlyGeneratedTokens) {
  // Token 0 (2.0) against token 1 (1.0), token 0 generated twice:
  // 2 - 2 * 0.3 - 0.5 = 0.9 loses; 2 - 2 * 0.2 - 0.5 = 1.1 still wins.
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f};
  auto greedy_after = [&](float frequency, float presence, std::initializer_list<int32_t> prompt,
                          std::initializer_list<int32_t> generated) {
    SamplerOptions options = plain(0.0f);
    options.frequency_penalty = frequency;
    options.presence_penalty = presence;
    Sampler sampler(options);
    for (int32_t token : prompt) sampler.accept(token);
    for (int32_t token : generated) sampler.accept_generated(token);
    return sampler.sample(logits);
  };
  EXPECT_EQ(greedy_after(0.3f, 0.5f, {}, {0, 0}), 1);
  EXPECT_EQ(greedy_after(0.2f, 0.5f, {}, {0, 0}), 0);
  // Presence counts once: 2 - 0.9 = 1.1 wins after one or many.
  EXPECT_EQ(greedy_after(0.0f, 0.9f, {}, {0, 0, 0, 0}), 0);
  EXPECT_EQ(greedy_after(0.0f, 1.1f, {}, {0}), 1);
  // Frequency grows with the count: 2 - 4 * 0.3 = 0.8 loses.
  EXPECT_EQ(greedy_after(0.3f, 0.0f, {}, {0, 0, 0}), 0);
  EXPECT_EQ(greedy_after(0.3f, 0.0f, {}, {0, 0, 0, 0}), 1);
  // The prompt's tokens are not penalised.
  EXPECT_EQ(greedy_after(2.0f, 2.0f, {0, 0, 0, 0, 0}, {}), 0);
  // Negative values encourage: 1 + 2 * 0.6 = 2.2 beats 2.
  EXPECT_EQ(greedy_after(-0.6f, 0.0f, {}, {1, 1}), 1);

  // reset() forgets the counts.
  SamplerOptions options = plain(0.0f);
  options.presence_penalty = 2.0f;
  Sampler sampler(options);
  sampler.accept_generated(0);
  EXPECT_EQ(sampler.sample(logits), 1);
  sampler.reset();
  EXPECT_EQ(sampler.sample(logits), 0);
}

TEST(Sampler, LogitBiasIsAddedToTheLogit) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f};
  auto greedy_with = [&](std::vector<std::pair<int32_t, float>> bias) {
    SamplerOptions options = plain(0.0f);
    options.logit_bias = std::move(bias);
    return Sampler(options).sample(logits);
  };
  EXPECT_EQ(greedy_with({}), 0);
  EXPECT_EQ(greedy_with({{2, 2.5f}}), 2);   // 0 + 2.5 > 2
  EXPECT_EQ(greedy_with({{2, 1.5f}}), 0);   // 0 + 1.5 < 2
  EXPECT_EQ(greedy_with({{0, -1.5f}}), 1);  // 2 - 1.5 < 1
  // -100 bans a token at any temperature; +100 all but forces it.
  SamplerOptions options = plain(1.0f);
  options.logit_bias = {{0, -100.0f}, {1, -100.0f}};
  Sampler banned(options);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(banned.sample(logits), 2);
  options.logit_bias = {{2, 100.0f}};
  Sampler forced(options);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(forced.sample(logits), 2);
  // A bias does not make a -inf token drawable.
  const float inf = std::numeric_limits<float>::infinity();
  options = plain(0.0f);
  options.logit_bias = {{0, 100.0f}};
  EXPECT_EQ(Sampler(options).sample(std::vector<float>{-inf, -1.0f}), 1);
}

TEST(Sampler, NegativeInfinityTokensAreNeverDrawn) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> logits = {-inf, 1.0f, -inf, 1.0f, -inf};
  Sampler sampler(plain(1.0f));
  for (int i = 0; i < 1000; ++i) {
    const int32_t token = sampler.sample(logits);
    ASSERT_TRUE(token == 1 || token == 3) << token;
  }
}

void expect_error_mentioning(const auto& action, const std::string& word) {
  try {
    action();
    ADD_FAILURE() << "expected kascade::Error mentioning '" << word << "'";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(word), std::string::npos) << error.what();
  }
}

TEST(Sampler, RejectsBadOptions) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  auto with = [](auto change) {
    SamplerOptions options;
    change(options);
    return [options] { Sampler sampler(options); };
  };
  expect_error_mentioning(with([](SamplerOptions& o) { o.temperature = -0.1f; }), "temperature");
  expect_error_mentioning(with([&](SamplerOptions& o) { o.temperature = nan; }), "temperature");
  expect_error_mentioning(with([&](SamplerOptions& o) { o.temperature = inf; }), "temperature");
  expect_error_mentioning(with([](SamplerOptions& o) { o.top_k = -1; }), "top-k");
  expect_error_mentioning(with([](SamplerOptions& o) { o.top_p = 0.0f; }), "top-p");
  expect_error_mentioning(with([](SamplerOptions& o) { o.top_p = 1.01f; }), "top-p");
  expect_error_mentioning(with([&](SamplerOptions& o) { o.top_p = nan; }), "top-p");
  expect_error_mentioning(with([](SamplerOptions& o) { o.min_p = -0.01f; }), "min-p");
  expect_error_mentioning(with([](SamplerOptions& o) { o.min_p = 1.5f; }), "min-p");
  expect_error_mentioning(with([](SamplerOptions& o) { o.repetition_penalty = 0.0f; }), "penalty");
  expect_error_mentioning(with([&](SamplerOptions& o) { o.repetition_penalty = inf; }), "penalty");
  expect_error_mentioning(with([](SamplerOptions& o) { o.repetition_window = -5; }), "window");
  expect_error_mentioning(with([&](SamplerOptions& o) { o.frequency_penalty = nan; }), "frequency penalty");
  expect_error_mentioning(with([&](SamplerOptions& o) { o.presence_penalty = -inf; }), "presence penalty");
  expect_error_mentioning(with([](SamplerOptions& o) { o.logit_bias = {{-1, 1.0f}}; }), "logit bias token -1");
  expect_error_mentioning(with([&](SamplerOptions& o) { o.logit_bias = {{3, nan}}; }), "token 3");
  // The edges of each range are accepted.
  EXPECT_NO_THROW(Sampler(SamplerOptions{.temperature = 0, .top_k = 0, .top_p = 1, .min_p = 1,
                                         .repetition_penalty = 0.5f, .repetition_window = 0}));
}

// Options at the edges of float's range used to overflow the scaled logits to
// -inf or NaN, and a NaN became an array index in top-p's binning (SIGSEGV).
// Every finite option must give a token of the vocabulary; a temperature that
// tiny is greedy, one that huge is close to uniform.
TEST(Sampler, AnyFiniteOptionsGiveAValidDraw) {
  const float big = std::numeric_limits<float>::max();
  const float tiny = std::numeric_limits<float>::denorm_min();
  std::vector<std::vector<float>> rows = {random_logits(500, 11, 30.0f), random_logits(500, 12, 1e30f)};
  rows.push_back(random_logits(500, 13, 5.0f));
  rows.back()[17] = big;  // the extremes of the range
  rows.back()[18] = -big;
  const std::vector<int32_t> history = {1, 2, 3, 17, 18, 40, 41, 42};
  for (const float temperature : {tiny, 1e-38f, 1e-37f, 1e-30f, 0.1f, 1.0f, 1e30f, 3e38f, big}) {
    for (const float penalty : {tiny, 1e-38f, 1.0f, 1e37f, big}) {
      for (const int32_t top_k : {0, 1, 40}) {
        for (const float top_p : {tiny, 0.5f, 0.95f, 1.0f}) {
          for (const float min_p : {0.0f, tiny, 0.05f, 1.0f}) {
            SamplerOptions options{.temperature = temperature, .top_k = top_k, .top_p = top_p, .min_p = min_p,
                                   .repetition_penalty = penalty, .repetition_window = 64, .seed = 5};
            Sampler sampler(options);
            for (const int32_t token : history) sampler.accept(token);
            for (const std::vector<float>& row : rows) {
              for (int draw = 0; draw < 3; ++draw) {
                const int32_t token = sampler.sample(row);
                ASSERT_TRUE(token >= 0 && token < int32_t(row.size()))
                    << "temperature " << temperature << " penalty " << penalty << " top-k " << top_k << " top-p "
                    << top_p << " min-p " << min_p << ": token " << token;
              }
            }
          }
        }
      }
    }
  }
  // The CLI's crashing cases, on a wide row: a tiny temperature is greedy.
  std::vector<float> row = random_logits(49152, 21, 40.0f);
  const auto best = int32_t(std::max_element(row.begin(), row.end()) - row.begin());
  row[size_t(best)] += 1.0f;  // no tie at the top
  for (const float temperature : {1e-38f, 1e-37f, tiny}) {
    Sampler sampler({.temperature = temperature, .top_k = 0, .top_p = 0.95f, .min_p = 0.05f,
                     .repetition_penalty = 1.0f, .repetition_window = 64, .seed = 1});
    for (int draw = 0; draw < 20; ++draw) ASSERT_EQ(sampler.sample(row), best) << temperature;
  }
  SamplerOptions penalised{.temperature = 0.1f, .top_k = 0, .top_p = 0.95f, .min_p = 0.05f,
                           .repetition_penalty = 1e37f, .repetition_window = 64, .seed = 1};
  Sampler sampler(penalised);
  for (int32_t token = 0; token < 64; ++token) sampler.accept(token);
  for (int draw = 0; draw < 20; ++draw) {
    const int32_t token = sampler.sample(row);
    ASSERT_TRUE(token >= 0 && token < int32_t(row.size())) << token;
  }
  // Frequency, presence and bias at float's extremes saturate too.
  for (const float extreme : {-big, big}) {
    SamplerOptions options{.temperature = 1.0f, .top_k = 0, .top_p = 0.95f, .min_p = 0.05f,
                           .frequency_penalty = extreme, .presence_penalty = extreme,
                           .logit_bias = {{1, extreme}, {2, -extreme}}, .seed = 1};
    Sampler extreme_sampler(options);
    for (int32_t token = 0; token < 64; ++token) extreme_sampler.accept_generated(token % 8);
    for (const std::vector<float>& r : rows) {
      const int32_t token = extreme_sampler.sample(r);
      ASSERT_TRUE(token >= 0 && token < int32_t(r.size())) << extreme << ": " << token;
    }
  }
}

TEST(Sampler, RejectsBadLogitsAndHistory) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  Sampler sampler(plain(1.0f));
  expect_error_mentioning([&] { sampler.sample(std::vector<float>{0.0f, nan}); }, "token 1");
  // NaN and inf are the model's error, at the position whose logits they are.
  for (const int32_t token : {5, 6, 7}) sampler.accept(token);
  expect_error_mentioning([&] { sampler.sample(std::vector<float>{0.0f, nan}); },
                          "the model produced non-finite logits at position 2");
  expect_error_mentioning([&] { sampler.sample(std::vector<float>{inf, 0.0f}); }, "non-finite logits");
  sampler.reset();
  expect_error_mentioning([&] { sampler.sample(std::vector<float>{inf, 0.0f}); }, "token 0");
  expect_error_mentioning([&] { sampler.sample(std::vector<float>{-inf, -inf}); }, "-inf");
  expect_error_mentioning([&] { sampler.sample(std::vector<float>{}); }, "empty");
  SamplerOptions options = plain(1.0f);
  options.repetition_penalty = 1.1f;
  Sampler remembering(options);
  remembering.accept(5);
  expect_error_mentioning([&] { remembering.sample(std::vector<float>{0.0f, 1.0f}); }, "token 5");
  options = plain(1.0f);
  options.frequency_penalty = 0.5f;
  Sampler counting(options);
  counting.accept_generated(4);
  expect_error_mentioning([&] { counting.sample(std::vector<float>{0.0f, 1.0f}); }, "token 4");
  options = plain(1.0f);
  options.logit_bias = {{9, 1.0f}};
  Sampler biased(options);
  expect_error_mentioning([&] { biased.sample(std::vector<float>{0.0f, 1.0f}); }, "logit bias token 9");
}

// ---- stop strings ----

// Pushes `pieces` one by one and returns everything shown, finish() included.
std::string stream_through(StopStringMatcher& matcher, const std::vector<std::string>& pieces,
                           std::vector<std::string>* shown_per_push = nullptr) {
  std::string shown;
  for (const std::string& piece : pieces) {
    const std::string out = matcher.push(piece);
    if (shown_per_push) shown_per_push->push_back(out);
    shown += out;
  }
  return shown + matcher.finish();
}

TEST(StopStrings, NothingHeldWithoutStopStrings) {
  StopStringMatcher matcher({});
  EXPECT_EQ(matcher.push("Hello"), "Hello");
  EXPECT_EQ(matcher.push(" <|end|>"), " <|end|>");
  EXPECT_FALSE(matcher.stopped());
}

TEST(StopStrings, HoldsBackAPossibleStartAndStopsOnTheFullString) {
  StopStringMatcher matcher({"<|end|>"});
  std::vector<std::string> shown;
  EXPECT_EQ(stream_through(matcher, {"abc<|e", "n", "d|>", "tail"}, &shown), "abc");
  EXPECT_EQ(shown, (std::vector<std::string>{"abc", "", "", ""}));
  EXPECT_TRUE(matcher.stopped());
  EXPECT_EQ(matcher.matched_string(), "<|end|>");
}

TEST(StopStrings, ReleasesAFalseAlarm) {
  StopStringMatcher matcher({"<|end|>"});
  EXPECT_EQ(matcher.push("x<|e"), "x");
  EXPECT_EQ(matcher.push("lse"), "<|else");
  EXPECT_FALSE(matcher.stopped());
}

TEST(StopStrings, SelfOverlappingStopString) {
  StopStringMatcher matcher({"aab"});
  std::vector<std::string> shown;
  EXPECT_EQ(stream_through(matcher, {"a", "a", "a", "b"}, &shown), "a");
  EXPECT_EQ(shown, (std::vector<std::string>{"", "", "a", ""}));
  EXPECT_TRUE(matcher.stopped());
}

TEST(StopStrings, EarliestMatchWins) {
  StopStringMatcher matcher({"world", "lo w"});
  EXPECT_EQ(matcher.push("hello world"), "hel");
  EXPECT_EQ(matcher.matched_string(), "lo w");
  EXPECT_EQ(matcher.push("more"), "");
}

TEST(StopStrings, FinishReleasesHeldText) {
  StopStringMatcher matcher({"###"});
  EXPECT_EQ(matcher.push("ok ##"), "ok ");
  EXPECT_EQ(matcher.finish(), "##");
  EXPECT_EQ(matcher.finish(), "");
}

TEST(StopStrings, SplitMultibyteCharacter) {
  StopStringMatcher matcher({"\xe3\x80\x82"});  // U+3002 IDEOGRAPHIC FULL STOP
  EXPECT_EQ(matcher.push("abc\xe3\x80"), "abc");
  EXPECT_EQ(matcher.push("\x82"), "");
  EXPECT_TRUE(matcher.stopped());
}

TEST(StopStrings, RejectsAnEmptyStopString) {
  expect_error_mentioning([] { StopStringMatcher matcher({"ok", ""}); }, "stop string 1");
}

// Generated text is always valid UTF-8 (tokenizer::StreamDecoder), so such a
// stop string could never match.
TEST(StopStrings, RejectsInvalidUtf8) {
  expect_error_mentioning([] { StopStringMatcher matcher({"\xff"}); }, "stop string 0 is not valid UTF-8");
  expect_error_mentioning([] { check_stop_strings(std::vector<std::string>{"ok", "a\xe3\x80"}); },
                          "stop string 1 is not valid UTF-8");
  expect_error_mentioning([] { check_stop_strings(std::vector<std::string>{"\xed\xa0\x80"}); },  // a surrogate
                          "not valid UTF-8");
  EXPECT_NO_THROW(check_stop_strings(std::vector<std::string>{"\xe3\x80\x82", "</s>"}));
}

TEST(StopStrings, RandomStreamsMatchABruteForceReference) {
  const std::vector<std::string> stops = {"abc", "cab", "bb", "acca"};
  std::mt19937 rng(5);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const size_t length = rng() % 40;
    for (size_t i = 0; i < length; ++i) text += "abc"[rng() % 3];
    // Reference: cut at the earliest occurrence of any stop string.
    size_t cut = text.size();
    for (const std::string& stop : stops) cut = std::min(cut, text.find(stop));
    // Random chunking; after each push, what was shown must be exactly the
    // text so far minus its longest tail that starts some stop string.
    StopStringMatcher matcher(stops);
    std::string shown;
    size_t fed = 0;
    while (fed < text.size() && !matcher.stopped()) {
      const size_t chunk = std::min(text.size() - fed, size_t(1 + rng() % 5));
      shown += matcher.push(std::string_view(text).substr(fed, chunk));
      fed += chunk;
      if (matcher.stopped()) break;
      size_t held = 0;
      for (const std::string& stop : stops) {
        for (size_t k = 1; k < stop.size() && k <= fed; ++k) {
          if (text.compare(fed - k, k, stop, 0, k) == 0) held = std::max(held, k);
        }
      }
      ASSERT_EQ(shown, text.substr(0, fed - held)) << "text " << text << " fed " << fed;
    }
    shown += matcher.finish();
    ASSERT_EQ(shown, text.substr(0, cut)) << "text " << text;
    ASSERT_EQ(matcher.stopped(), cut < text.size()) << "text " << text;
  }
}

TEST(StopStrings, ScanReportsPositionAndSafeLength) {
  const std::vector<std::string> stops = {"</s>", "\n\n"};
  const StopScan found = scan_for_stop_strings("one\n\ntwo</s>", stops);
  EXPECT_EQ(found.match_index, 1);
  EXPECT_EQ(found.match_position, 3u);
  EXPECT_EQ(found.safe_length, 3u);
  const StopScan partial = scan_for_stop_strings("text</", stops);
  EXPECT_EQ(partial.match_index, -1);
  EXPECT_EQ(partial.safe_length, 4u);
}

}  // namespace
}  // namespace kascade::sampling
