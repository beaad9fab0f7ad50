// Text generation: prompt ids -> prefill -> sample/decode loop -> streamed
// text, with the stop rules (end-of-generation tokens, stop strings, a token
// limit) and the numbers a user wants afterwards.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace kascade::engine {

struct GenerateOptions {
  int64_t max_new_tokens = 256;
  std::vector<std::string> stop_strings;
  sampling::SamplerOptions sampling;
  int64_t prefill_chunk = 512;
};

struct GenerationResult {
  std::string text;                   // what was streamed, without any stop string
  std::vector<int32_t> tokens;        // generated ids (the end token excluded)
  std::string stop_reason;            // "eos", "stop string", "token limit", "context full"
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;          // from the first sampled token to the last
};

struct GenerateCallbacks {
  std::function<void(const std::string&)> on_text;           // streamed, complete UTF-8
  std::function<void(int64_t done, int64_t total)> on_prefill;  // after each chunk
};

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
