// The server's request parsing and validation (server/api.h): every bad
// input is a 400 with an OpenAI error body naming the parameter; good input
// becomes the scheduler's options; responses and chunks have OpenAI's shape.
#include <gtest/gtest.h>

#include <algorithm>

#include "server/api.h"

namespace kascade::server {
namespace {

using nlohmann::json;

ApiDefaults defaults() {
  ApiDefaults d;
  d.model_id = "test-model";
  d.context = 100;
  d.vocab_size = 1000;
  d.attention.method = Method::Dense;
  return d;
}

ApiRequest chat(const std::string& body) { return parse_request(Endpoint::Chat, body, defaults()); }
ApiRequest completion(const std::string& body) { return parse_request(Endpoint::Completion, body, defaults()); }

// The ApiError a body raises (status 0 when it parses).
ApiError error_of(Endpoint endpoint, const std::string& body) {
  try {
    parse_request(endpoint, body, defaults());
  } catch (const ApiError& e) {
    return e;
  }
  return ApiError(0, "no error");
}

TEST(ServerApi, ParsesAChatRequest) {
  const ApiRequest r = chat(R"({"model": "test-model", "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]}],
      "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 20, "seed": 42, "stop": ["\n", "END"],
      "stream": true, "stream_options": {"include_usage": true}, "user": "ignored", "n": 1, "ignore_eos": true})");
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "Hi there");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.generate.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.generate.sampling.top_p, 0.9f);
  EXPECT_EQ(r.generate.sampling.top_k, 20);
  EXPECT_EQ(r.generate.sampling.seed, 42u);
  EXPECT_EQ(r.generate.stop_strings, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.generate.ignore_eos);
  EXPECT_EQ(r.attention.method, Method::Dense);
  EXPECT_TRUE(completion(R"({"prompt": "x", "ignore_eos": true})").generate.ignore_eos);
  EXPECT_FALSE(completion(R"({"prompt": "x", "ignore_eos": false})").generate.ignore_eos);
}

TEST(ServerApi, DefaultsAreOpenAIs) {
  const ApiRequest r = completion(R"({"prompt": "Once"})");
  EXPECT_EQ(r.prompt, "Once");
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_FLOAT_EQ(r.generate.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.generate.sampling.top_p, 1.0f);
  EXPECT_EQ(r.generate.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(r.generate.sampling.min_p, 0.0f);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.generate.ignore_eos);
  EXPECT_EQ(completion(R"({"prompt": ["One string"], "stop": "x", "max_tokens": 3.0})").prompt, "One string");
}

TEST(ServerApi, KascadeFieldChoosesTheAttention) {
  ApiDefaults d = defaults();
  d.profile = KascadeProfile{};
  const ApiRequest r = parse_request(
      Endpoint::Completion,
      R"({"prompt": "x", "kascade": {"attention": "kascade", "budget": 5, "min_k": 32, "sparse_phases": "decode"}})", d);
  EXPECT_EQ(r.attention.method, Method::Kascade);
  EXPECT_DOUBLE_EQ(r.attention.budget_percent, 5);
  EXPECT_EQ(r.attention.min_k, 32);
  EXPECT_EQ(r.attention.sparse_phases, SparsePhases::DecodeOnly);
  EXPECT_TRUE(r.attention.all_anchors);  // the default: no reuse
  EXPECT_TRUE(r.attention.profile.has_value());
  const ApiRequest paper = parse_request(
      Endpoint::Completion, R"({"prompt": "x", "kascade": {"reuse": true, "sparse_phases": "both"}})", d);
  EXPECT_FALSE(paper.attention.all_anchors);
  EXPECT_EQ(paper.attention.sparse_phases, SparsePhases::Both);
  // Without the field: the command line's choice.
  d.attention.method = Method::Kascade;
  d.attention.budget_percent = 20;
  const ApiRequest plain = parse_request(Endpoint::Completion, R"({"prompt": "x"})", d);
  EXPECT_EQ(plain.attention.method, Method::Kascade);
  EXPECT_DOUBLE_EQ(plain.attention.budget_percent, 20);
  EXPECT_EQ(parse_request(Endpoint::Completion, R"({"prompt": "x", "kascade": {"attention": "dense"}})", d)
                .attention.profile.has_value(),
            false);
}

struct BadCase {
  Endpoint endpoint;
  std::string body;
  std::string param;
  std::string code = {};
};

