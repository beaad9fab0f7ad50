// Text generation: prompt ids -> prefill -> sample/decode loop -> streamed
// text, with the stop rules (end-of-generation tokens, stop strings, a token
// limit) and the numbers a user wants afterwards. TokenStream holds one
// request's side of it (sampler, stop strings, streamed text), so that the
// one-sequence loop here and the scheduler (engine/scheduler.h) apply the
// same rules.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "sampling/sampler.h"
#include "sampling/stop_strings.h"
#include "tokenizer/tokenizer.h"

namespace kascade::engine {

struct GenerateOptions {
  int64_t max_new_tokens = 256;
  std::vector<std::string> stop_strings;
  bool ignore_eos = false;  // end-of-generation tokens do not stop (they are generated like any other)
  sampling::SamplerOptions sampling;
  int64_t prefill_chunk = 512;
};

struct GenerationResult {
  std::string text;                   // what was streamed, without any stop string
  std::vector<int32_t> tokens;        // generated ids (the end token excluded)
  // "eos", "stop string", "token limit", "context full"; from the scheduler
  // also "cancelled" and "error" (with `error` saying what failed).
  std::string stop_reason;
  std::string error;
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;          // from the first sampled token to the last
  std::string attention_name;         // of the sequence that ran it
  uint64_t kv_bytes = 0;              // its KV cache
};

struct GenerateCallbacks {
  std::function<void(const std::string&)> on_text;           // streamed, complete UTF-8
  std::function<void(int64_t done, int64_t total)> on_prefill;  // after each chunk
  std::function<void(std::span<const float>)> on_logits;      // each step's, before it samples
};

// One request's sampling and stop rules, one step at a time: next() takes
// the logits of the last position the sequence holds and returns the token
// to decode next, or nothing when generation is over (result().stop_reason
// says why; the text held back for stop strings has then been streamed).
class TokenStream {
 public:
  // Throws Error for bad options (sampling out of range, an empty stop string).
  // on_logits sees the logits each step samples from (the steps that end
  // generation included).
  TokenStream(const tokenizer::Tokenizer& tokenizer, std::span<const int32_t> prompt, const GenerateOptions& options,
              std::function<void(const std::string&)> on_text,
              std::function<void(std::span<const float>)> on_logits = {});

  std::optional<int32_t> next(std::span<const float> logits, const BackendSequence& seq);
  bool done() const { return done_; }
  GenerationResult& result() { return result_; }

 private:
  void emit(const std::string& text);
  void finish(const char* reason);

  const tokenizer::Tokenizer& tokenizer_;
  int64_t max_new_tokens_;
  bool ignore_eos_;
  sampling::Sampler sampler_;
  sampling::StopStringMatcher stops_;
  tokenizer::StreamDecoder decoder_;
  std::function<void(const std::string&)> on_text_;
  std::function<void(std::span<const float>)> on_logits_;
  GenerationResult result_;
  bool done_ = false;
};

// Checks a request against a sequence of `capacity` positions: a non-empty
// prompt that leaves room for one new token, max new tokens >= 0.
void check_request(int64_t capacity, std::span<const int32_t> prompt, const GenerateOptions& options);

// Runs the prompt through `seq` (which must be empty) and generates until a stop rule fires.
GenerationResult generate(Backend& backend, const tokenizer::Tokenizer& tokenizer, BackendSequence& seq,
                          std::span<const int32_t> prompt, const GenerateOptions& options,
                          const GenerateCallbacks& callbacks = {});

// The decode loop of generate() for a sequence that already holds `prompt`
// (prefilled elsewhere, e.g. a copy of a shared dense prefill); `logits` are
// the last prompt token's.
GenerationResult generate_after_prefill(Backend& backend, const tokenizer::Tokenizer& tokenizer,
                                        BackendSequence& seq, std::span<const int32_t> prompt,
                                        std::vector<float> logits, const GenerateOptions& options,
                                        const GenerateCallbacks& callbacks = {});

}  // namespace kascade::engine
