#include "eval/harness.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "core/error.h"
#include "kascade/budget.h"
#include "core/timer.h"
#include "engine/generate.h"
#include "eval/random.h"

namespace kascade::eval {
namespace {

// Thrown from inside a run when its time is up; caught by the harness only.
class TimeLimitExceeded : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

double negative_log_probability(std::span<const float> logits, int32_t token) {
  const float top = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (const float l : logits) sum += std::exp(double(l) - top);
  return std::log(sum) + top - double(logits[size_t(token)]);
}

// A dense prefill of one work item, shared by the strategies whose prefill is
// dense (Backend::dense_prefill): each continues from a copy of its cache.
struct SharedPrefill {
  std::unique_ptr<engine::BackendSequence> seq;
  std::vector<float> logits;
};

// Runs tokens through the empty `seq` and returns the last token's logits:
// by copying the shared dense prefill when the strategy's prefill is dense
// (computing it first if no strategy has), else by the strategy's own prefill.
std::vector<float> prefill(engine::Backend& backend, engine::BackendSequence& seq, std::span<const int32_t> tokens,
                           int64_t prefill_chunk, attention::KvType kv_type, SharedPrefill& shared,
                           const std::function<void()>& check) {
  const auto progress = [&](int64_t) { check(); };
  if (!backend.dense_prefill(seq)) return backend.prefill(seq, tokens, progress, prefill_chunk);
  if (!shared.seq) {
    std::unique_ptr<engine::BackendSequence> dense = backend.new_sequence({seq.capacity(), {}, kv_type});
    shared.logits = backend.prefill(*dense, tokens, progress, prefill_chunk);
    shared.seq = std::move(dense);
  }
  backend.copy_prefix(seq, *shared.seq);
  return shared.logits;
}

// One accuracy sample through one strategy: generated reply and its score.
void run_accuracy(engine::Backend& backend, const tokenizer::Tokenizer& tokenizer, const Sample& sample,
                  std::span<const int32_t> prompt, engine::BackendSequence& seq, std::vector<float> logits,
                  const std::function<void()>& check, SampleResult& result) {
  engine::GenerateOptions options;
  options.max_new_tokens = sample.max_new_tokens;
  options.sampling = sampling::SamplerOptions{.temperature = 0.0f};
  engine::GenerateCallbacks callbacks;
  callbacks.on_text = [&](const std::string&) { check(); };
  const engine::GenerationResult generated =
      engine::generate_after_prefill(backend, tokenizer, seq, prompt, std::move(logits), options, callbacks);
  result.output = generated.text;
  result.score = recall_score(sample.expected, generated.text);
}

// Teacher-forced NLL of tokens [prefix, n) after a prefill of [0, prefix)
// whose last logits are `logits`.
double score_tail(engine::Backend& backend, engine::BackendSequence& seq, std::span<const int32_t> tokens,
                  int64_t prefix, std::vector<float> logits, const std::function<void()>& check) {
  const int64_t n = int64_t(tokens.size());
  double nll = 0;
  for (int64_t i = prefix; i < n; ++i) {
    nll += negative_log_probability(logits, tokens[size_t(i)]);
    if (i + 1 == n) break;
    engine::BackendSequence* const batch[1] = {&seq};
    backend.decode(batch, tokens.subspan(size_t(i), 1), logits.data());
    if (check) check();
  }
  return nll;
}

// The work of one (length, task, sample): its prompt (or perplexity document),
// run by every strategy.
struct WorkItem {
  std::string task;
  int64_t length = 0;
  int index = 0;
  Sample sample;               // accuracy tasks
  std::vector<int32_t> tokens; // the prompt, or the perplexity document
};

}  // namespace

int64_t parse_length(std::string_view text) {
  int64_t multiplier = 1;
  std::string_view digits = text;
  if (!digits.empty() && (digits.back() == 'k' || digits.back() == 'K')) {
    multiplier = 1024;
    digits.remove_suffix(1);
  }
  int64_t value = 0;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || ec != std::errc() || ptr != digits.data() + digits.size() || value <= 0 ||
      value > (int64_t(1) << 40) / multiplier)
    fail("bad length '{}' (expected a token count such as 1500, or 1k, 8k)", text);
  return value * multiplier;
}

