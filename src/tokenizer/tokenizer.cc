// Byte-level and SentencePiece BPE from GGUF metadata (see tokenizer.h).
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <queue>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace kascade::tokenizer {
namespace {

constexpr std::string_view kSentencePieceSpace = "\u2581";
constexpr std::string_view kReplacementCharacter = "\uFFFD";

uint64_t pair_key(TokenId left, TokenId right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// The bytes a byte-level token spells: each character of GPT-2's byte alphabet
// is one byte; a character outside it (a mislabelled token) stands for itself.
std::string byte_level_to_bytes(std::string_view text) {
  std::string bytes;
  for (size_t offset = 0; offset < text.size();) {
    const DecodedChar ch = decode_utf8(text, offset);
    const int byte = ch.code_point < kInvalidByteBase ? code_point_to_byte(ch.code_point) : -1;
    if (byte >= 0) {
      bytes.push_back(static_cast<char>(byte));
    } else {
      bytes.append(text.substr(offset, ch.length));
    }
    offset += ch.length;
  }
  return bytes;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string text;
  for (char byte : bytes) append_utf8(text, byte_to_code_point(static_cast<uint8_t>(byte)));
  return text;
}

std::string unescape_sentencepiece(std::string_view text) {
  std::string out;
  for (size_t offset = 0; offset < text.size();) {
    if (text.substr(offset, kSentencePieceSpace.size()) == kSentencePieceSpace) {
      out.push_back(' ');
      offset += kSentencePieceSpace.size();
    } else {
      out.push_back(text[offset++]);
    }
  }
  return out;
}

// "<0xAB>" -> 0xAB, or -1.
int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return -1;
    }
    value = value * 16 + digit;
  }
  return value;
}

TokenId read_token_id(const gguf::File& file, const std::string& key, size_t vocab_size) {
  if (!file.has(key)) return kNoToken;
  const int64_t id = file.get_int(key);
  if (id < 0 || static_cast<uint64_t>(id) >= vocab_size) {
    fail("{}: {}: token id {} is outside the vocabulary (size {})", file.path(), key, id, vocab_size);
  }
  return static_cast<TokenId>(id);
}

// Whether `bytes` (non-empty) could still become one well-formed UTF-8
// character if more bytes followed.
bool is_incomplete_utf8(std::string_view bytes) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(bytes[i]); };
  const uint8_t lead = byte(0);
  size_t length;
  uint8_t second_min = 0x80, second_max = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) second_min = 0xA0;  // no overlongs
    if (lead == 0xED) second_max = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) second_min = 0x90;
    if (lead == 0xF4) second_max = 0x8F;  // at most U+10FFFF
  } else {
    return false;
  }
  if (bytes.size() >= length) return false;
  for (size_t i = 1; i < bytes.size(); ++i) {
    const uint8_t lo = i == 1 ? second_min : 0x80, hi = i == 1 ? second_max : 0xBF;
    if (byte(i) < lo || byte(i) > hi) return false;
  }
  return true;
}

}  // namespace

