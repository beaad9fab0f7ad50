// The server's request parsing and validation (server/api.h): every bad
// input is a 400 with an OpenAI error body naming the parameter; good input
// becomes the scheduler's options; responses and chunks have OpenAI's shape.
// Then the HTTP side (server/server.h, server/http.h) on a tiny synthetic
// model through Server::respond: hostile paths, bodies and heads get an
// answer and the server goes on (issue 31).
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>

#include "core/error.h"
#include "server/api.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

#include "tiny_model.h"

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

TEST(ServerApi, DumpReplacesInvalidUtf8) {
  const std::string text = dump(error_body(ApiError(404, "no route GET /\xff\xfe")));
  EXPECT_NE(text.find("/\xef\xbf\xbd\xef\xbf\xbd"), std::string::npos) << text;
  EXPECT_FALSE(json::parse(text, nullptr, false).is_discarded());
}

TEST(ServerLimits, SettingsBeyondTheMachineAreRefused) {
  ServerOptions o;
  EXPECT_NO_THROW(check_options(o));
  o.parallel = 4096;
  o.max_queue = 65536;
  try {
    check_options(o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--parallel 4096 with --max-queue 65536"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
  o.parallel = 8;
  o.max_queue = kMaxHttpWorkers - kSpareHttpWorkers - 8;
  EXPECT_NO_THROW(check_options(o));
  ++o.max_queue;
  EXPECT_THROW(check_options(o), Error);
}

// Server::respond on the tiny model of tiny_model.h.
class ServerHttp : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    backend_ = test_server::tiny_chat_backend().release();
    tokenizer_ = new tokenizer::Tokenizer(backend_->file());
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete backend_;
  }

  static std::unique_ptr<Server> server(ServerOptions options = {}) {
    ApiDefaults d;
    d.model_id = "tiny";
    d.context = 64;
    d.attention.method = Method::Dense;
    options.quiet = true;
    options.parallel = 2;
    options.max_queue = 2;
    backend_->limit_kv_tokens(INT64_MAX);
    return std::make_unique<Server>(*backend_, *tokenizer_, d, options);
  }

  static engine::Backend* backend_;
  static tokenizer::Tokenizer* tokenizer_;
};
engine::Backend* ServerHttp::backend_ = nullptr;
tokenizer::Tokenizer* ServerHttp::tokenizer_ = nullptr;

// The status of each response in `bytes`, in order.
std::vector<int> statuses(const std::string& bytes) {
  std::vector<int> out;
  static const std::regex status_line("HTTP/1\\.1 (\\d{3}) ");
  for (auto it = std::sregex_iterator(bytes.begin(), bytes.end(), status_line); it != std::sregex_iterator(); ++it)
    out.push_back(std::stoi((*it)[1]));
  return out;
}

std::string body_of(const std::string& response) { return response.substr(response.find("\r\n\r\n") + 4); }

std::string post(const std::string& path, const std::string& body, const std::string& headers = {}) {
  return fmt::format("POST {} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{}\r\n{}",
                     path, body.size(), headers, body);
}

std::string chunked(const std::string& path, const std::string& body, size_t chunk) {
  std::string out = fmt::format("POST {} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", path);
  for (size_t at = 0; at < body.size(); at += chunk) {
    const std::string_view piece = std::string_view(body).substr(at, chunk);
    out += fmt::format("{:x}\r\n{}\r\n", piece.size(), piece);
  }
  return out + "0\r\n\r\n";
}

TEST_F(ServerHttp, InvalidUtf8PathIs404NotACrash) {
  const auto s = server();
  for (const char* path : {"/%ff", "/v1/%c3", "/%ed%a0%80", "/a%00b"}) {
    const std::string response = s->respond(fmt::format("GET {} HTTP/1.1\r\nHost: x\r\n\r\n", path));
    ASSERT_EQ(statuses(response), std::vector<int>{404}) << path;
    const json body = json::parse(body_of(response), nullptr, false);
    ASSERT_TRUE(body.is_object()) << response;
    EXPECT_EQ(body["error"]["code"], "not_found");
  }
  EXPECT_EQ(statuses(s->respond("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")), std::vector<int>{200});
}

