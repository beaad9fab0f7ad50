// The tokenizer a GGUF file describes in its tokenizer.* metadata.
//
// Two models:
//  - "gpt2": byte-level BPE. Text is cut by the pre-tokenizer that
//    tokenizer.ggml.pre names, each piece is spelled in GPT-2's byte alphabet
//    and merged by merge rank (tokenizer.ggml.merges), as Hugging Face
//    tokenizers do. Any byte string round-trips, invalid UTF-8 included,
//    except bytes that have no token in the vocabulary: those are dropped,
//    as Hugging Face and llama.cpp drop them.
//  - "llama": SentencePiece BPE. Spaces become U+2581, a U+2581 is prepended
//    (add_space_prefix), and adjacent symbols merge best score first
//    (tokenizer.ggml.scores) while the merged text is in the vocabulary;
//    symbols left outside it fall back to <0xXX> byte tokens.
// Special tokens: user-defined tokens are always matched whole in the text;
// control tokens only when the caller asks to parse specials (chat markup
// from a template), otherwise their text is tokenized like any other.
//
// A Tokenizer is immutable after construction; encode/decode are thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/pre_tokenizer.h"

namespace kascade::tokenizer {

using TokenId = int32_t;
constexpr TokenId kNoToken = -1;

// tokenizer.ggml.token_type values (SentencePiece's piece types).
enum class TokenType : int32_t {
  kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6,
};

enum class TokenizerModel { kByteLevelBpe, kSentencePiece };

// One stretch of a text to encode (Tokenizer::encode_segments): control
// tokens written in it are matched only when parse_special is set.
struct TextSegment {
  std::string_view text;
  bool parse_special = false;
};

class Tokenizer {
 public:
  // Reads the tokenizer.* metadata; throws Error naming the key on missing or
  // inconsistent data (unknown model or pre-tokenizer, ids out of range, a
  // merge whose parts are not in the vocabulary, ...).
  explicit Tokenizer(const gguf::File& file);
  // Lookup tables point into the vocabulary's strings: movable, not copyable.
  Tokenizer(Tokenizer&&) = default;
  Tokenizer& operator=(Tokenizer&&) = default;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // add_special_tokens: prepend BOS / append EOS as add_bos_token/add_eos_token say.
  // parse_special: match control tokens written in the text (e.g. "<|im_start|>").
  std::vector<TokenId> encode(std::string_view text, bool add_special_tokens = true,
                              bool parse_special = false) const;
  // Encodes the concatenation of the segments, matching control tokens only
  // in the segments that allow it: a chat prompt's markup from the template,
  // never a message's content (tokenizer::ChatTemplate::encode). Text on both
  // sides of a segment boundary is tokenized as one text, so the ids are
  // those of encode(concatenation, add_special_tokens, true) unless a segment
  // without parse_special holds a control token's text, which stays text.
  std::vector<TokenId> encode_segments(std::span<const TextSegment> segments, bool add_special_tokens = true) const;
  // The bytes the ids stand for, concatenated; this may end inside a UTF-8
  // character (use StreamDecoder for output shown as it is generated).
  std::string decode(std::span<const TokenId> ids, bool skip_special = false) const;

  // The bytes one token stands for (byte tokens: their byte; SentencePiece: U+2581 as space).
  const std::string& token_to_piece(TokenId id) const { return pieces_.at(checked(id)); }
  // The token's string as the vocabulary stores it.
  const std::string& token_text(TokenId id) const { return tokens_.at(checked(id)); }
  TokenType token_type(TokenId id) const { return types_.at(checked(id)); }
  bool is_special(TokenId id) const;  // control, unknown or unused: skipped by decode(skip_special)
  std::optional<TokenId> find_token(std::string_view text) const;

  size_t vocab_size() const { return tokens_.size(); }
  // The most bytes of text one token stands for (the longest piece): a text
  // longer than n times this needs more than n tokens.
  size_t longest_piece() const;
  TokenizerModel model() const { return model_; }
  TokenId bos_id() const { return bos_id_; }
  TokenId eos_id() const { return eos_id_; }
  TokenId eot_id() const { return eot_id_; }
  TokenId eom_id() const { return eom_id_; }
  TokenId unknown_id() const { return unknown_id_; }
  TokenId padding_id() const { return padding_id_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  // End of sequence, end of turn or end of message: generation stops here.
  bool is_end_of_generation(TokenId id) const;
  // tokenizer.chat_template, empty when the file has none.
  const std::string& chat_template() const { return chat_template_; }

 private:
  struct Merge {
    uint32_t rank;
    TokenId result;
  };
  // One stretch of the input: plain text, or a special token matched in it.
  struct Fragment {
    std::string_view text;
    TokenId special = kNoToken;
  };

  size_t checked(TokenId id) const;
  void load_byte_level(const gguf::File& file);
  void load_sentencepiece(const gguf::File& file);
  void find_special_tokens();
  std::vector<Fragment> split_on_special_tokens(std::string_view text, bool parse_special) const;
  std::vector<TokenId> encode_fragments(std::span<const Fragment> fragments, size_t size_hint,
                                        bool add_special_tokens) const;
  void encode_byte_level(std::string_view text, std::vector<TokenId>& out) const;
  void merge_byte_level_piece(std::string_view piece, std::vector<TokenId>& out) const;
  void encode_sentencepiece(std::string_view text, bool prefix_space, std::vector<TokenId>& out) const;
  TokenId lookup_merge_result(TokenId left, TokenId right, uint32_t* rank) const;

  TokenizerModel model_;
  PreTokenizer pre_tokenizer_ = PreTokenizer::kGpt2;
  bool ignore_merges_ = false;  // Llama 3: a piece that is itself a token is not merged
  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  std::vector<std::string> pieces_;                     // decoded bytes per token
  std::unordered_map<std::string_view, TokenId> ids_;  // token text -> id (first wins)

  // Byte-level BPE.
  TokenId byte_tokens_[256];                            // byte -> single-character token, or kNoToken
  std::unordered_map<uint64_t, Merge> merges_;          // (left << 32 | right) -> merge

  // SentencePiece: texts that merging may produce (normal and user-defined tokens).
  std::unordered_map<std::string_view, TokenId> mergeable_;
  std::vector<float> scores_;
  TokenId byte_fallback_[256];                          // byte -> <0xXX> token, or kNoToken

  // Specials matched in the text, grouped by first byte, longest first.
  std::vector<TokenId> specials_by_first_byte_[256];

  TokenId bos_id_ = kNoToken, eos_id_ = kNoToken, eot_id_ = kNoToken, eom_id_ = kNoToken;
  TokenId unknown_id_ = kNoToken, padding_id_ = kNoToken;
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false;
  std::string chat_template_;
};

// Turns a stream of generated ids into text that is always complete UTF-8:
// bytes of a character split across tokens are held back until it is
// complete; bytes that cannot form a character become U+FFFD.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}
  // Text that became complete with this token (possibly empty).
  std::string push(TokenId id);
  // The rest at the end of the stream (an unfinished character becomes U+FFFD).
  std::string finish();

 private:
  std::string take_complete(bool at_end);

  const Tokenizer& tokenizer_;
  bool skip_special_;
  bool at_start_ = true;
  std::string pending_;
};

}  // namespace kascade::tokenizer