EvalPlan plan_eval(const EvalOptions& options, int64_t context_length) {
  EvalPlan plan;
  if (options.strategies.empty()) fail("no strategies given");
  for (const std::string& name : options.strategies) {
    StrategySpec spec = parse_strategy_spec(name, options.budget_percent);
    for (const StrategySpec& other : plan.strategies)
      if (other.label == spec.label) fail("strategy '{}' is listed twice", name);
    plan.strategies.push_back(std::move(spec));
  }
  if (!valid_budget_percent(options.budget_percent))
    fail("--budget {} is outside (0, 100]", options.budget_percent);
  if (options.tasks.empty()) {
    for (const std::string_view task : task_names()) plan.tasks.emplace_back(task);
    plan.tasks.emplace_back(kPerplexityTask);
  }
  for (const std::string& task : options.tasks) {
    if (!is_task(task) && task != kPerplexityTask)
      fail("unknown task '{}' (tasks: {}, {})", task, fmt::join(task_names(), ", "), kPerplexityTask);
    if (std::find(plan.tasks.begin(), plan.tasks.end(), task) != plan.tasks.end())
      fail("task '{}' is listed twice", task);
    plan.tasks.push_back(task);
  }
  if (options.lengths.empty()) fail("no lengths given");
  for (const int64_t length : options.lengths) {
    if (length > context_length)
      fail("length {} is above the model's context of {} tokens", length, context_length);
    if (length < kMinLength) fail("length {} is below the minimum of {} tokens", length, kMinLength);
    if (std::find(plan.lengths.begin(), plan.lengths.end(), length) != plan.lengths.end())
      fail("length {} is listed twice", length);
    if (options.perplexity_tail < 1 || options.perplexity_tail >= length)
      fail("perplexity tail of {} tokens must be in [1, {}) for length {}", options.perplexity_tail, length, length);
    plan.lengths.push_back(length);
  }
  std::sort(plan.lengths.begin(), plan.lengths.end());
  if (options.samples < 1) fail("--samples must be at least 1, got {}", options.samples);
  if (!(options.time_limit_seconds > 0)) fail("the time limit must be positive, got {} s", options.time_limit_seconds);
  if (options.prefill_chunk < 1) fail("the prefill chunk must be positive, got {}", options.prefill_chunk);
  return plan;
}

PromptFormat::PromptFormat(const tokenizer::Tokenizer& tokenizer) : tokenizer_(tokenizer) {
  if (!tokenizer.chat_template().empty()) chat_ = tokenizer::ChatTemplate::from_jinja(tokenizer.chat_template());
}

std::vector<int32_t> PromptFormat::encode(const std::string& user_message, const std::string& answer_prefix) const {
  if (!chat_) return tokenizer_.encode(user_message + "\n\n" + answer_prefix, /*add_special_tokens=*/true);
  // The sample (haystack text, question, answer prefix) is text: chat markup
  // in a --haystack corpus stays characters, as a user's prompt does.
  const tokenizer::ChatMessage messages[] = {{"user", user_message}};
  return chat_->encode(tokenizer_, messages, /*add_generation_prompt=*/true, answer_prefix);
}

std::vector<int32_t> perplexity_tokens(const Corpus& corpus, const tokenizer::Tokenizer& tokenizer, int64_t length,
                                       int index, uint64_t seed) {
  Rng rng(mix_seed(seed, kPerplexityTask, uint64_t(length), uint64_t(index)));
  const uint64_t start = corpus.paragraph_start(rng.below(corpus.paragraph_count()));
  // Sentences average well over one token: start from a guess, double until long enough.
  for (uint64_t n = uint64_t(length) / 8 + 1;; n *= 2) {
    std::vector<int32_t> ids = tokenizer.encode(corpus.passage(start, n), /*add_special_tokens=*/true);
    if (int64_t(ids.size()) >= length) {
      ids.resize(size_t(length));
      return ids;
    }
    if (n > 4 * corpus.sentence_count() + uint64_t(length))
      fail("the haystack corpus is too short for a perplexity document of {} tokens", length);
  }
}

double tail_nll(engine::Backend& backend, engine::BackendSequence& seq, std::span<const int32_t> tokens, int64_t tail,
                int64_t prefill_chunk, const std::function<void()>& check) {
  const int64_t n = int64_t(tokens.size());
  if (tail < 1 || tail >= n) fail("cannot score the last {} of {} tokens", tail, n);
  const int64_t prefix = n - tail;
  std::vector<float> logits = backend.prefill(
      seq, tokens.first(size_t(prefix)),
      [&](int64_t) {
        if (check) check();
      },
      prefill_chunk);
  return score_tail(backend, seq, tokens, prefix, std::move(logits), check);
}

