// libFuzzer target for the chat template renderer and prompt encoder
// (tokenizer::ChatTemplate::render_parts, render, encode). The input is a
// conversation: byte 0 picks the template family (ChatML with a default
// system prompt, ChatML without, Llama 3, Llama 3.1, Gemma, raw), byte 1 the
// options (add_generation_prompt, a continuation), the rest messages cut at
// 0x1E, each one's first byte picking its role. Any conversation either
// renders or raises kascade::Error (Gemma's alternation rule). Checks, with a
// byte-level and a SentencePiece vocabulary that hold every family's control
// tokens: render() is the concatenation of the parts; the encoded prompt
// holds exactly the control tokens of the same conversation with every
// content replaced by "x" (content never becomes markup, whatever it
// spells); the byte-level ids decode back to the rendered text.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

#include "tiny_vocabulary.h"

namespace {

using namespace kascade;
using namespace kascade::tokenizer;

const std::vector<std::string> kControls = {"<|im_start|>",        "<|im_end|>",          "<|begin_of_text|>",
                                            "<|start_header_id|>", "<|end_header_id|>",   "<|eot_id|>",
                                            "<start_of_turn>",     "<end_of_turn>",       "<bos>"};

Tokenizer byte_level() {
  test_vocab::Vocabulary v("gpt2");
  v.byte_tokens();
  for (const auto& [left, right] :
       {std::pair{"u", "s"}, {"us", "e"}, {"use", "r"}, {"\n", "\n"}, {"s", "y"}, {"sy", "s"}})
    v.merge(left, right);
  const uint32_t first_control = v.size();
  v.tokens(kControls, test_vocab::kControl).token("<think>", test_vocab::kUserDefined);  // matched in any text
  return v.id("bos", first_control + 2)
      .id("eos", first_control + 1)
      .flag("add_bos_token", true)
      .build("<byte-level vocabulary>");
}

Tokenizer sentencepiece() {
  test_vocab::Vocabulary v("llama");
  v.token("<unk>", test_vocab::kUnknown)
      .tokens(kControls, test_vocab::kControl)
      .byte_fallback()
      .pieces({"\u2581", "u", "s", "e", "r", "us", "user", "\u2581user", "model", "\n"});
  return v.id("unknown", 0).id("bos", 9).id("eos", 8).build("<sentencepiece vocabulary>");  // <bos>, <end_of_turn>
}

const std::vector<Tokenizer>& tokenizers() {
  static const std::vector<Tokenizer> instance = [] {
    std::vector<Tokenizer> t;
    t.push_back(byte_level());
    t.push_back(sentencepiece());
    return t;
  }();
  return instance;
}

ChatTemplate family(uint8_t selector) {
  switch (selector % 6) {
    case 0:
      return ChatTemplate::from_jinja(
          "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful AI assistant named "
          "SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}{% for message in messages %}"
          "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}");
    case 1:
      return ChatTemplate::from_jinja("{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}");
    case 2:
      return ChatTemplate::from_jinja("<|start_header_id|>{{ role }}<|end_header_id|>");
    case 3:
      return ChatTemplate::from_jinja("Cutting Knowledge Date <|start_header_id|>");
    case 4:
      return ChatTemplate::from_jinja("<start_of_turn>");
    default:
      return ChatTemplate::raw();
  }
}

void check(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "fuzz_chat_template: %s\n", what);
    std::abort();
  }
}

std::vector<TokenId> controls(const Tokenizer& tokenizer, const std::vector<TokenId>& ids) {
  std::vector<TokenId> out;
  for (TokenId id : ids) {
    check(id >= 0 && static_cast<size_t>(id) < tokenizer.vocab_size(), "id out of range");
    if (tokenizer.token_type(id) == TokenType::kControl) out.push_back(id);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const ChatTemplate chat = family(data[0]);
  const bool add_generation_prompt = data[1] & 1;
  const bool with_continuation = data[1] & 2;
  std::vector<ChatMessage> messages;
  std::string continuation;
  const std::string_view rest(reinterpret_cast<const char*>(data + 2), size - 2);
  for (size_t start = 0; start <= rest.size();) {
    size_t end = rest.find('\x1e', start);
    if (end == std::string_view::npos) end = rest.size();
    const std::string_view piece = rest.substr(start, end - start);
    static const char* const kRoles[] = {"user", "assistant", "system"};
    const char* role = piece.empty() ? "user" : kRoles[static_cast<uint8_t>(piece[0]) % 3];
    messages.push_back({role, std::string(piece.empty() ? piece : piece.substr(1))});
    start = end + 1;
  }
  if (with_continuation) {
    continuation = messages.back().content;
    messages.pop_back();
  }

  std::vector<ChatTemplate::Part> parts;
  try {
    parts = chat.render_parts(messages, add_generation_prompt);
  } catch (const Error&) {
    return 0;  // e.g. Gemma turns that do not alternate
  }
  std::string joined;
  for (const ChatTemplate::Part& part : parts) joined += part.text;
  const std::string rendered = chat.render(messages, add_generation_prompt);
  check(joined == rendered, "render() is not the concatenation of render_parts()");

  std::vector<ChatMessage> plain = messages;
  for (ChatMessage& message : plain) message.content = "x";
  for (const Tokenizer& tokenizer : tokenizers()) {
    const std::vector<TokenId> ids = chat.encode(tokenizer, messages, add_generation_prompt, continuation);
    const std::vector<TokenId> expected =
        controls(tokenizer, chat.encode(tokenizer, plain, add_generation_prompt, continuation.empty() ? "" : "x"));
    check(controls(tokenizer, ids) == expected, "a message's content became a control token");
    if (tokenizer.model() == TokenizerModel::kByteLevelBpe)
      check(tokenizer.decode(ids) == tokenizer.token_text(tokenizer.bos_id()) + rendered + continuation,
            "the encoded prompt does not decode to the rendered text");
  }
  return 0;
}
