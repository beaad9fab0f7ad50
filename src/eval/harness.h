// The evaluation harness behind `kascade eval`: every accuracy task and the
// long-document perplexity, at every length, for every strategy, on the same
// prompts. Accuracy samples are formatted with the model's chat template
// (raw text for a model without one), the reply starts with the task's
// answer prefix, and decoding is greedy up to the task's token limit.
// Perplexity ("ppl") is the teacher-forced NLL of the last M tokens of a
// `length`-token stretch of the haystack corpus: the prefix goes through the
// strategy's prefill path, then the tail is scored token by token through
// its decode path with the KV cache.
// A sample that throws or runs past the time limit scores 0 and is recorded
// as a failure; nothing is dropped. Results depend only on the options
// (samples are generated from the seed, decoding is greedy).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "eval/corpus.h"
#include "eval/strategy_spec.h"
#include "eval/tasks.h"
#include "kascade/profile.h"
#include "engine/backend.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kascade::eval {

inline constexpr std::string_view kPerplexityTask = "ppl";
inline constexpr int64_t kMinLength = 256;

struct EvalOptions {
  std::vector<std::string> strategies = {"dense", "kascade"};
  double budget_percent = 10;
  std::vector<int64_t> lengths = {1024, 2048, 4096, 8192};
  int samples = 10;
  uint64_t seed = 0;
  std::vector<std::string> tasks;  // empty: every accuracy task and ppl
  int64_t perplexity_tail = 128;   // M, tokens scored per perplexity document
  double time_limit_seconds = 600; // per sample and strategy
  attention::KvType kv_type = attention::KvType::F16;
  int64_t prefill_chunk = 512;
  // Used by every kascade entry; unset: evenly spread anchors.
  std::optional<kascade::KascadeProfile> kascade_profile;
};

// "1k" = 1024, "8K" = 8192, "1500" = 1500. Throws Error on anything else.
int64_t parse_length(std::string_view text);

// The run's plan, checked before any work: strategies parsed, tasks known
// (the default list filled in), lengths in [kMinLength, context_length],
// samples >= 1, the perplexity tail shorter than every length. Throws Error
// with a one-line message on the first problem.
struct EvalPlan {
  std::vector<StrategySpec> strategies;
  std::vector<std::string> tasks;
  std::vector<int64_t> lengths;
};
EvalPlan plan_eval(const EvalOptions& options, int64_t context_length);

// One strategy on one sample.
struct SampleResult {
  std::string task, strategy;
  int64_t length = 0;
  int index = 0;
  std::string status;        // "ok", "error" or "timeout"
  std::string error;         // the failure's message
  double score = 0;          // accuracy tasks: recall in [0, 1]; 0 on failure
  std::string output;        // the generated reply
  std::vector<std::string> expected;
  int64_t prompt_tokens = 0;
  double seconds = 0;
  double nll_sum = 0;          // ppl: NLL of the scored tail (nats)
  int64_t scored_tokens = 0;   // ppl: M on success, 0 on failure
  bool failed() const { return status != "ok"; }
};

// Formats a sample's prompt as the model expects and encodes it.
class PromptFormat {
 public:
  explicit PromptFormat(const tokenizer::Tokenizer& tokenizer);
  std::vector<int32_t> encode(const std::string& user_message, const std::string& answer_prefix) const;
  std::string_view name() const { return chat_ ? chat_->format_name() : "raw"; }

 private:
  const tokenizer::Tokenizer& tokenizer_;
  std::optional<tokenizer::ChatTemplate> chat_;
};

// The perplexity document `index` at `length` tokens (BOS included when the
// model wants it): consecutive paragraphs of the corpus from a seeded start.
std::vector<int32_t> perplexity_tokens(const Corpus& corpus, const tokenizer::Tokenizer& tokenizer, int64_t length,
                                       int index, uint64_t seed);

// Teacher-forced NLL (nats, summed) of the last `tail` tokens: prefill of the
// rest, then one decode step per scored token. `check` runs after every chunk
// and step (the time limit throws from it).
double tail_nll(engine::Backend& backend, engine::BackendSequence& seq, std::span<const int32_t> tokens, int64_t tail,
                int64_t prefill_chunk, const std::function<void()>& check = {});

struct EvalCallbacks {
  // Work done and total, in prompt tokens (every strategy's), for an ETA.
  std::function<void(uint64_t done, uint64_t total)> on_progress;
  // After each sample and strategy (e.g. to print failures as they happen).
  std::function<void(const SampleResult&)> on_result;
};

struct EvalRun {
  EvalOptions options;
  EvalPlan plan;
  std::string model_name;
  int64_t context_length = 0;
  std::string prompt_format;
  std::vector<SampleResult> results;  // length, task, sample, strategy order
  double seconds = 0;
};

EvalRun run_eval(engine::Backend& backend, const tokenizer::Tokenizer& tokenizer, const Corpus& corpus,
                 const EvalOptions& options, const EvalCallbacks& callbacks = {});

}  // namespace kascade::eval
