#include "engine/generate.h"

#include "core/error.h"
#include "core/timer.h"
#include "sampling/stop_strings.h"

namespace kascade::engine {

namespace {

void check_request(const BackendSequence& seq, std::span<const int32_t> prompt, const GenerateOptions& options) {
  if (prompt.empty()) fail("the prompt is empty");
  if (int64_t(prompt.size()) >= seq.capacity())
    fail("prompt of {} tokens does not fit the context of {} tokens (it needs room for at least one new token)",
         prompt.size(), seq.capacity());
  if (options.max_new_tokens < 0) fail("max new tokens must be >= 0, got {}", options.max_new_tokens);
}

}  // namespace

GenerationResult generate(Backend& backend, const tokenizer::Tokenizer& tokenizer, BackendSequence& seq,
                          std::span<const int32_t> prompt, const GenerateOptions& options,
                          const GenerateCallbacks& callbacks) {
  check_request(seq, prompt, options);
  if (seq.position() != 0) fail("generate needs a fresh sequence");
  Stopwatch prefill_clock;
  std::vector<float> logits = backend.prefill(
      seq, prompt,
      [&](int64_t done) {
        if (callbacks.on_prefill) callbacks.on_prefill(done, int64_t(prompt.size()));
      },
      options.prefill_chunk);
  const double prefill_seconds = prefill_clock.seconds();
  GenerationResult result =
      generate_after_prefill(backend, tokenizer, seq, prompt, std::move(logits), options, callbacks);
  result.prefill_seconds = prefill_seconds;
  return result;
}

GenerationResult generate_after_prefill(Backend& backend, const tokenizer::Tokenizer& tokenizer,
                                        BackendSequence& seq, std::span<const int32_t> prompt,
                                        std::vector<float> logits, const GenerateOptions& options,
                                        const GenerateCallbacks& callbacks) {
  check_request(seq, prompt, options);
  if (seq.position() != int64_t(prompt.size()))
    fail("the sequence holds {} positions, not the prompt's {}", seq.position(), prompt.size());
  GenerationResult result;
  result.prompt_tokens = int64_t(prompt.size());
  sampling::Sampler sampler(options.sampling);
  for (const int32_t token : prompt) sampler.accept(token);
  sampling::StopStringMatcher stops(options.stop_strings);
  tokenizer::StreamDecoder decoder(tokenizer, /*skip_special=*/true);
  auto emit = [&](const std::string& text) {
    if (text.empty()) return;
    result.text += text;
    if (callbacks.on_text) callbacks.on_text(text);
  };

  Stopwatch decode_clock;
  result.stop_reason = "token limit";
  while (int64_t(result.tokens.size()) < options.max_new_tokens) {
    const int32_t token = sampler.sample(logits);
    if (tokenizer.is_end_of_generation(token)) {
      result.stop_reason = "eos";
      break;
    }
    sampler.accept(token);
    result.tokens.push_back(token);
    emit(stops.push(decoder.push(token)));
    if (stops.stopped()) {
      result.stop_reason = "stop string";
      break;
    }
    if (int64_t(result.tokens.size()) == options.max_new_tokens) break;
    if (seq.position() + 1 > seq.capacity()) {
      result.stop_reason = "context full";
      break;
    }
    BackendSequence* const batch[1] = {&seq};
    const int32_t next[1] = {token};
    backend.decode(batch, next, logits.data());
  }
  if (!stops.stopped()) emit(stops.push(decoder.finish()) + stops.finish());
  result.decode_seconds = decode_clock.seconds();
  return result;
}

}  // namespace kascade::engine
