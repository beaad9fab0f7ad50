// The OpenAI-compatible API of `kascade serve`, without the HTTP: request
// bodies parsed and checked into what the scheduler runs, responses and
// streamed chunks as JSON, errors as OpenAI error bodies. Kept apart from the
// server so that parsing and validation are unit-tested on their own.
//
// Accepted (POST /v1/chat/completions and /v1/completions): model, messages
// (chat: role system/user/assistant, content a string or text parts) or
// prompt (a string or one string in an array), max_tokens (chat also
// max_completion_tokens), temperature [0, 2], top_p (0, 1], top_k >= 0,
// min_p [0, 1], repeat_penalty / repetition_penalty > 0, frequency_penalty
// and presence_penalty [-2, 2] (over the generated tokens, as OpenAI),
// logit_bias ({"token id": bias in [-100, 100]}), seed, stop (a string or up
// to 4, valid UTF-8), n = 1, response_format {"type": "text"}, stream,
// stream_options.include_usage, ignore_eos (as vLLM's and llama.cpp's
// servers: generate to max_tokens through end-of-generation tokens), and the
// extension "kascade": {"attention": NAME, "budget": P, "min_k": K,
// "sparse_phases": "both"|"decode"|"prefill", "reuse": BOOL}. Other OpenAI fields are
// ignored, except those asking for what the server does not do (n > 1,
// logprobs, top_logprobs, echo, best_of > 1, tools, suffix, a
// response_format other than text), which are refused. A model other than
// the server's is a 404 (code model_not_found), as OpenAI answers.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kascade/options.h"
#include "engine/generate.h"
#include "tokenizer/chat_template.h"

namespace kascade::server {

// An error answered with an OpenAI error body:
// {"error": {"message", "type", "param", "code"}}.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string type = "invalid_request_error", std::string param = {},
           std::string code = {})
      : std::runtime_error(message), status(status), type(std::move(type)), param(std::move(param)),
        code(std::move(code)) {}
  int status;
  std::string type, param, code;
};

nlohmann::json error_body(const ApiError& error);

// JSON text for a response. Strings that are not valid UTF-8 (a request path
// "%ff", a prompt's bytes echoed in an error) get U+FFFD for their bad bytes
// instead of making nlohmann::json throw.
std::string dump(const nlohmann::json& value);

enum class Endpoint { Chat, Completion };

// What the command line decided for every request.
struct ApiDefaults {
  std::string model_id;                    // what /v1/models lists and requests may name
  AttentionOptions attention;    // --attention and its flags
  std::optional<KascadeProfile> profile;   // applied whenever a request's attention is kascade
  int64_t context = 0;                     // tokens a request may use: prompt + completion
  int64_t vocab_size = 0;                  // logit_bias keys are token ids below this
};

struct ApiRequest {
  Endpoint endpoint = Endpoint::Chat;
  std::vector<tokenizer::ChatMessage> messages;  // chat
  std::string prompt;                            // completion
  std::optional<int64_t> max_tokens;             // unset: the rest of the context
  engine::GenerateOptions generate;              // sampling and stop strings (max tokens set later)
  AttentionOptions attention;
  bool stream = false;
  bool include_usage = false;                    // stream_options.include_usage
};

// Parses and checks a body; throws ApiError (400, 404 for an unknown model)
// naming the parameter.
ApiRequest parse_request(Endpoint endpoint, std::string_view body, const ApiDefaults& defaults);

// Sets generate.max_new_tokens from max_tokens and the prompt's length, or
// throws ApiError (400, code context_length_exceeded) when they do not fit
// the context.
void fit_context(ApiRequest& request, int64_t prompt_tokens, const ApiDefaults& defaults);

// "stop" for a stop rule (end of generation, a stop string), "length" for
// the token limit or a full context.
std::string finish_reason(const engine::GenerationResult& result);

// Responses. `id` is the request's ("chatcmpl-..." or "cmpl-...").
nlohmann::json completion_response(const ApiRequest& request, const std::string& id, int64_t created,
                                   const std::string& model, const engine::GenerationResult& result);
// One streamed chunk: text (empty for the first chat chunk, which carries the
// role) or, with `result`, the last one with its finish reason.
nlohmann::json stream_chunk(const ApiRequest& request, const std::string& id, int64_t created,
                            const std::string& model, const std::string& text, bool first,
                            const engine::GenerationResult* result);
// The usage chunk streamed last when stream_options.include_usage is set.
nlohmann::json usage_chunk(const ApiRequest& request, const std::string& id, int64_t created,
                           const std::string& model, const engine::GenerationResult& result);
nlohmann::json usage(const engine::GenerationResult& result);

}  // namespace kascade::server
