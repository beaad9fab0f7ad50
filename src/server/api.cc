#include "server/api.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "sampling/stop_strings.h"

namespace kascade::server {

using nlohmann::json;

namespace {

std::string api_name(std::string_view setting) {
  std::string name(setting);
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

[[noreturn]] void bad(const std::string& param, const std::string& message, const std::string& code = {}) {
  throw ApiError(400, message, "invalid_request_error", param, code);
}

const char* type_name(const json& value) {
  switch (value.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::binary: return "binary";
    case json::value_t::discarded: return "nothing";
    default: return "a number";
  }
}

// The value of `key` in `object`, or null when absent.
const json& field(const json& object, const char* key) {
  static const json null;
  const auto it = object.find(key);
  return it == object.end() ? null : *it;
}

std::optional<double> number(const json& object, const char* key, double low, double high, bool low_open = false) {
  const json& v = field(object, key);
  if (v.is_null()) return std::nullopt;
  if (!v.is_number()) bad(key, fmt::format("'{}' must be a number, got {}", key, type_name(v)));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x > high || (low_open ? x <= low : x < low))
    bad(key, fmt::format("'{}' must be in {}{}, {}], got {}", key, low_open ? "(" : "[", low, high, x));
  return x;
}

std::optional<int64_t> integer(const json& object, const char* key, int64_t low, int64_t high) {
  const json& v = field(object, key);
  if (v.is_null()) return std::nullopt;
  if (!v.is_number_integer()) {
    // 5.0 is an integer to JavaScript clients.
    if (v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>()) &&
        std::abs(v.get<double>()) < 9e15)
      return integer(json{{key, int64_t(v.get<double>())}}, key, low, high);
    bad(key, fmt::format("'{}' must be an integer, got {}", key, type_name(v)));
  }
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    bad(key, fmt::format("'{}' must be at most {}, got {}", key, high, v.dump()));
  const int64_t x = v.get<int64_t>();
  if (x < low || x > high) bad(key, fmt::format("'{}' must be in [{}, {}], got {}", key, low, high, x));
  return x;
}

std::optional<bool> boolean(const json& object, const char* key) {
  const json& v = field(object, key);
  if (v.is_null()) return std::nullopt;
  if (!v.is_boolean()) bad(key, fmt::format("'{}' must be a boolean, got {}", key, type_name(v)));
  return v.get<bool>();
}

std::string text_content(const json& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    bad(param, fmt::format("'{}' must be a string or an array of text parts, got {}", param, type_name(content)));
  std::string text;
  for (const json& part : content) {
    if (!part.is_object() || field(part, "type") != "text" || !field(part, "text").is_string())
      bad(param, fmt::format("'{}': only parts {{\"type\": \"text\", \"text\": ...}} are supported", param));
    text += field(part, "text").get<std::string>();
  }
  return text;
}

// "logit_bias": {"token id": bias}, ids written as decimal integers (one
// spelling per id, so no token is biased twice) below the vocabulary's size.
std::vector<std::pair<int32_t, float>> logit_bias(const json& bias, int64_t vocab_size) {
  std::vector<std::pair<int32_t, float>> out;
  if (bias.is_null()) return out;
  if (!bias.is_object())
    bad("logit_bias", fmt::format("'logit_bias' must be an object of token ids to biases, got {}", type_name(bias)));
  for (const auto& [key, value] : bias.items()) {
    int64_t token = -1;
    const auto [end, error] = std::from_chars(key.data(), key.data() + key.size(), token);
    if (error != std::errc() || end != key.data() + key.size() || token < 0 || token >= vocab_size ||
        key != std::to_string(token))
      bad("logit_bias", fmt::format("'logit_bias' key '{}' is not a token id in [0, {})", key, vocab_size));
    if (!value.is_number())
      bad("logit_bias", fmt::format("'logit_bias' of token {} must be a number, got {}", token, type_name(value)));
    const double x = value.get<double>();
    if (!(x >= -100 && x <= 100))
      bad("logit_bias", fmt::format("'logit_bias' of token {} must be in [-100, 100], got {}", token, x));
    out.emplace_back(int32_t(token), float(x));
  }
  return out;
}

// The "kascade" object: the per-request attention settings of
// kascade/options.h, named with '_' for '-' (min_k, sparse_phases).
void parse_kascade(const json& k, AttentionOptions& a) {
  if (k.is_null()) return;
  if (!k.is_object()) bad("kascade", fmt::format("'kascade' must be an object, got {}", type_name(k)));
  std::vector<std::string> known;
  for (const AttentionSetting& s : attention_settings())
    if (s.per_request) known.push_back(api_name(s.name));
  for (const auto& [key, value] : k.items()) {
    const std::string param = "kascade." + key;
    const AttentionSetting* setting = nullptr;
    for (const AttentionSetting& s : attention_settings())
      if (s.per_request && api_name(s.name) == key) setting = &s;
    if (!setting) bad(param, fmt::format("unknown field '{}' (known: {})", param, fmt::join(known, ", ")));
    std::string text;
    switch (setting->kind) {
      case SettingKind::Switch:
        if (!value.is_boolean()) bad(param, fmt::format("'{}' must be true or false, got {}", param, type_name(value)));
        text = value.get<bool>() ? "true" : "false";
        break;
      case SettingKind::Integer:
      case SettingKind::Number:
        if (!value.is_number()) bad(param, fmt::format("'{}' must be a number, got {}", param, type_name(value)));
        text = value.dump();
        break;
      case SettingKind::Choice:
        if (!value.is_string()) bad(param, fmt::format("'{}' must be a string, got {}", param, type_name(value)));
        text = value.get<std::string>();
        break;
    }
    try {
      set_attention_option(a, setting->name, text, param);
    } catch (const Error& e) {
      bad(param, e.what());
    }
  }
}

}  // namespace

