// Tiny tokenizer vocabularies for tests and fuzzers, as the GGUF metadata a
// real model carries: a byte-level BPE ("gpt2": every byte a token, merges)
// or a SentencePiece one ("llama": scored pieces, byte fallback).
#pragma once

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gguf/writer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace kascade::test_vocab {

// GGUF token types.
enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kByte = 6 };

// GPT-2's spelling of raw bytes as printable code points, as byte-level BPE tokens store them.
inline std::string spell(std::string_view bytes) {
  std::string text;
  for (const char byte : bytes) tokenizer::append_utf8(text, tokenizer::byte_to_code_point(uint8_t(byte)));
  return text;
}

class Vocabulary {
 public:
  explicit Vocabulary(std::string model) : model_(std::move(model)) {}

  uint32_t size() const { return uint32_t(tokens_.size()); }

  Vocabulary& token(std::string text, int32_t type = kNormal, float score = 0.0f) {
    tokens_.push_back(std::move(text));
    types_.push_back(type);
    scores_.push_back(score);
    return *this;
  }
  Vocabulary& tokens(const std::vector<std::string>& texts, int32_t type) {
    for (const std::string& text : texts) token(text, type);
    return *this;
  }
  // Byte-level BPE: the 256 bytes, spelled.
  Vocabulary& byte_tokens() {
    for (int b = 0; b < 256; ++b) token(spell(std::string(1, char(b))));
    return *this;
  }
  // Byte-level BPE: the merge of two byte strings, and the token it makes.
  Vocabulary& merge(std::string_view left, std::string_view right) {
    merges_.push_back(spell(left) + " " + spell(right));
    return token(spell(std::string(left) + std::string(right)));
  }
  // SentencePiece: the byte-fallback tokens <0x00> ... <0xFF>.
  Vocabulary& byte_fallback() {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      token(name, kByte);
    }
    return *this;
  }
  // SentencePiece: pieces scored -1, -2, ... in this order (earlier ones merge first).
  Vocabulary& pieces(std::initializer_list<const char*> texts, int32_t type = kNormal) {
    for (const char* text : texts) token(text, type, --last_score_);
    return *this;
  }
  // tokenizer.ggml.<name>_token_id, e.g. id("bos", 1).
  Vocabulary& id(const std::string& name, uint32_t value) {
    ids_.emplace_back("tokenizer.ggml." + name + "_token_id", value);
    return *this;
  }
  // tokenizer.ggml.<name>, e.g. flag("add_bos_token", true).
  Vocabulary& flag(const std::string& name, bool value) {
    flags_.emplace_back("tokenizer.ggml." + name, value);
    return *this;
  }

  tokenizer::Tokenizer build(const std::string& name) const { return tokenizer::Tokenizer(file(name)); }

  // The metadata alone, for a model file to carry.
  gguf::File file(const std::string& name) const {
    gguf::Writer image;
    image.add_string("tokenizer.ggml.model", model_);
    if (model_ == "gpt2") image.add_string("tokenizer.ggml.pre", "llama-bpe");
    image.add_strings("tokenizer.ggml.tokens", tokens_);
    image.add_int32s("tokenizer.ggml.token_type", types_);
    if (model_ == "gpt2") image.add_strings("tokenizer.ggml.merges", merges_);
    else image.add_float32s("tokenizer.ggml.scores", scores_);
    for (const auto& [key, value] : ids_) image.add_uint32(key, value);
    for (const auto& [key, value] : flags_) image.add_bool(key, value);
    return image.parse(name);
  }

 private:
  std::string model_;
  std::vector<std::string> tokens_, merges_;
  std::vector<int32_t> types_;
  std::vector<float> scores_;
  std::vector<std::pair<std::string, uint32_t>> ids_;
  std::vector<std::pair<std::string, bool>> flags_;
  float last_score_ = 0.0f;
};

}  // namespace kascade::test_vocab