Tokenizer::Tokenizer(const gguf::File& file) {
  const std::string model_name = file.get_string("tokenizer.ggml.model");
  if (model_name == "gpt2") {
    model_ = TokenizerModel::kByteLevelBpe;
  } else if (model_name == "llama") {
    model_ = TokenizerModel::kSentencePiece;
  } else {
    fail("{}: tokenizer.ggml.model: unsupported tokenizer model '{}' (supported: gpt2, llama)", file.path(),
         gguf::printable(model_name));
  }

  tokens_ = file.get_string_array("tokenizer.ggml.tokens");
  if (tokens_.empty()) fail("{}: tokenizer.ggml.tokens: empty vocabulary", file.path());
  if (tokens_.size() > static_cast<size_t>(INT32_MAX)) {
    fail("{}: tokenizer.ggml.tokens: {} tokens is too many", file.path(), tokens_.size());
  }
  types_.assign(tokens_.size(), TokenType::kNormal);
  if (file.has("tokenizer.ggml.token_type")) {
    const std::vector<int64_t> types = file.get_int_array("tokenizer.ggml.token_type");
    if (types.size() != tokens_.size()) {
      fail("{}: tokenizer.ggml.token_type: {} entries for {} tokens", file.path(), types.size(), tokens_.size());
    }
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] < 0 || types[i] > static_cast<int64_t>(TokenType::kByte)) {
        fail("{}: tokenizer.ggml.token_type[{}]: unknown token type {}", file.path(), i, types[i]);
      }
      types_[i] = static_cast<TokenType>(types[i]);
    }
  }
  ids_.reserve(tokens_.size());
  for (size_t i = 0; i < tokens_.size(); ++i) ids_.emplace(tokens_[i], static_cast<TokenId>(i));

  const size_t n = tokens_.size();
  bos_id_ = read_token_id(file, "tokenizer.ggml.bos_token_id", n);
  eos_id_ = read_token_id(file, "tokenizer.ggml.eos_token_id", n);
  eot_id_ = read_token_id(file, "tokenizer.ggml.eot_token_id", n);
  eom_id_ = read_token_id(file, "tokenizer.ggml.eom_token_id", n);
  unknown_id_ = read_token_id(file, "tokenizer.ggml.unknown_token_id", n);
  padding_id_ = read_token_id(file, "tokenizer.ggml.padding_token_id", n);
  // Older files name no end-of-turn token; llama.cpp then recognises the
  // chat formats' markers, and so do we (control tokens only).
  const auto find_control = [&](std::initializer_list<const char*> texts) {
    for (const char* text : texts) {
      std::optional<TokenId> id = find_token(text);
      if (id && types_[*id] == TokenType::kControl) return *id;
    }
    return kNoToken;
  };
  if (eot_id_ == kNoToken) eot_id_ = find_control({"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>"});
  if (eom_id_ == kNoToken) eom_id_ = find_control({"<|eom_id|>"});

  const bool sentencepiece = model_ == TokenizerModel::kSentencePiece;
  // Defaults when the keys are absent follow llama.cpp: SentencePiece vocabularies add BOS and a space prefix.
  add_bos_ = file.get_bool("tokenizer.ggml.add_bos_token", sentencepiece && bos_id_ != kNoToken);
  add_eos_ = file.get_bool("tokenizer.ggml.add_eos_token", false);
  add_space_prefix_ = file.get_bool("tokenizer.ggml.add_space_prefix", sentencepiece);
  if (add_bos_ && bos_id_ == kNoToken) {
    fail("{}: tokenizer.ggml.add_bos_token is set but there is no bos_token_id", file.path());
  }
  if (add_eos_ && eos_id_ == kNoToken) {
    fail("{}: tokenizer.ggml.add_eos_token is set but there is no eos_token_id", file.path());
  }
  chat_template_ = file.get_string("tokenizer.chat_template", "");

  if (sentencepiece) {
    load_sentencepiece(file);
  } else {
    load_byte_level(file);
  }
  find_special_tokens();
}