json error_body(const ApiError& error) {
  return {{"error",
           {{"message", error.what()},
            {"type", error.type},
            {"param", error.param.empty() ? json(nullptr) : json(error.param)},
            {"code", error.code.empty() ? json(nullptr) : json(error.code)}}}};
}

std::string dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

ApiRequest parse_request(Endpoint endpoint, std::string_view body, const ApiDefaults& defaults) {
  const json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) bad("", "the request body is not valid JSON");
  if (!doc.is_object()) bad("", fmt::format("the request body must be a JSON object, got {}", type_name(doc)));
  ApiRequest r;
  r.endpoint = endpoint;

  const json& model = field(doc, "model");
  if (!model.is_null()) {
    if (!model.is_string()) bad("model", fmt::format("'model' must be a string, got {}", type_name(model)));
    if (model.get<std::string>() != defaults.model_id)
      throw ApiError(404,
                     fmt::format("The model '{}' does not exist (this server runs '{}')", model.get<std::string>(),
                                 defaults.model_id),
                     "invalid_request_error", "model", "model_not_found");
  }

  if (endpoint == Endpoint::Chat) {
    const json& messages = field(doc, "messages");
    if (messages.is_null()) bad("messages", "'messages' is required");
    if (!messages.is_array()) bad("messages", fmt::format("'messages' must be an array, got {}", type_name(messages)));
    if (messages.empty()) bad("messages", "'messages' must not be empty");
    for (size_t i = 0; i < messages.size(); ++i) {
      const json& m = messages[i];
      const std::string param = fmt::format("messages[{}]", i);
      if (!m.is_object()) bad(param, fmt::format("'{}' must be an object, got {}", param, type_name(m)));
      const json& role = field(m, "role");
      if (!role.is_string()) bad(param + ".role", fmt::format("'{}.role' must be a string", param));
      const std::string r_name = role.get<std::string>();
      if (r_name != "system" && r_name != "user" && r_name != "assistant" && r_name != "developer")
        bad(param + ".role", fmt::format("'{}.role' must be system, user or assistant, got '{}'", param, r_name));
      const json& content = field(m, "content");
      if (content.is_null()) bad(param + ".content", fmt::format("'{}.content' is required", param));
      r.messages.push_back({r_name == "developer" ? "system" : r_name, text_content(content, param + ".content")});
    }
    if (const auto m = integer(doc, "max_completion_tokens", 1, std::numeric_limits<int64_t>::max()))
      r.max_tokens = m;
  } else {
    const json& prompt = field(doc, "prompt");
    if (prompt.is_null()) bad("prompt", "'prompt' is required");
    if (prompt.is_string()) {
      r.prompt = prompt.get<std::string>();
    } else if (prompt.is_array() && prompt.size() == 1 && prompt[0].is_string()) {
      r.prompt = prompt[0].get<std::string>();
    } else {
      bad("prompt", fmt::format("'prompt' must be a string (or an array of one string), got {}", type_name(prompt)));
    }
    if (r.prompt.empty()) bad("prompt", "'prompt' must not be empty");
    if (const auto echo = boolean(doc, "echo"); echo && *echo) bad("echo", "'echo' is not supported");
    if (const auto best_of = integer(doc, "best_of", 1, 1 << 20); best_of && *best_of != 1)
      bad("best_of", "'best_of' must be 1");
    if (!field(doc, "suffix").is_null()) bad("suffix", "'suffix' is not supported");
  }
  if (const auto m = integer(doc, "max_tokens", 1, std::numeric_limits<int64_t>::max())) r.max_tokens = m;

  if (const auto n = integer(doc, "n", 1, 1 << 20); n && *n != 1) bad("n", "only 'n': 1 is supported");
  const json& logprobs = field(doc, "logprobs");
  if (!(logprobs.is_null() || logprobs == false)) bad("logprobs", "'logprobs' is not supported");
  const json& top_logprobs = field(doc, "top_logprobs");
  if (!(top_logprobs.is_null() || top_logprobs == 0)) bad("top_logprobs", "'top_logprobs' is not supported");
  const json& format = field(doc, "response_format");
  if (!format.is_null()) {
    const json& type = field(format, "type");
    if (!format.is_object() || !type.is_string())
      bad("response_format", "'response_format' must be an object {\"type\": \"text\"}");
    if (type != "text")
      bad("response_format",
          fmt::format("'response_format' type '{}' is not supported (only \"text\")", type.get<std::string>()));
  }
  const json& tools = field(doc, "tools");
  if (!(tools.is_null() || (tools.is_array() && tools.empty()))) bad("tools", "'tools' are not supported");

  // Sampling: OpenAI's defaults (temperature 1, top_p 1), no top-k or min-p
  // unless asked for.
  sampling::SamplerOptions& s = r.generate.sampling;
  s = sampling::SamplerOptions{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f};
  if (const auto t = number(doc, "temperature", 0, 2)) s.temperature = float(*t);
  if (const auto p = number(doc, "top_p", 0, 1, /*low_open=*/true)) s.top_p = float(*p);
  if (const auto k = integer(doc, "top_k", 0, 1 << 30)) s.top_k = int32_t(*k);
  if (const auto m = number(doc, "min_p", 0, 1)) s.min_p = float(*m);
  for (const char* key : {"repeat_penalty", "repetition_penalty"})
    if (const auto r_p = number(doc, key, 0, 100, /*low_open=*/true)) s.repetition_penalty = float(*r_p);
  if (const auto f = number(doc, "frequency_penalty", -2, 2)) s.frequency_penalty = float(*f);
  if (const auto p = number(doc, "presence_penalty", -2, 2)) s.presence_penalty = float(*p);
  s.logit_bias = logit_bias(field(doc, "logit_bias"), defaults.vocab_size);
  const json& seed = field(doc, "seed");
  if (!seed.is_null()) {
    if (!seed.is_number_integer()) bad("seed", fmt::format("'seed' must be an integer, got {}", type_name(seed)));
    s.seed = seed.is_number_unsigned() ? seed.get<uint64_t>() : uint64_t(seed.get<int64_t>());
  }

  const json& stop = field(doc, "stop");
  if (stop.is_string()) {
    r.generate.stop_strings.push_back(stop.get<std::string>());
  } else if (stop.is_array()) {
    if (stop.size() > 4) bad("stop", fmt::format("'stop' takes at most 4 strings, got {}", stop.size()));
    for (const json& s_i : stop) {
      if (!s_i.is_string()) bad("stop", "'stop' must be a string or an array of strings");
      r.generate.stop_strings.push_back(s_i.get<std::string>());
    }
  } else if (!stop.is_null()) {
    bad("stop", fmt::format("'stop' must be a string or an array of strings, got {}", type_name(stop)));
  }
  try {
    sampling::check_stop_strings(r.generate.stop_strings);
  } catch (const Error& e) {
    bad("stop", fmt::format("'stop': {}", e.what()));
  }

  r.generate.ignore_eos = boolean(doc, "ignore_eos").value_or(false);

  r.stream = boolean(doc, "stream").value_or(false);
  const json& stream_options = field(doc, "stream_options");
  if (!stream_options.is_null()) {
    if (!stream_options.is_object())
      bad("stream_options", fmt::format("'stream_options' must be an object, got {}", type_name(stream_options)));
    r.include_usage = boolean(stream_options, "include_usage").value_or(false);
  }

  r.attention = defaults.attention;
  parse_kascade(field(doc, "kascade"), r.attention);
  if (r.attention.kascade()) {
    if (defaults.profile) r.attention.profile = defaults.profile;
  } else {
    r.attention.profile.reset();
  }
  return r;
}

