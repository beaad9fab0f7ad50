// Unicode helpers for the tokenizer: UTF-8 decoding that keeps invalid bytes
// as bytes (so no input is ever lost or rejected), the code point classes the
// pre-tokenizer regexes need (\p{L}, \p{N}, \s), and GPT-2's byte <-> code
// point alphabet for byte-level BPE. The class table is generated from
// Python's unicodedata by tools/gen_unicode_table.py (unicode_table.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kascade::tokenizer {

enum class CodePointClass : uint8_t { kOther, kLetter, kNumber, kWhitespace };

struct CodePointRange {
  uint32_t first;
  uint32_t last;
  CodePointClass cls;
};

extern const CodePointRange kCodePointRanges[];
extern const size_t kCodePointRangeCount;
extern const char kUnicodeVersion[];

CodePointClass classify(uint32_t code_point);

// One decoded character. A byte that does not start a well-formed UTF-8
// sequence (RFC 3629: no overlongs, no surrogates, at most U+10FFFF) decodes
// to kInvalidByteBase + byte with length 1 and class kOther.
constexpr uint32_t kInvalidByteBase = 0x110000;
struct DecodedChar {
  uint32_t code_point;
  uint32_t length;  // bytes consumed, 1..4
};
DecodedChar decode_utf8(std::string_view text, size_t offset);

void append_utf8(std::string& out, uint32_t code_point);
bool is_valid_utf8(std::string_view text);

// GPT-2 byte-level alphabet: every byte maps to a printable code point
// (printable Latin-1 bytes to themselves, the rest to U+0100 onwards).
uint32_t byte_to_code_point(uint8_t byte);
// The byte a code point of that alphabet stands for, or -1 when it is not in it.
int code_point_to_byte(uint32_t code_point);

}  // namespace kascade::tokenizer
