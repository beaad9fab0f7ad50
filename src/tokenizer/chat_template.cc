// Native rendering of the chat template families (see chat_template.h).
#include "tokenizer/chat_template.h"

#include <algorithm>

#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace kascade::tokenizer {
namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";
constexpr std::string_view kHeaderStart = "<|start_header_id|>";
constexpr std::string_view kHeaderEnd = "<|end_header_id|>\n\n";
constexpr std::string_view kEndOfTurn = "<|eot_id|>";
constexpr std::string_view kStartOfTurn = "<start_of_turn>";
constexpr std::string_view kGemmaEndOfTurn = "<end_of_turn>\n";

// Jinja's trim is Python's str.strip(): White_Space plus U+001C..U+001F.
bool is_python_space(uint32_t cp) {
  return (cp >= 0x1C && cp <= 0x1F) || (cp < kInvalidByteBase && classify(cp) == CodePointClass::kWhitespace);
}

std::string_view trim(std::string_view text) {
  size_t begin = text.size(), end = 0;
  for (size_t offset = 0; offset < text.size();) {
    const DecodedChar ch = decode_utf8(text, offset);
    if (!is_python_space(ch.code_point)) {
      begin = std::min(begin, offset);
      end = offset + ch.length;
    }
    offset += ch.length;
  }
  return begin < end ? text.substr(begin, end - begin) : std::string_view();
}

// The escapes a Jinja string literal may use in a system prompt.
std::string unescape_jinja_literal(std::string_view literal) {
  std::string out;
  for (size_t i = 0; i < literal.size(); ++i) {
    if (literal[i] != '\\' || i + 1 == literal.size()) {
      out.push_back(literal[i]);
      continue;
    }
    const char next = literal[++i];
    out.push_back(next == 'n' ? '\n' : next == 't' ? '\t' : next);
  }
  return out;
}

// The system prompt a ChatML template writes when the conversation has none:
// a literal "<|im_start|>system\n...<|im_end|>" whose body is plain text, as
// opposed to the branch that concatenates messages[0]['content'].
std::string find_default_system_prompt(std::string_view source) {
  const std::string header = std::string(kImStart) + "system";
  for (size_t pos = source.find(header); pos != std::string_view::npos; pos = source.find(header, pos + 1)) {
    std::string_view rest = source.substr(pos + header.size());
    if (rest.starts_with("\n")) {
      rest.remove_prefix(1);
    } else if (rest.starts_with("\\n")) {
      rest.remove_prefix(2);
    } else {
      continue;
    }
    const size_t end = rest.find(kImEnd);
    if (end == std::string_view::npos) continue;
    const std::string_view body = rest.substr(0, end);
    if (body.find_first_of("'\"{}") != std::string_view::npos) continue;
    return unescape_jinja_literal(body);
  }
  return {};
}

void check_role(const ChatMessage& message, size_t index) {
  if (message.role != "system" && message.role != "user" && message.role != "assistant") {
    fail("chat message {}: role '{}' is not supported (system, user, assistant)", index,
         gguf::printable(message.role));
  }
}

}  // namespace

ChatTemplate ChatTemplate::from_jinja(std::string_view source) {
  if (source.empty()) {
    fail("the model has no chat template (tokenizer.chat_template); use --raw to send the prompt as it is");
  }
  if (source.find(kImStart) != std::string_view::npos) {
    ChatTemplate chat(ChatFormat::kChatML);
    chat.default_system_prompt_ = find_default_system_prompt(source);
    return chat;
  }
  if (source.find(kHeaderStart) != std::string_view::npos) {
    ChatTemplate chat(ChatFormat::kLlama3);
    chat.knowledge_date_block_ = source.find("Cutting Knowledge Date") != std::string_view::npos;
    return chat;
  }
  if (source.find(kStartOfTurn) != std::string_view::npos) return ChatTemplate(ChatFormat::kGemma);
  fail("unrecognised chat template (kascade renders ChatML, Llama 3 and Gemma templates) starting '{}'; use --raw to "
       "send the prompt as it is", gguf::printable(source.substr(0, 60)));
}

const char* ChatTemplate::format_name() const {
  switch (format_) {
    case ChatFormat::kRaw: return "raw";
    case ChatFormat::kChatML: return "chatml";
    case ChatFormat::kLlama3: return "llama3";
    case ChatFormat::kGemma: return "gemma";
  }
  return "?";
}