TEST_F(ServerHttp, ACompletionAndKeepAlive) {
  const auto s = server();
  const std::string request = post("/v1/completions", R"({"prompt": "hi", "max_tokens": 3, "temperature": 0})");
  const std::string response = s->respond(request + "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(statuses(response), (std::vector<int>{200, 200})) << response;
  EXPECT_NE(response.find(R"("completion_tokens":3)"), std::string::npos) << response;
}

TEST_F(ServerHttp, BodyLimitHoldsForEveryFraming) {
  ServerOptions o;
  o.max_body_bytes = 4096;
  const auto s = server(o);
  const std::string small = R"({"prompt": "hi", "max_tokens": 1})";
  const std::string large = R"({"prompt": ")" + std::string(6000, 'x') + R"(", "max_tokens": 1})";
  EXPECT_EQ(statuses(s->respond(chunked("/v1/completions", small, 5))), std::vector<int>{200});
  EXPECT_EQ(statuses(s->respond(post("/v1/completions", large))), std::vector<int>{413});
  for (const size_t chunk : {size_t(1000), size_t(100000)}) {
    const std::string response = s->respond(chunked("/v1/completions", large, chunk));
    EXPECT_EQ(statuses(response), std::vector<int>{413}) << chunk;
    EXPECT_NE(response.find("payload_too_large"), std::string::npos);
  }
  // The rest of an unread body is not taken for the next request.
  const std::string response =
      s->respond(chunked("/v1/chat/completions", large, 512) + "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(statuses(response), std::vector<int>{413}) << response;
}

TEST_F(ServerHttp, UnauthorizedBodyIsNotTakenForARequest) {
  ServerOptions o;
  o.api_key = "sekret";
  const auto s = server(o);
  const std::string smuggled = "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string response = s->respond(post("/v1/completions", smuggled) + "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(statuses(response), std::vector<int>{401}) << response;
}

TEST_F(ServerHttp, HugeHeadIs431) {
  const auto s = server();
  std::string head = "GET /health HTTP/1.1\r\n";
  while (head.size() < (64 << 10)) head += "X-Filler: " + std::string(1000, 'y') + "\r\n";
  EXPECT_EQ(statuses(s->respond(head + "\r\n")), std::vector<int>{431});
  EXPECT_EQ(statuses(s->respond("GET /" + std::string(100000, 'a'))), std::vector<int>{431});
}

TEST_F(ServerHttp, MetricsLabelOnlyKnownRoutes) {
  const auto s = server();
  std::string requests = "GET /a%22%7D%20666%0Afake_metric%201 HTTP/1.1\r\nHost: x\r\n\r\n";
  for (int i = 0; i < 50; ++i) requests += fmt::format("GET /path{} HTTP/1.1\r\nHost: x\r\n\r\n", i);
  requests += "GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string response = s->respond(requests);
  const std::string metrics = response.substr(response.rfind("\r\n\r\n") + 4);
  EXPECT_EQ(metrics.find("\nfake_metric"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find(R"(kascade_http_requests_total{path="other",status="404"} 51)"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find(R"(kascade_http_requests_total{path="/health",status="200"} 1)"), std::string::npos);
  // Every sample line is NAME{LABELS} VALUE or NAME VALUE.
  static const std::regex sample(R"(^[a-z_]+(\{[a-z_]+="[^"\\\n]*"(,[a-z_]+="[^"\\\n]*")*\})? [0-9.e+-]+$)");
  size_t lines = 0;
  for (size_t at = 0, end; at < metrics.size(); at = end + 1) {
    end = metrics.find('\n', at);
    if (end == std::string::npos) end = metrics.size();
    const std::string line = metrics.substr(at, end - at);
    if (line.empty() || line[0] == '#') continue;
    EXPECT_TRUE(std::regex_match(line, sample)) << line;
    ++lines;
  }
  EXPECT_LT(lines, 40u);
}

}  // namespace
}  // namespace kascade::server