TEST(ServerApi, BadInputIs400NamingTheParameter) {
  const std::vector<BadCase> cases = {
      {Endpoint::Chat, "{not json", ""},
      {Endpoint::Chat, "", ""},
      {Endpoint::Chat, "[1, 2]", ""},
      {Endpoint::Chat, R"({"messages": "hi"})", "messages"},
      {Endpoint::Chat, R"({})", "messages"},
      {Endpoint::Chat, R"({"messages": []})", "messages"},
      {Endpoint::Chat, R"({"messages": [5]})", "messages[0]"},
      {Endpoint::Chat, R"({"messages": [{"role": "wizard", "content": "x"}]})", "messages[0].role"},
      {Endpoint::Chat, R"({"messages": [{"role": "user"}]})", "messages[0].content"},
      {Endpoint::Chat, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content"},
      {Endpoint::Chat, R"({"model": 3, "messages": [{"role": "user", "content": "x"}]})", "model"},
      {Endpoint::Completion, R"({"prompt": 5})", "prompt"},
      {Endpoint::Completion, R"({"prompt": ["a", "b"]})", "prompt"},
      {Endpoint::Completion, R"({"prompt": ""})", "prompt"},
      {Endpoint::Completion, R"({"prompt": "x", "max_tokens": "5"})", "max_tokens"},
      {Endpoint::Completion, R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
      {Endpoint::Completion, R"({"prompt": "x", "max_tokens": -3})", "max_tokens"},
      {Endpoint::Completion, R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens"},
      {Endpoint::Completion, R"({"prompt": "x", "max_tokens": 18446744073709551615})", "max_tokens"},
      {Endpoint::Completion, R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {Endpoint::Completion, R"({"prompt": "x", "temperature": 2.5})", "temperature"},
      {Endpoint::Completion, R"({"prompt": "x", "top_p": 0})", "top_p"},
      {Endpoint::Completion, R"({"prompt": "x", "top_k": -1})", "top_k"},
      {Endpoint::Completion, R"({"prompt": "x", "seed": "abc"})", "seed"},
      {Endpoint::Completion, R"({"prompt": "x", "stop": 5})", "stop"},
      {Endpoint::Completion, R"({"prompt": "x", "stop": ["a", 1]})", "stop"},
      {Endpoint::Completion, R"({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", "stop"},
      {Endpoint::Completion, R"({"prompt": "x", "stop": [""]})", "stop"},
      {Endpoint::Completion, R"({"prompt": "x", "n": 2})", "n"},
      {Endpoint::Completion, R"({"prompt": "x", "stream": "yes"})", "stream"},
      {Endpoint::Completion, R"({"prompt": "x", "ignore_eos": "yes"})", "ignore_eos"},
      {Endpoint::Chat, R"({"messages": [{"role": "user", "content": "x"}], "ignore_eos": 1})", "ignore_eos"},
      {Endpoint::Completion, R"({"prompt": "x", "stream_options": 1})", "stream_options"},
      {Endpoint::Completion, R"({"prompt": "x", "logprobs": 3})", "logprobs"},
      {Endpoint::Completion, R"({"prompt": "x", "echo": true})", "echo"},
      {Endpoint::Chat, R"({"messages": [{"role": "user", "content": "x"}], "tools": [{}]})", "tools"},
      {Endpoint::Completion, std::string(R"({"prompt": "x", "stop": ")") + "\xff\"}", ""},  // JSON must be UTF-8
      {Endpoint::Completion, R"({"prompt": "x", "stop": "\udcff"})", ""},  // so a stop string can always match
      {Endpoint::Completion, R"({"prompt": "x", "top_logprobs": 2})", "top_logprobs"},
      {Endpoint::Chat, R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 5, "logprobs": false})",
       "top_logprobs"},
      {Endpoint::Completion, R"({"prompt": "x", "response_format": {"type": "json_object"}})", "response_format"},
      {Endpoint::Chat,
       R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema",
           "json_schema": {"name": "x", "schema": {}}}})",
       "response_format"},
      {Endpoint::Completion, R"({"prompt": "x", "response_format": "text"})", "response_format"},
      {Endpoint::Completion, R"({"prompt": "x", "response_format": {}})", "response_format"},
      {Endpoint::Completion, R"({"prompt": "x", "frequency_penalty": 2.5})", "frequency_penalty"},
      {Endpoint::Completion, R"({"prompt": "x", "frequency_penalty": "high"})", "frequency_penalty"},
      {Endpoint::Completion, R"({"prompt": "x", "presence_penalty": -2.01})", "presence_penalty"},
      {Endpoint::Completion, R"({"prompt": "x", "presence_penalty": true})", "presence_penalty"},
      {Endpoint::Completion, R"({"prompt": "x", "logit_bias": [1, 2]})", "logit_bias"},
      {Endpoint::Completion, R"({"prompt": "x", "logit_bias": {"abc": 1}})", "logit_bias"},
      {Endpoint::Completion, R"({"prompt": "x", "logit_bias": {"-1": 1}})", "logit_bias"},
      {Endpoint::Completion, R"({"prompt": "x", "logit_bias": {"1000": 1}})", "logit_bias"},
      {Endpoint::Completion, R"({"prompt": "x", "logit_bias": {"007": 1}})", "logit_bias"},
      {Endpoint::Completion, R"({"prompt": "x", "logit_bias": {"99999999999999999999": 1}})", "logit_bias"},
      {Endpoint::Completion, R"({"prompt": "x", "logit_bias": {"5": 100.5}})", "logit_bias"},
      {Endpoint::Completion, R"({"prompt": "x", "logit_bias": {"5": "ban"}})", "logit_bias"},
      {Endpoint::Completion, R"({"prompt": "x", "kascade": "fast"})", "kascade"},
      {Endpoint::Completion, R"({"prompt": "x", "kascade": {"attention": "magic"}})", "kascade.attention"},
      {Endpoint::Completion, R"({"prompt": "x", "kascade": {"budget": 0}})", "kascade.budget"},
      {Endpoint::Completion, R"({"prompt": "x", "kascade": {"budget": 101}})", "kascade.budget"},
      {Endpoint::Completion, R"({"prompt": "x", "kascade": {"bduget": 5}})", "kascade.bduget"},
      {Endpoint::Completion, R"({"prompt": "x", "kascade": {"sparse_phases": "all"}})", "kascade.sparse_phases"},
      {Endpoint::Completion, R"({"prompt": "x", "kascade": {"reuse": 1}})", "kascade.reuse"},
  };
  for (const BadCase& c : cases) {
    const ApiError e = error_of(c.endpoint, c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << ": " << e.what();
    if (!c.code.empty()) {
      EXPECT_EQ(e.code, c.code) << c.body;
    }
    EXPECT_FALSE(std::string(e.what()).empty());
  }
}

