#include "engine/generate.h"

#include "core/error.h"
#include "core/timer.h"

namespace kascade::engine {

void check_request(int64_t capacity, std::span<const int32_t> prompt, const GenerateOptions& options) {
  if (prompt.empty()) fail("the prompt is empty");
  if (int64_t(prompt.size()) >= capacity)
    fail("prompt of {} tokens does not fit the context of {} tokens (it needs room for at least one new token)",
         prompt.size(), capacity);
  if (options.max_new_tokens < 0) fail("max new tokens must be >= 0, got {}", options.max_new_tokens);
}

TokenStream::TokenStream(const tokenizer::Tokenizer& tokenizer, std::span<const int32_t> prompt,
                         const GenerateOptions& options, std::function<void(const std::string&)> on_text,
                         std::function<void(std::span<const float>)> on_logits)
    : tokenizer_(tokenizer),
      max_new_tokens_(options.max_new_tokens),
      ignore_eos_(options.ignore_eos),
      sampler_(options.sampling),
      stops_(options.stop_strings),
      decoder_(tokenizer, /*skip_special=*/true),
      on_text_(std::move(on_text)),
      on_logits_(std::move(on_logits)) {
  result_.prompt_tokens = int64_t(prompt.size());
  result_.stop_reason = "token limit";
  for (const int32_t token : prompt) sampler_.accept(token);
}

void TokenStream::emit(const std::string& text) {
  if (text.empty()) return;
  result_.text += text;
  if (on_text_) on_text_(text);
}

void TokenStream::finish(const char* reason) {
  result_.stop_reason = reason;
  done_ = true;
  if (!stops_.stopped()) emit(stops_.push(decoder_.finish()) + stops_.finish());
}

std::optional<int32_t> TokenStream::next(std::span<const float> logits, const BackendSequence& seq) {
  if (done_) return std::nullopt;
  if (int64_t(result_.tokens.size()) >= max_new_tokens_) {
    finish("token limit");
    return std::nullopt;
  }
  if (on_logits_) on_logits_(logits);
  const int32_t token = sampler_.sample(logits);
  if (!ignore_eos_ && tokenizer_.is_end_of_generation(token)) {
    finish("eos");
    return std::nullopt;
  }
  sampler_.accept_generated(token);
  result_.tokens.push_back(token);
  emit(stops_.push(decoder_.push(token)));
  if (stops_.stopped()) {
    finish("stop string");
    return std::nullopt;
  }
  if (int64_t(result_.tokens.size()) == max_new_tokens_) {
    finish("token limit");
    return std::nullopt;
  }
  if (seq.position() + 1 > seq.capacity()) {
    finish("context full");
    return std::nullopt;
  }
  return token;
}

GenerationResult generate(Backend& backend, const tokenizer::Tokenizer& tokenizer, BackendSequence& seq,
                          std::span<const int32_t> prompt, const GenerateOptions& options,
                          const GenerateCallbacks& callbacks) {
  check_request(seq.capacity(), prompt, options);
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
  check_request(seq.capacity(), prompt, options);
  if (seq.position() != int64_t(prompt.size()))
    fail("the sequence holds {} positions, not the prompt's {}", seq.position(), prompt.size());
  TokenStream stream(tokenizer, prompt, options, callbacks.on_text, callbacks.on_logits);
  Stopwatch decode_clock;
  while (const std::optional<int32_t> token = stream.next(logits, seq)) {
    BackendSequence* const batch[1] = {&seq};
    const int32_t next[1] = {*token};
    backend.decode(batch, next, logits.data());
  }
  GenerationResult result = std::move(stream.result());
  result.decode_seconds = decode_clock.seconds();
  result.attention_name = std::string(seq.attention_name());
  result.kv_bytes = seq.kv_bytes();
  return result;
}

}  // namespace kascade::engine
