// libFuzzer target for the tokenizer: arbitrary bytes, invalid UTF-8
// included, are encoded (with and without parsing special tokens), decoded
// and streamed. Checks: ids are in the vocabulary; decoding gives back the
// input (minus bytes the vocabulary has no token for, which byte-level BPE
// drops); streamed output is valid UTF-8 and equals the decoded text when
// that is valid UTF-8. The input is also tried as a chat template.
//
// Tokenizers: the model at $KASCADE_FUZZ_MODEL when set (e.g. the default
// model), else two built-in ones: a byte-level BPE and a SentencePiece
// vocabulary with merges, specials and byte fallback.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

#include "tiny_vocabulary.h"

namespace {

using namespace kascade;
using namespace kascade::tokenizer;

using test_vocab::spell;

Tokenizer built_in_byte_level() {
  test_vocab::Vocabulary v("gpt2");
  v.byte_tokens();
  for (const auto& [left, right] : {std::pair{"t", "h"}, {"th", "e"}, {"i", "n"}, {" ", "t"}, {" ", "a"}, {"e", "r"},
                                    {"o", "n"}, {" ", "the"}, {"\xC3", "\xA9"}, {"1", "2"}})
    v.merge(left, right);
  const uint32_t first_special = v.size();
  v.tokens({"<|im_start|>", "<|im_end|>", "<|endoftext|>"}, test_vocab::kControl)
      .token("<think>", test_vocab::kUserDefined);
  return v.id("eos", first_special + 1).build("<built-in vocabulary>");
}

Tokenizer built_in_sentencepiece() {
  test_vocab::Vocabulary v("llama");
  v.token("<unk>", test_vocab::kUnknown)
      .tokens({"<s>", "</s>"}, test_vocab::kControl)
      .byte_fallback()
      .pieces({"\u2581", "\u2581t", "h", "e", "he", "\u2581the", "\u2581th", "t", "a", "\u2581a", "n", "an", "\u2581an",
               "é", "日本", "日", "本"})
      .pieces({"<sep>"}, test_vocab::kUserDefined);
  return v.id("unknown", 0).id("bos", 1).id("eos", 2).build("<built-in vocabulary>");
}

struct Subjects {
  std::unique_ptr<gguf::File> file;  // owns the model's mapping when one is fuzzed
  std::vector<Tokenizer> tokenizers;
};

const Subjects& subjects() {
  static const Subjects instance = [] {
    Subjects s;
    if (const char* path = std::getenv("KASCADE_FUZZ_MODEL")) {
      s.file = std::make_unique<gguf::File>(gguf::File::open(path));
      s.tokenizers.emplace_back(*s.file);
    } else {
      s.tokenizers.push_back(built_in_byte_level());
      s.tokenizers.push_back(built_in_sentencepiece());
    }
    return s;
  }();
  return instance;
}

void check(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "fuzz_tokenizer: %s\n", what);
    std::abort();
  }
}

// What decoding the ids of `text` must give.
std::string expected_round_trip(const Tokenizer& tokenizer, std::string_view text) {
  if (tokenizer.model() == TokenizerModel::kSentencePiece) return std::string(text);
  std::string kept;
  for (char byte : text) {
    if (tokenizer.find_token(spell(std::string_view(&byte, 1)))) kept.push_back(byte);
  }
  return kept;
}

void fuzz_tokenizer(const Tokenizer& tokenizer, std::string_view text) {
  for (bool parse_special : {false, true}) {
    const std::vector<TokenId> ids = tokenizer.encode(text, true, parse_special);
    for (TokenId id : ids) check(id >= 0 && static_cast<size_t>(id) < tokenizer.vocab_size(), "id out of range");
    const std::vector<TokenId> text_ids = tokenizer.encode(text, false, parse_special);
    const std::string decoded = tokenizer.decode(text_ids);
    // SentencePiece prefixes a space after each control token, which decoding
    // keeps, an unknown token loses its character, and U+2581 in the text reads
    // as a space: compare where none of that happened.
    const bool lossless =
        tokenizer.model() == TokenizerModel::kByteLevelBpe ||
        (!parse_special && text.find("\u2581") == std::string_view::npos &&
         std::find(text_ids.begin(), text_ids.end(), tokenizer.unknown_id()) == text_ids.end());
    if (lossless) check(decoded == expected_round_trip(tokenizer, text), "decode(encode(text)) != text");

    StreamDecoder stream(tokenizer);
    std::string streamed;
    for (TokenId id : text_ids) streamed += stream.push(id);
    streamed += stream.finish();
    check(is_valid_utf8(streamed), "streamed text is not valid UTF-8");
    if (is_valid_utf8(decoded)) check(streamed == decoded, "streamed text differs from decoded text");
  }
}

void fuzz_chat_template(std::string_view source) {
  try {
    const ChatTemplate chat = ChatTemplate::from_jinja(source);
    const std::vector<ChatMessage> messages{{"user", std::string(source.substr(0, 16))}};
    chat.render(messages, true);
  } catch (const Error&) {
    // Unknown templates are rejected with an Error: that is the expected outcome.
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const Tokenizer& tokenizer : subjects().tokenizers) fuzz_tokenizer(tokenizer, text);
  fuzz_chat_template(text);
  return 0;
}