void fit_context(ApiRequest& request, int64_t prompt_tokens, const ApiDefaults& defaults) {
  const int64_t context = defaults.context;
  const char* where = request.endpoint == Endpoint::Chat ? "messages" : "prompt";
  if (prompt_tokens >= context)
    throw ApiError(400,
                   fmt::format("This model's maximum context length is {} tokens. However, your {} resulted in {} "
                               "tokens, which leaves no room for a completion. Please reduce the length of the {}.",
                               context, where, prompt_tokens, where),
                   "invalid_request_error", where, "context_length_exceeded");
  if (request.max_tokens && *request.max_tokens > context - prompt_tokens)
    throw ApiError(400,
                   // Unsigned: both are below 2^63, their sum is not.
                   fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens "
                               "({} in the {}, {} in the completion). Please reduce the length of the {} or "
                               "completion.",
                               context, uint64_t(prompt_tokens) + uint64_t(*request.max_tokens), prompt_tokens, where,
                               *request.max_tokens, where),
                   "invalid_request_error", "max_tokens", "context_length_exceeded");
  request.generate.max_new_tokens = request.max_tokens.value_or(context - prompt_tokens);
}

std::string finish_reason(const engine::GenerationResult& result) {
  return result.stop_reason == "token limit" || result.stop_reason == "context full" ? "length" : "stop";
}