void Tokenizer::load_byte_level(const gguf::File& file) {
  const std::string pre_name = file.get_string("tokenizer.ggml.pre", "default");
  try {
    pre_tokenizer_ = pre_tokenizer_from_name(pre_name);
  } catch (const Error& error) {
    fail("{}: {}", file.path(), error.what());
  }
  // Llama 3's tokenizer.json sets ignore_merges: a piece that is a token is kept whole.
  ignore_merges_ = pre_tokenizer_ == PreTokenizer::kLlama3;

  pieces_.resize(tokens_.size());
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const bool raw = types_[i] == TokenType::kControl || types_[i] == TokenType::kUserDefined ||
                     types_[i] == TokenType::kUnknown || types_[i] == TokenType::kUnused;
    pieces_[i] = raw ? tokens_[i] : byte_level_to_bytes(tokens_[i]);
  }
  // Some vocabularies lack bytes their training text never had (SmolLM2: 0x04,
  // 0x1D, ...). Like Hugging Face's BPE without an unknown token, and llama.cpp,
  // encoding drops such bytes.
  for (int byte = 0; byte < 256; ++byte) {
    const std::optional<TokenId> id = find_token(bytes_to_byte_level(std::string(1, static_cast<char>(byte))));
    byte_tokens_[byte] = id ? *id : kNoToken;
  }

  const std::vector<std::string> merges = file.get_string_array("tokenizer.ggml.merges");
  merges_.reserve(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string_view merge = merges[rank];
    // Search from 1: a vocabulary may hold a token that is a literal space.
    const size_t space = merge.find(' ', 1);
    if (space == std::string_view::npos) {
      fail("{}: tokenizer.ggml.merges[{}]: '{}' is not two tokens separated by a space", file.path(), rank,
           gguf::printable(merge));
    }
    const std::string_view left = merge.substr(0, space), right = merge.substr(space + 1);
    joined.assign(left).append(right);
    const std::optional<TokenId> left_id = find_token(left), right_id = find_token(right),
                                 result_id = find_token(joined);
    if (!left_id || !right_id || !result_id) {
      fail("{}: tokenizer.ggml.merges[{}]: '{}': its {} is not in the vocabulary", file.path(), rank,
           gguf::printable(merge),
           !left_id ? "left part" : !right_id ? "right part" : "merged token");
    }
    merges_.emplace(pair_key(*left_id, *right_id), Merge{static_cast<uint32_t>(rank), *result_id});
  }
}

void Tokenizer::load_sentencepiece(const gguf::File& file) {
  const std::vector<double> scores = file.get_float_array("tokenizer.ggml.scores");
  if (scores.size() != tokens_.size()) {
    fail("{}: tokenizer.ggml.scores: {} entries for {} tokens", file.path(), scores.size(), tokens_.size());
  }
  scores_.assign(scores.begin(), scores.end());
  std::fill(std::begin(byte_fallback_), std::end(byte_fallback_), kNoToken);
  pieces_.resize(tokens_.size());
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const TokenId id = static_cast<TokenId>(i);
    switch (types_[i]) {
      case TokenType::kByte: {
        const int byte = parse_byte_token(tokens_[i]);
        if (byte < 0) {
          fail("{}: tokenizer.ggml.tokens[{}]: byte token '{}' is not <0xXX>", file.path(), i,
               gguf::printable(tokens_[i]));
        }
        if (byte_fallback_[byte] == kNoToken) byte_fallback_[byte] = id;
        pieces_[i] = std::string(1, static_cast<char>(byte));
        break;
      }
      case TokenType::kNormal:
      case TokenType::kUndefined:
        mergeable_.emplace(tokens_[i], id);
        pieces_[i] = unescape_sentencepiece(tokens_[i]);
        break;
      default:
        pieces_[i] = tokens_[i];
        break;
    }
  }
  const bool all_bytes = std::none_of(std::begin(byte_fallback_), std::end(byte_fallback_),
                                      [](TokenId id) { return id == kNoToken; });
  if (!all_bytes && unknown_id_ == kNoToken) {
    fail("{}: tokenizer.ggml.tokens: SentencePiece vocabulary has neither all 256 byte tokens nor an unknown token",
         file.path());
  }
}

void Tokenizer::find_special_tokens() {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const TokenType type = types_[i];
    const bool special = type == TokenType::kControl || type == TokenType::kUnknown || type == TokenType::kUserDefined;
    if (!special || tokens_[i].empty()) continue;
    specials_by_first_byte_[static_cast<uint8_t>(tokens_[i][0])].push_back(static_cast<TokenId>(i));
  }
  for (std::vector<TokenId>& bucket : specials_by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(),
                     [&](TokenId a, TokenId b) { return tokens_[a].size() > tokens_[b].size(); });
  }
}

size_t Tokenizer::checked(TokenId id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size()) {
    fail("token id {} is outside the vocabulary (size {})", id, tokens_.size());
  }
  return static_cast<size_t>(id);
}