TEST(ServerApi, UnknownModelIs404) {
  const ApiError e = error_of(Endpoint::Chat, R"({"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]})");
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(e.param, "model");
  EXPECT_EQ(e.code, "model_not_found");
  EXPECT_EQ(e.type, "invalid_request_error");
  EXPECT_NE(std::string(e.what()).find("'gpt-4' does not exist"), std::string::npos) << e.what();
}

TEST(ServerApi, PenaltiesAndLogitBiasReachTheSampler) {
  const ApiRequest r = completion(R"({"prompt": "x", "frequency_penalty": 0.5, "presence_penalty": -1.25,
      "logit_bias": {"0": -100, "999": 100, "42": 2.5}, "response_format": {"type": "text"}, "top_logprobs": 0})");
  EXPECT_FLOAT_EQ(r.generate.sampling.frequency_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.generate.sampling.presence_penalty, -1.25f);
  std::vector<std::pair<int32_t, float>> bias = r.generate.sampling.logit_bias;
  std::sort(bias.begin(), bias.end());
  EXPECT_EQ(bias, (std::vector<std::pair<int32_t, float>>{{0, -100.0f}, {42, 2.5f}, {999, 100.0f}}));
  // Unset: off.
  const ApiRequest plain = completion(R"({"prompt": "x", "logit_bias": null, "response_format": null})");
  EXPECT_EQ(plain.generate.sampling.frequency_penalty, 0.0f);
  EXPECT_EQ(plain.generate.sampling.presence_penalty, 0.0f);
  EXPECT_TRUE(plain.generate.sampling.logit_bias.empty());
  // The edges of OpenAI's ranges are accepted.
  EXPECT_FLOAT_EQ(completion(R"({"prompt": "x", "frequency_penalty": -2})").generate.sampling.frequency_penalty, -2);
  EXPECT_FLOAT_EQ(completion(R"({"prompt": "x", "presence_penalty": 2})").generate.sampling.presence_penalty, 2);
}

