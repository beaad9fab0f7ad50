// Chat prompt formatting. A model's tokenizer.chat_template is Jinja; rather
// than interpret Jinja, we recognise the family from the template text and
// render it natively:
//  - ChatML (SmolLM2, Qwen2, Qwen2.5): "<|im_start|>{role}\n{content}<|im_end|>\n",
//    with the default system prompt the template inserts when the
//    conversation has none (read from the template text);
//  - Llama 3 / 3.1+: "<|start_header_id|>{role}<|end_header_id|>\n\n{trimmed}<|eot_id|>",
//    3.1+ with its "Cutting Knowledge Date" system block;
//  - Gemma: "<start_of_turn>{user|model}\n{trimmed}<end_of_turn>\n", a leading
//    system prompt folded into the first turn as "{system}\n\n", turns
//    alternating user/model from the user (as the template enforces);
//  - raw: the message contents, concatenated, nothing added.
// BOS is not rendered: encode() adds it when the model wants it.
// Prompts are encoded with encode(), never by tokenizing render()'s text with
// parse_special: control tokens come only from the template's markup, and a
// message's content is always text, so "<|im_end|><|im_start|>system" typed
// by a user stays those characters instead of becoming chat markup.
// Tools, images and other roles are non-goals.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kascade::tokenizer {

class Tokenizer;

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

enum class ChatFormat { kRaw, kChatML, kLlama3, kGemma };

class ChatTemplate {
 public:
  // Recognises the family of a tokenizer.chat_template; throws Error for an
  // empty or unknown template, suggesting --raw.
  static ChatTemplate from_jinja(std::string_view source);
  static ChatTemplate raw() { return ChatTemplate(ChatFormat::kRaw); }

  ChatFormat format() const { return format_; }
  const char* format_name() const;
  // ChatML: the system prompt used when the conversation has none ("" for none).
  const std::string& default_system_prompt() const { return default_system_prompt_; }
  // Llama 3.1+: the "Today Date" of the system block (the templates' own default).
  void set_today(std::string date) { today_ = std::move(date); }

  // add_generation_prompt: end with the header of an assistant turn, as the
  // model's prompt for its reply. Throws Error on a role other than
  // system/user/assistant, and for Gemma on turns that do not alternate.
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

  // The rendered prompt as token ids, BOS added when the model wants it:
  // control tokens are parsed in the template's markup only; message
  // contents, and `continuation` (text the reply should start with, appended
  // after the generation prompt), are encoded as text.
  std::vector<int32_t> encode(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                              bool add_generation_prompt, std::string_view continuation = {}) const;

  // The rendered prompt in pieces: markup from the template, or content
  // from the caller. render() is their concatenation.
  struct Part {
    std::string text;
    bool content = false;
  };
  std::vector<Part> render_parts(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

 private:
  class Builder;
  explicit ChatTemplate(ChatFormat format) : format_(format) {}
  void render_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt, Builder& out) const;
  void render_llama3(std::span<const ChatMessage> messages, bool add_generation_prompt, Builder& out) const;
  void render_gemma(std::span<const ChatMessage> messages, bool add_generation_prompt, Builder& out) const;

  ChatFormat format_;
  std::string default_system_prompt_;
  bool knowledge_date_block_ = false;  // Llama 3.1+
  std::string today_ = "26 Jul 2024";
};

}  // namespace kascade::tokenizer
