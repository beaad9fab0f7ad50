// Token sampling: turns one step's logits into the next token id.
// Pipeline, in llama.cpp's order: logit bias, repetition penalty, frequency
// and presence penalties, then (as transformers) temperature (0 = greedy
// argmax), top-k, top-p, min-p, and a draw from what is left:
// u = (mt19937_64 >> 11) / 2^53, then the inverse CDF over the kept tokens
// in id order, so one seed gives the same tokens with any standard library.
// Work is linear in the vocabulary; only candidates are sorted.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kascade::sampling {

struct SamplerOptions {
  float temperature = 0.8f;          // 0 = greedy (argmax, lowest id among ties)
  int32_t top_k = 40;                // keep the k most likely tokens; 0 = off
  float top_p = 0.95f;               // keep the smallest prefix with mass >= p; 1 = off
  float min_p = 0.05f;               // drop tokens below min_p * p(best); 0 = off
  float repetition_penalty = 1.0f;   // llama.cpp rule: logit > 0 ? l / r : l * r; 1 = off
  int32_t repetition_window = 64;    // the last N accepted tokens are penalised
  // OpenAI's rule over the tokens generated so far (not the prompt): a token
  // generated c times has its logit lowered by c * frequency + (c > 0) * presence.
  float frequency_penalty = 0.0f;    // 0 = off
  float presence_penalty = 0.0f;     // 0 = off
  std::vector<std::pair<int32_t, float>> logit_bias = {};  // (token, added to its logit)
  uint64_t seed = 0;
};

// Throws kascade::Error naming the first option that is out of range.
void validate(const SamplerOptions& options);

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options);

  // Picks a token from one row of logits (one per vocabulary entry). Any
  // finite options give a valid draw. Throws kascade::Error on NaN or +inf
  // logits and when every logit is -inf, as the model's error ("the model
  // produced non-finite logits at position N", N = tokens accepted - 1: the
  // position whose logits these are), and when a remembered token lies
  // outside the vocabulary. -inf logits are tokens never drawn.
  int32_t sample(std::span<const float> logits);

  // Remembers a prompt token for the repetition penalty (llama.cpp and
  // transformers both penalise the prompt's tokens too).
  void accept(int32_t token);
  // Remembers a generated token: for the repetition penalty, as accept(), and
  // for the frequency and presence penalties, which count only these.
  void accept_generated(int32_t token);

  // Forgets the history and restarts the random stream from the seed.
  void reset();

  const SamplerOptions& options() const { return options_; }

 private:
  struct Candidate {
    int32_t id;
    float logit;   // (penalised logit - max) / temperature: 0 for the best
    float weight;  // exp(logit), unnormalised probability
  };

  void apply_logit_bias(std::vector<float>& logits) const;
  void apply_repetition_penalty(std::vector<float>& logits) const;
  void apply_frequency_and_presence_penalties(std::vector<float>& logits) const;
  // Keeps the shortest best-first prefix of candidates_ whose weight reaches
  // `wanted_mass`, leaving the survivors in id order.
  void keep_top_p(double wanted_mass);
  double uniform();  // [0, 1), 53 random bits

  SamplerOptions options_;
  std::mt19937_64 rng_;
  std::deque<int32_t> history_;
  std::unordered_map<int32_t, int64_t> generated_counts_;  // for the frequency and presence penalties
  int64_t accepted_ = 0;  // tokens accepted since the last reset
  std::vector<float> logits_;  // penalised copy of the row
  std::vector<Candidate> candidates_;
  std::vector<Candidate> boundary_bin_;  // top-p's scratch
};

}  // namespace kascade::sampling