EvalRun run_eval(engine::Backend& backend, const tokenizer::Tokenizer& tokenizer, const Corpus& corpus,
                 const EvalOptions& options, const EvalCallbacks& callbacks) {
  const model::Config& config = backend.config();
  EvalRun run;
  run.options = options;
  run.plan = plan_eval(options, config.context_length);
  run.model_name = config.name;
  run.context_length = config.context_length;
  const kascade::Shape shape = config.attention_shape();
  for (StrategySpec& spec : run.plan.strategies) {
    if (spec.options.kascade()) spec.options.profile = options.kascade_profile;
    validate_attention(spec.options, shape);  // invalid options fail here, before any work,
    backend.new_sequence({2, spec.options, options.kv_type});  // as do strategies the backend does not run
  }
  const PromptFormat format(tokenizer);
  run.prompt_format = std::string(format.name());
  Stopwatch clock;

  // Every prompt first: the total work is known for the ETA, and a task that
  // cannot fit a length fails before any model time is spent.
  const PromptCounter count = [&](const std::string& user, const std::string& prefix) {
    return int64_t(format.encode(user, prefix).size());
  };
  std::vector<WorkItem> items;
  uint64_t total_tokens = 0;
  for (const int64_t length : run.plan.lengths)
    for (const std::string& task : run.plan.tasks)
      for (int index = 0; index < options.samples; ++index) {
        WorkItem item{task, length, index, {}, {}};
        if (task == kPerplexityTask) {
          item.tokens = perplexity_tokens(corpus, tokenizer, length, index, options.seed);
        } else {
          item.sample = make_sample(task, length, index, options.seed, corpus, count);
          item.tokens = format.encode(item.sample.user_message, item.sample.answer_prefix);
        }
        total_tokens += uint64_t(item.tokens.size()) * run.plan.strategies.size();
        items.push_back(std::move(item));
      }

  uint64_t done_tokens = 0;
  if (callbacks.on_progress) callbacks.on_progress(0, total_tokens);
  for (const WorkItem& item : items) {
    const bool perplexity = item.task == kPerplexityTask;
    const std::span<const int32_t> prefilled =
        std::span<const int32_t>(item.tokens).first(item.tokens.size() - size_t(perplexity ? options.perplexity_tail : 0));
    SharedPrefill shared;
    for (const StrategySpec& spec : run.plan.strategies) {
      SampleResult result;
      result.task = item.task;
      result.strategy = spec.label;
      result.length = item.length;
      result.index = item.index;
      result.expected = item.sample.expected;
      result.prompt_tokens = int64_t(item.tokens.size());
      Stopwatch sample_clock;
      const auto check = [&] {
        if (sample_clock.seconds() > options.time_limit_seconds)
          throw TimeLimitExceeded(fmt::format("over the time limit of {} s", options.time_limit_seconds));
      };
      try {
        const int64_t capacity = int64_t(item.tokens.size()) + (perplexity ? 0 : item.sample.max_new_tokens);
        std::unique_ptr<engine::BackendSequence> seq = backend.new_sequence({capacity, spec.options, options.kv_type});
        std::vector<float> logits =
            prefill(backend, *seq, prefilled, options.prefill_chunk, options.kv_type, shared, check);
        if (perplexity) {
          result.nll_sum = score_tail(backend, *seq, item.tokens, int64_t(prefilled.size()), std::move(logits), check);
          result.scored_tokens = options.perplexity_tail;
        } else {
          run_accuracy(backend, tokenizer, item.sample, item.tokens, *seq, std::move(logits), check, result);
        }
        result.status = "ok";
      } catch (const TimeLimitExceeded& e) {
        result.status = "timeout";
        result.error = e.what();
      } catch (const std::exception& e) {
        result.status = "error";
        result.error = e.what();
      }
      if (result.failed()) {
        result.score = 0;
        result.nll_sum = 0;
        result.scored_tokens = 0;
      }
      result.seconds = sample_clock.seconds();
      done_tokens += uint64_t(item.tokens.size());
      if (callbacks.on_result) callbacks.on_result(result);
      if (callbacks.on_progress) callbacks.on_progress(done_tokens, total_tokens);
      run.results.push_back(std::move(result));
    }
  }
  run.seconds = clock.seconds();
  return run;
}

}  // namespace kascade::eval
