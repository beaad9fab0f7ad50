// Hand-written matchers for the pre-tokenizer regexes (see pre_tokenizer.h).
// Each matcher returns the length, in characters, of the regex match that
// starts at a position, trying the alternatives in regex order, as a
// backtracking engine would; the text is cut at those matches.
#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/unicode.h"

namespace kascade::tokenizer {
namespace {

struct Char {
  uint32_t code_point;
  uint32_t offset;  // byte offset into the text
  CodePointClass cls;
};

// A view of the characters of one segment; positions past the end read as kEnd.
class Segment {
 public:
  Segment(const Char* chars, size_t size) : chars_(chars), size_(size) {}
  size_t size() const { return size_; }
  uint32_t code_point(size_t i) const { return i < size_ ? chars_[i].code_point : kEnd; }
  bool is(size_t i, CodePointClass cls) const { return i < size_ && chars_[i].cls == cls; }
  bool is_newline(size_t i) const { return code_point(i) == '\r' || code_point(i) == '\n'; }
  // Number of consecutive characters of class `cls` from i.
  size_t run(size_t i, CodePointClass cls) const {
    size_t j = i;
    while (is(j, cls)) ++j;
    return j - i;
  }

 private:
  static constexpr uint32_t kEnd = UINT32_MAX;
  const Char* chars_;
  size_t size_;
};

constexpr CodePointClass kLetter = CodePointClass::kLetter;
constexpr CodePointClass kNumber = CodePointClass::kNumber;
constexpr CodePointClass kSpace = CodePointClass::kWhitespace;
constexpr CodePointClass kOther = CodePointClass::kOther;

uint32_t ascii_lower(uint32_t cp) { return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp; }

// 's|'t|'re|'ve|'m|'ll|'d at i: its length, or 0. Case-insensitive matching
// folds as Unicode case folding does for these letters: ASCII, plus U+017F
// (long s), which folds to 's'.
size_t match_contraction(const Segment& s, size_t i, bool ignore_case) {
  if (s.code_point(i) != '\'') return 0;
  const auto letter = [&](size_t j) -> uint32_t {
    uint32_t cp = s.code_point(j);
    if (!ignore_case) return cp;
    return cp == 0x17F ? 's' : ascii_lower(cp);
  };
  const uint32_t a = letter(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  const uint32_t b = letter(i + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// \s+(?!\S)|\s+ at a whitespace character i: a run that is followed by a
// non-space gives its last character to the next piece, unless it has only one.
size_t match_whitespace_run(const Segment& s, size_t i) {
  const size_t run = s.run(i, kSpace);
  if (i + run == s.size()) return run;
  return run > 1 ? run - 1 : 1;
}

size_t match_gpt2(const Segment& s, size_t i) {
  if (size_t n = match_contraction(s, i, false)) return n;
  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': an optional space, then a run of one class.
  const size_t start = (s.code_point(i) == ' ' && !s.is(i + 1, kSpace) && i + 1 < s.size()) ? i + 1 : i;
  for (CodePointClass cls : {kLetter, kNumber, kOther}) {
    if (s.is(start, cls)) return start - i + s.run(start, cls);
  }
  return match_whitespace_run(s, i);
}

size_t match_llama3(const Segment& s, size_t i, size_t max_digits) {
  if (size_t n = match_contraction(s, i, true)) return n;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (s.is(i, kLetter)) return s.run(i, kLetter);
  if (!s.is_newline(i) && !s.is(i, kNumber) && s.is(i + 1, kLetter)) return 1 + s.run(i + 1, kLetter);
  // \p{N}{1,3} (Llama 3) or \p{N} (Qwen2)
  if (s.is(i, kNumber)) return std::min(s.run(i, kNumber), max_digits);
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  const size_t start = (s.code_point(i) == ' ' && s.is(i + 1, kOther)) ? i + 1 : i;
  if (s.is(start, kOther)) {
    size_t end = start + s.run(start, kOther);
    while (s.is_newline(end)) ++end;
    return end - i;
  }
  // \s*[\r\n]+: backtracking ends the match just after the run's last newline.
  const size_t run = s.run(i, kSpace);
  for (size_t j = i + run; j > i; --j) {
    if (s.is_newline(j - 1)) return j - i;
  }
  return match_whitespace_run(s, i);
}

size_t match(PreTokenizer kind, const Segment& s, size_t i) {
  switch (kind) {
    case PreTokenizer::kGpt2:
    case PreTokenizer::kSmolLM:
      return match_gpt2(s, i);
    case PreTokenizer::kLlama3:
      return match_llama3(s, i, 3);
    case PreTokenizer::kQwen2:
      return match_llama3(s, i, 1);
  }
  return 1;
}

// Cuts one segment into pieces; `end_offset` is the byte offset just past it.
void split_segment(PreTokenizer kind, std::string_view text, const Char* chars, size_t count,
                   size_t end_offset, std::vector<std::string_view>& pieces) {
  const Segment segment(chars, count);
  for (size_t i = 0; i < count;) {
    const size_t length = match(kind, segment, i);
    const size_t begin = chars[i].offset;
    const size_t end = i + length < count ? chars[i + length].offset : end_offset;
    pieces.push_back(text.substr(begin, end - begin));
    i += length;
  }
}

}  // namespace

PreTokenizer pre_tokenizer_from_name(const std::string& name) {
  // Names as llama.cpp's converter writes them into tokenizer.ggml.pre.
  static const std::pair<const char*, PreTokenizer> kNames[] = {
      {"default", PreTokenizer::kGpt2},     {"gpt2", PreTokenizer::kGpt2},
      {"gpt-2", PreTokenizer::kGpt2},       {"smollm", PreTokenizer::kSmolLM},
      {"starcoder", PreTokenizer::kSmolLM}, {"llama3", PreTokenizer::kLlama3},
      {"llama-v3", PreTokenizer::kLlama3},  {"llama-bpe", PreTokenizer::kLlama3},
      {"falcon3", PreTokenizer::kLlama3},   {"qwen2", PreTokenizer::kQwen2},
      {"deepseek-r1-qwen", PreTokenizer::kQwen2},
  };
  for (const auto& [known, kind] : kNames) {
    if (name == known) return kind;
  }
  fail("tokenizer.ggml.pre: unsupported pre-tokenizer '{}' (supported: default, gpt2, gpt-2, smollm, "
       "starcoder, llama3, llama-v3, llama-bpe, falcon3, qwen2, deepseek-r1-qwen)", gguf::printable(name));
}

void pre_tokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view>& pieces) {
  std::vector<Char> chars;
  chars.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) {
    const DecodedChar ch = decode_utf8(text, offset);
    const CodePointClass cls = ch.code_point >= kInvalidByteBase ? kOther : classify(ch.code_point);
    chars.push_back({ch.code_point, static_cast<uint32_t>(offset), cls});
    offset += ch.length;
  }
  if (kind != PreTokenizer::kSmolLM) {
    split_segment(kind, text, chars.data(), chars.size(), text.size(), pieces);
    return;
  }
  // SmolLM isolates each number character first; the GPT-2 regex then runs on
  // the stretches between them, and its lookahead cannot see past a stretch.
  size_t begin = 0;
  for (size_t i = 0; i <= chars.size(); ++i) {
    if (i < chars.size() && chars[i].cls != kNumber) continue;
    const size_t end_offset = i < chars.size() ? chars[i].offset : text.size();
    split_segment(kind, text, chars.data() + begin, i - begin, end_offset, pieces);
    if (i < chars.size()) {
      const size_t next = i + 1 < chars.size() ? chars[i + 1].offset : text.size();
      pieces.push_back(text.substr(chars[i].offset, next - chars[i].offset));
    }
    begin = i + 1;
  }
}

}  // namespace kascade::tokenizer