json usage(const engine::GenerationResult& result) {
  const int64_t completion = int64_t(result.tokens.size());
  return {{"prompt_tokens", result.prompt_tokens},
          {"completion_tokens", completion},
          {"total_tokens", result.prompt_tokens + completion}};
}

json completion_response(const ApiRequest& request, const std::string& id, int64_t created, const std::string& model,
                         const engine::GenerationResult& result) {
  const bool chat = request.endpoint == Endpoint::Chat;
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish_reason(result)}};
  if (chat)
    choice["message"] = {{"role", "assistant"}, {"content", result.text}};
  else
    choice["text"] = result.text;
  return {{"id", id},
          {"object", chat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({choice})},
          {"usage", usage(result)},
          {"kascade",
           {{"attention", result.attention_name},
            {"stop_reason", result.stop_reason},
            {"prefill_seconds", result.prefill_seconds},
            {"decode_seconds", result.decode_seconds}}}};
}

json stream_chunk(const ApiRequest& request, const std::string& id, int64_t created, const std::string& model,
                  const std::string& text, bool first, const engine::GenerationResult* result) {
  const bool chat = request.endpoint == Endpoint::Chat;
  json choice = {{"index", 0}, {"logprobs", nullptr},
                 {"finish_reason", result ? json(finish_reason(*result)) : json(nullptr)}};
  if (chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || first) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  return {{"id", id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({choice})}};
}

json usage_chunk(const ApiRequest& request, const std::string& id, int64_t created, const std::string& model,
                 const engine::GenerationResult& result) {
  const bool chat = request.endpoint == Endpoint::Chat;
  return {{"id", id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array()},
          {"usage", usage(result)}};
}

}  // namespace kascade::server