TEST(ServerApi, BadValuesNameTheFieldInTheMessage) {
  for (const std::string field : {"frequency_penalty", "presence_penalty", "logit_bias", "top_logprobs",
                                  "response_format"}) {
    const std::string value = field == "logit_bias" ? R"({"1": 200})"
                              : field == "response_format" ? R"({"type": "json_object"})"
                                                           : "3";
    const ApiError e = error_of(Endpoint::Completion, R"({"prompt": "x", ")" + field + "\": " + value + "}");
    EXPECT_EQ(e.status, 400) << field;
    EXPECT_NE(std::string(e.what()).find("'" + field + "'"), std::string::npos) << e.what();
  }
}

TEST(ServerApi, DeeplyNestedJsonIsAnErrorNotACrash) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  EXPECT_EQ(error_of(Endpoint::Chat, deep).status, 400);
  const std::string open = "{\"messages\": " + std::string(100000, '[');
  EXPECT_EQ(error_of(Endpoint::Chat, open).status, 400);
}

TEST(ServerApi, ErrorBodyHasOpenAIsShape) {
  const json body = error_body(ApiError(400, "bad", "invalid_request_error", "max_tokens", "context_length_exceeded"));
  EXPECT_EQ(body["error"]["message"], "bad");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["param"], "max_tokens");
  EXPECT_EQ(body["error"]["code"], "context_length_exceeded");
  const json plain = error_body(ApiError(503, "busy", "server_error"));
  EXPECT_TRUE(plain["error"]["param"].is_null());
  EXPECT_TRUE(plain["error"]["code"].is_null());
}

TEST(ServerApi, ContextLimits) {
  ApiRequest r = completion(R"({"prompt": "x", "max_tokens": 50})");
  fit_context(r, 50, defaults());
  EXPECT_EQ(r.generate.max_new_tokens, 50);
  ApiRequest unset = completion(R"({"prompt": "x"})");
  fit_context(unset, 30, defaults());
  EXPECT_EQ(unset.generate.max_new_tokens, 70);  // the rest of the context
  ApiRequest over = completion(R"({"prompt": "x", "max_tokens": 51})");
  try {
    fit_context(over, 50, defaults());
    FAIL() << "no error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.code, "context_length_exceeded");
    EXPECT_EQ(e.param, "max_tokens");
  }
  // The largest max_tokens: the sum in the message must not wrap negative.
  ApiRequest huge = completion(R"({"prompt": "x", "max_tokens": 9223372036854775807})");
  try {
    fit_context(huge, 50, defaults());
    FAIL() << "no error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "max_tokens");
    EXPECT_NE(std::string(e.what()).find("you requested 9223372036854775857 tokens (50 in the prompt, "
                                         "9223372036854775807 in the completion)"),
              std::string::npos)
        << e.what();
  }
  ApiRequest prompt_too_long = completion(R"({"prompt": "x"})");
  try {
    fit_context(prompt_too_long, 100, defaults());
    FAIL() << "no error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code, "context_length_exceeded");
    EXPECT_EQ(e.param, "prompt");
  }
}

TEST(ServerApi, ResponsesAndChunks) {
  engine::GenerationResult result;
  result.text = "Paris.";
  result.tokens = {1, 2, 3};
  result.prompt_tokens = 5;
  result.stop_reason = "eos";
  const ApiRequest c = chat(R"({"messages": [{"role": "user", "content": "x"}]})");
  const json response = completion_response(c, "chatcmpl-1", 7, "test-model", result);
  EXPECT_EQ(response["object"], "chat.completion");
  EXPECT_EQ(response["choices"][0]["message"]["content"], "Paris.");
  EXPECT_EQ(response["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(response["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(response["usage"]["completion_tokens"], 3);
  EXPECT_EQ(response["usage"]["total_tokens"], 8);
  result.stop_reason = "token limit";
  EXPECT_EQ(finish_reason(result), "length");
  result.stop_reason = "stop string";
  EXPECT_EQ(finish_reason(result), "stop");

  const json first = stream_chunk(c, "chatcmpl-1", 7, "m", "", true, nullptr);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  const json last = stream_chunk(c, "chatcmpl-1", 7, "m", "", false, &result);
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  const ApiRequest t = completion(R"({"prompt": "x"})");
  EXPECT_EQ(stream_chunk(t, "cmpl-1", 7, "m", " Paris", false, nullptr)["choices"][0]["text"], " Paris");
  const json usage = usage_chunk(t, "cmpl-1", 7, "m", result);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 3);
}

}  // namespace
}  // namespace kascade::server