// Collects markup and content parts, merging neighbours of the same kind.
class ChatTemplate::Builder {
 public:
  Builder& markup(std::string_view text) { return add(text, false); }
  Builder& content(std::string_view text) { return add(text, true); }
  std::vector<Part> take() { return std::move(parts_); }

 private:
  Builder& add(std::string_view text, bool content) {
    if (text.empty()) return *this;
    if (parts_.empty() || parts_.back().content != content) parts_.push_back({"", content});
    parts_.back().text.append(text);
    return *this;
  }
  std::vector<Part> parts_;
};

std::vector<ChatTemplate::Part> ChatTemplate::render_parts(std::span<const ChatMessage> messages,
                                                           bool add_generation_prompt) const {
  for (size_t i = 0; i < messages.size(); ++i) check_role(messages[i], i);
  Builder out;
  switch (format_) {
    case ChatFormat::kChatML:
      render_chatml(messages, add_generation_prompt, out);
      break;
    case ChatFormat::kLlama3:
      render_llama3(messages, add_generation_prompt, out);
      break;
    case ChatFormat::kGemma:
      render_gemma(messages, add_generation_prompt, out);
      break;
    case ChatFormat::kRaw:
      for (const ChatMessage& message : messages) out.content(message.content);
      break;
  }
  return out.take();
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  std::string text;
  for (const Part& part : render_parts(messages, add_generation_prompt)) text += part.text;
  return text;
}

std::vector<int32_t> ChatTemplate::encode(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                                          bool add_generation_prompt, std::string_view continuation) const {
  const std::vector<Part> parts = render_parts(messages, add_generation_prompt);
  std::vector<TextSegment> segments;
  for (const Part& part : parts) segments.push_back({part.text, !part.content});
  if (!continuation.empty()) segments.push_back({continuation, false});
  return tokenizer.encode_segments(segments, /*add_special_tokens=*/true);
}

void ChatTemplate::render_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                 Builder& out) const {
  const auto turn = [&](std::string_view role, std::string_view content, bool from_template) {
    out.markup(kImStart).markup(role).markup("\n");
    if (from_template) {
      out.markup(content);
    } else {
      out.content(content);
    }
    out.markup(kImEnd).markup("\n");
  };
  if (!messages.empty() && messages[0].role != "system" && !default_system_prompt_.empty()) {
    turn("system", default_system_prompt_, true);
  }
  for (const ChatMessage& message : messages) turn(message.role, message.content, false);
  if (add_generation_prompt) out.markup(kImStart).markup("assistant\n");
}

void ChatTemplate::render_llama3(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                 Builder& out) const {
  const auto header = [&](std::string_view role) { out.markup(kHeaderStart).markup(role).markup(kHeaderEnd); };
  if (knowledge_date_block_) {
    // 3.1+: a system block always, carrying the first message when it is a system prompt.
    header("system");
    out.markup("Cutting Knowledge Date: December 2023\nToday Date: " + today_ + "\n\n");
    if (!messages.empty() && messages[0].role == "system") {
      out.content(trim(messages[0].content));
      messages = messages.subspan(1);
    }
    out.markup(kEndOfTurn);
  }
  for (const ChatMessage& message : messages) {
    header(message.role);
    out.content(trim(message.content)).markup(kEndOfTurn);
  }
  if (add_generation_prompt) header("assistant");
}

void ChatTemplate::render_gemma(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                Builder& out) const {
  // A leading system prompt, untrimmed, opens the first turn's content.
  std::string_view first_prefix;
  size_t first = 0;
  if (!messages.empty() && messages[0].role == "system") {
    first_prefix = messages[0].content;
    first = 1;
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    // The template's own check: user turns exactly at even places.
    if ((message.role == "user") != ((i - first) % 2 == 0))
      fail("chat message {}: Gemma conversations alternate user and assistant turns, starting with the user", i);
    out.markup(kStartOfTurn).markup(message.role == "assistant" ? "model" : message.role).markup("\n");
    if (i == first && first > 0) out.content(first_prefix).markup("\n\n");
    out.content(trim(message.content)).markup(kGemmaEndOfTurn);
  }
  if (add_generation_prompt) out.markup(kStartOfTurn).markup("model\n");
}

}  // namespace kascade::tokenizer
