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
#include "gguf/writer.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

using namespace kascade;
using namespace kascade::tokenizer;

std::string spell(std::string_view bytes) {
  std::string text;
  for (char byte : bytes) append_utf8(text, byte_to_code_point(static_cast<uint8_t>(byte)));
  return text;
}

Tokenizer built_in_byte_level() {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(spell(std::string(1, static_cast<char>(b))));
    types.push_back(1);
  }
  std::vector<std::string> merges;
  for (const char* pair : {"t h", "th e", "i n", "  t", "  a", "e r", "o n", "  the", "\xC3 \xA9", "1 2"}) {
    const std::string text(pair);
    const size_t space = text.find(' ', 1);
    const std::string left = text.substr(0, space), right = text.substr(space + 1);
    merges.push_back(spell(left) + " " + spell(right));
    tokens.push_back(spell(left + right));
    types.push_back(1);
  }
  for (const char* special : {"<|im_start|>", "<|im_end|>", "<|endoftext|>"}) {
    tokens.push_back(special);
    types.push_back(3);
  }
  tokens.push_back("<think>");
  types.push_back(4);
  gguf::Writer image;
  image.add_string("tokenizer.ggml.model", "gpt2");
  image.add_string("tokenizer.ggml.pre", "llama-bpe");
  image.add_strings("tokenizer.ggml.tokens", tokens);
  image.add_int32s("tokenizer.ggml.token_type", types);
  image.add_strings("tokenizer.ggml.merges", merges);
  image.add_uint32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(tokens.size() - 3));
  return Tokenizer(image.parse("<built-in vocabulary>"));
}

Tokenizer built_in_sentencepiece() {
  std::vector<std::string> tokens{"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types{2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    tokens.push_back(name);
    types.push_back(6);
  }
  std::vector<float> scores(tokens.size(), 0.0f);
  float score = -1;
  for (const char* piece : {"\u2581", "\u2581t", "h", "e", "he", "\u2581the", "\u2581th", "t", "a", "\u2581a", "n",
                            "an", "\u2581an", "é", "日本", "日", "本", "<sep>"}) {
    tokens.push_back(piece);
    types.push_back(std::string(piece) == "<sep>" ? 4 : 1);
    scores.push_back(score--);
  }
  gguf::Writer image;
  image.add_string("tokenizer.ggml.model", "llama");
  image.add_strings("tokenizer.ggml.tokens", tokens);
  image.add_int32s("tokenizer.ggml.token_type", types);
  image.add_float32s("tokenizer.ggml.scores", scores);
  image.add_uint32("tokenizer.ggml.unknown_token_id", 0);
  image.add_uint32("tokenizer.ggml.bos_token_id", 1);
  image.add_uint32("tokenizer.ggml.eos_token_id", 2);
  return Tokenizer(image.parse("<built-in vocabulary>"));
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