size_t Tokenizer::longest_piece() const {
  size_t longest = 0;
  for (const std::string& piece : pieces_) longest = std::max(longest, piece.size());
  return longest;
}

bool Tokenizer::is_special(TokenId id) const {
  const TokenType type = types_.at(checked(id));
  return type == TokenType::kControl || type == TokenType::kUnknown || type == TokenType::kUnused;
}

std::optional<TokenId> Tokenizer::find_token(std::string_view text) const {
  auto it = ids_.find(text);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::is_end_of_generation(TokenId id) const {
  return id != kNoToken && (id == eos_id_ || id == eot_id_ || id == eom_id_);
}

// Leftmost-longest matching of special tokens, as Hugging Face's added-token
// matcher does; user-defined tokens always, control tokens when asked.
std::vector<Tokenizer::Fragment> Tokenizer::split_on_special_tokens(std::string_view text,
                                                                     bool parse_special) const {
  std::vector<Fragment> fragments;
  size_t text_start = 0;
  for (size_t offset = 0; offset < text.size();) {
    TokenId match = kNoToken;
    for (TokenId id : specials_by_first_byte_[static_cast<uint8_t>(text[offset])]) {
      if (!parse_special && types_[id] != TokenType::kUserDefined) continue;
      const std::string& special = tokens_[id];
      if (text.compare(offset, special.size(), special) == 0) {
        match = id;
        break;
      }
    }
    if (match == kNoToken) {
      ++offset;
      continue;
    }
    if (offset > text_start) fragments.push_back({text.substr(text_start, offset - text_start)});
    fragments.push_back({text.substr(offset, tokens_[match].size()), match});
    offset += tokens_[match].size();
    text_start = offset;
  }
  if (text_start < text.size()) fragments.push_back({text.substr(text_start)});
  return fragments;
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_special_tokens, bool parse_special) const {
  return encode_fragments(split_on_special_tokens(text, parse_special), text.size(), add_special_tokens);
}

std::vector<TokenId> Tokenizer::encode_segments(std::span<const TextSegment> segments, bool add_special_tokens) const {
  // Each segment split on the specials it may contain; then runs of text
  // fragments joined across segment boundaries (held in `joined`, whose
  // elements never move), so the text is cut exactly as one string would be.
  std::vector<Fragment> split;
  size_t size = 0;
  for (const TextSegment& segment : segments) {
    const std::vector<Fragment> parts = split_on_special_tokens(segment.text, segment.parse_special);
    split.insert(split.end(), parts.begin(), parts.end());
    size += segment.text.size();
  }
  std::deque<std::string> joined;
  std::vector<Fragment> fragments;
  for (size_t i = 0; i < split.size();) {
    if (split[i].special != kNoToken || i + 1 == split.size() || split[i + 1].special != kNoToken) {
      fragments.push_back(split[i++]);
      continue;
    }
    std::string& text = joined.emplace_back();
    for (; i < split.size() && split[i].special == kNoToken; ++i) text += split[i].text;
    fragments.push_back({text});
  }
  return encode_fragments(fragments, size, add_special_tokens);
}

std::vector<TokenId> Tokenizer::encode_fragments(std::span<const Fragment> fragments, size_t size_hint,
                                                 bool add_special_tokens) const {
  std::vector<TokenId> ids;
  ids.reserve(size_hint / 3 + 2);
  if (add_special_tokens && add_bos_) ids.push_back(bos_id_);
  // SentencePiece prefixes a space to a text: at the start, and after each
  // control token (chat markup separates texts). User-defined tokens are
  // matched inside a text, so one at its start comes after the prefix.
  bool prefix_space = model_ == TokenizerModel::kSentencePiece && add_space_prefix_;
  for (const Fragment& fragment : fragments) {
    if (fragment.special == kNoToken) {
      if (model_ == TokenizerModel::kSentencePiece) {
        encode_sentencepiece(fragment.text, prefix_space, ids);
      } else {
        encode_byte_level(fragment.text, ids);
      }
      prefix_space = false;
      continue;
    }
    if (types_[fragment.special] == TokenType::kUserDefined) {
      if (prefix_space) encode_sentencepiece("", true, ids);
      prefix_space = false;
    } else {
      prefix_space = model_ == TokenizerModel::kSentencePiece && add_space_prefix_;
    }
    ids.push_back(fragment.special);
  }
  if (add_special_tokens && add_eos_) ids.push_back(eos_id_);
  return ids;
}

void Tokenizer::encode_byte_level(std::string_view text, std::vector<TokenId>& out) const {
  std::vector<std::string_view> pieces;
  pre_tokenize(pre_tokenizer_, text, pieces);
  for (std::string_view piece : pieces) {
    if (ignore_merges_) {
      const std::optional<TokenId> whole = find_token(bytes_to_byte_level(piece));
      if (whole) {
        out.push_back(*whole);
        continue;
      }
    }
    merge_byte_level_piece(piece, out);
  }
}

TokenId Tokenizer::lookup_merge_result(TokenId left, TokenId right, uint32_t* rank) const {
  auto it = merges_.find(pair_key(left, right));
  if (it == merges_.end()) return kNoToken;
  *rank = it->second.rank;
  return it->second.result;
}

// BPE over one piece: starting from one symbol per byte, repeatedly apply the
// lowest-ranked merge of two adjacent symbols, leftmost first on ties. A heap
// of candidate merges keeps long pieces at O(n log n); stale candidates are
// recognised by their symbols having changed.
void Tokenizer::merge_byte_level_piece(std::string_view piece, std::vector<TokenId>& out) const {
  struct Symbol {
    TokenId id;  // kNoToken once merged into its left neighbour
    int prev;
    int next;
  };
  struct Candidate {
    uint32_t rank;
    int left;
    TokenId left_id;
    TokenId right_id;
    TokenId result;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : left > other.left;
    }
  };
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  for (char byte : piece) {
    const TokenId id = byte_tokens_[static_cast<uint8_t>(byte)];
    if (id == kNoToken) continue;  // a byte the vocabulary cannot spell
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({id, index - 1, -1});
    if (index > 0) symbols[index - 1].next = index;
  }
  const int count = static_cast<int>(symbols.size());
  if (count <= 1) {
    if (count == 1) out.push_back(symbols[0].id);
    return;
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto consider = [&](int left) {
    const int right = symbols[left].next;
    if (right < 0) return;
    uint32_t rank;
    const TokenId result = lookup_merge_result(symbols[left].id, symbols[right].id, &rank);
    if (result != kNoToken) queue.push({rank, left, symbols[left].id, symbols[right].id, result});
  };
  for (int i = 0; i + 1 < count; ++i) consider(i);
  while (!queue.empty()) {
    const Candidate candidate = queue.top();
    queue.pop();
    Symbol& left = symbols[candidate.left];
    if (left.id != candidate.left_id || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    if (right.id != candidate.right_id) continue;
    left.id = candidate.result;
    right.id = kNoToken;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = candidate.left;
    if (left.prev >= 0) consider(left.prev);
    consider(candidate.left);
  }
  for (int i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

// SentencePiece BPE (the algorithm of sentencepiece's bpe_model.cc): symbols
// start as UTF-8 characters; the adjacent pair whose concatenation is the
// best-scoring vocabulary entry merges first, leftmost on ties.
void Tokenizer::encode_sentencepiece(std::string_view text, bool prefix_space, std::vector<TokenId>& out) const {
  if (text.empty() && !prefix_space) return;
  std::string normalized;
  normalized.reserve(text.size() + kSentencePieceSpace.size() * 4);
  if (prefix_space) normalized += kSentencePieceSpace;
  for (char c : text) {
    if (c == ' ') {
      normalized += kSentencePieceSpace;
    } else {
      normalized.push_back(c);
    }
  }

  struct Symbol {
    uint32_t offset;
    uint32_t length;  // 0 once merged into its left neighbour
    int prev;
    int next;
  };
  struct Candidate {
    float score;
    int left;
    uint32_t length;  // of the merged text, to recognise stale candidates
    bool operator<(const Candidate& other) const {
      return score != other.score ? score < other.score : left > other.left;
    }
  };
  std::vector<Symbol> symbols;
  for (size_t offset = 0; offset < normalized.size();) {
    const uint32_t length = decode_utf8(normalized, offset).length;
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({static_cast<uint32_t>(offset), length, index - 1, -1});
    if (index > 0) symbols[index - 1].next = index;
    offset += length;
  }
  const auto text_of = [&](const Symbol& symbol, uint32_t length) {
    return std::string_view(normalized).substr(symbol.offset, length);
  };
  std::priority_queue<Candidate> queue;
  const auto consider = [&](int left) {
    const int right = symbols[left].next;
    if (right < 0) return;
    const uint32_t length = symbols[left].length + symbols[right].length;
    auto it = mergeable_.find(text_of(symbols[left], length));
    if (it != mergeable_.end()) queue.push({scores_[it->second], left, length});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) consider(i);
  while (!queue.empty()) {
    const Candidate candidate = queue.top();
    queue.pop();
    Symbol& left = symbols[candidate.left];
    if (left.length == 0 || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    if (left.length + right.length != candidate.length) continue;
    left.length = candidate.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = candidate.left;
    if (left.prev >= 0) consider(left.prev);
    consider(candidate.left);
  }
  for (int i = 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece = text_of(symbols[i], symbols[i].length);
    auto it = mergeable_.find(piece);
    if (it != mergeable_.end()) {
      out.push_back(it->second);
      continue;
    }
    const bool has_byte_tokens = std::all_of(piece.begin(), piece.end(), [&](char byte) {
      return byte_fallback_[static_cast<uint8_t>(byte)] != kNoToken;
    });
    if (has_byte_tokens) {
      for (char byte : piece) out.push_back(byte_fallback_[static_cast<uint8_t>(byte)]);
    } else {
      out.push_back(unknown_id_);  // the constructor made sure there is one
    }
  }
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special) const {
  std::string text;
  bool strip_space = model_ == TokenizerModel::kSentencePiece && add_space_prefix_;
  for (TokenId id : ids) {
    const bool special = is_special(id);
    if (skip_special && special) continue;
    const std::string& piece = pieces_[id];
    if (strip_space && !special) {
      strip_space = false;
      if (!piece.empty() && piece[0] == ' ') {
        text.append(piece, 1);
        continue;
      }
    }
    text += piece;
  }
  return text;
}

std::string StreamDecoder::push(TokenId id) {
  const bool special = tokenizer_.is_special(id);
  if (skip_special_ && special) return {};
  std::string_view piece = tokenizer_.token_to_piece(id);
  // Same rule as Tokenizer::decode: the space SentencePiece prefixed is not output.
  if (at_start_ && !special) {
    at_start_ = false;
    if (tokenizer_.model() == TokenizerModel::kSentencePiece && tokenizer_.add_space_prefix() &&
        !piece.empty() && piece[0] == ' ') {
      piece.remove_prefix(1);
    }
  }
  pending_ += piece;
  return take_complete(false);
}

std::string StreamDecoder::finish() { return take_complete(true); }

std::string StreamDecoder::take_complete(bool at_end) {
  std::string complete;
  size_t offset = 0;
  while (offset < pending_.size()) {
    const DecodedChar ch = decode_utf8(pending_, offset);
    if (ch.code_point < kInvalidByteBase) {
      complete.append(pending_, offset, ch.length);
      offset += ch.length;
      continue;
    }
    if (!at_end && is_incomplete_utf8(std::string_view(pending_).substr(offset))) break;
    complete += kReplacementCharacter;
    ++offset;
  }
  pending_.erase(0, offset);
  return complete;
}

}  // namespace kascade::tokenizer
