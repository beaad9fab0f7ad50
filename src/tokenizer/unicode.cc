// UTF-8 decoding, code point classes and the GPT-2 byte alphabet (see unicode.h).
#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace kascade::tokenizer {
namespace {

// Latin-1 is looked up on every character of typical text; keep it off the binary search.
std::array<CodePointClass, 256> make_latin1_classes() {
  std::array<CodePointClass, 256> classes{};
  for (size_t i = 0; i < kCodePointRangeCount && kCodePointRanges[i].first < 256; ++i) {
    const CodePointRange& range = kCodePointRanges[i];
    for (uint32_t cp = range.first; cp <= range.last && cp < 256; ++cp) classes[cp] = range.cls;
  }
  return classes;
}

// GPT-2's choice: bytes that are printable Latin-1 keep their code point; the
// others take U+0100 + n in byte order, so every byte is one visible character.
bool is_self_mapped_byte(int byte) {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE && byte <= 0xFF);
}

struct ByteAlphabet {
  std::array<uint32_t, 256> byte_to_cp{};
  std::array<int16_t, 512> cp_to_byte{};  // all mapped code points are below U+0200
  ByteAlphabet() {
    cp_to_byte.fill(-1);
    uint32_t next_extra = 256;
    for (int byte = 0; byte < 256; ++byte) {
      byte_to_cp[byte] = is_self_mapped_byte(byte) ? static_cast<uint32_t>(byte) : next_extra++;
      cp_to_byte[byte_to_cp[byte]] = static_cast<int16_t>(byte);
    }
  }
};

const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

}  // namespace

CodePointClass classify(uint32_t code_point) {
  static const std::array<CodePointClass, 256> latin1 = make_latin1_classes();
  if (code_point < 256) return latin1[code_point];
  const CodePointRange* end = kCodePointRanges + kCodePointRangeCount;
  const CodePointRange* it = std::upper_bound(
      kCodePointRanges, end, code_point,
      [](uint32_t cp, const CodePointRange& range) { return cp < range.first; });
  if (it == kCodePointRanges) return CodePointClass::kOther;
  --it;
  return code_point <= it->last ? it->cls : CodePointClass::kOther;
}

DecodedChar decode_utf8(std::string_view text, size_t offset) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[offset + i]); };
  const uint8_t lead = byte(0);
  const DecodedChar invalid{kInvalidByteBase + lead, 1};
  if (lead < 0x80) return {lead, 1};
  uint32_t length;
  uint32_t code_point;
  uint32_t minimum;
  if ((lead & 0xE0) == 0xC0) {
    length = 2, code_point = lead & 0x1F, minimum = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, code_point = lead & 0x0F, minimum = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, code_point = lead & 0x07, minimum = 0x10000;
  } else {
    return invalid;
  }
  if (offset + length > text.size()) return invalid;
  for (uint32_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return invalid;
    code_point = (code_point << 6) | (byte(i) & 0x3F);
  }
  if (code_point < minimum || code_point > 0x10FFFF || (code_point >= 0xD800 && code_point <= 0xDFFF)) {
    return invalid;
  }
  return {code_point, length};
}

void append_utf8(std::string& out, uint32_t code_point) {
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (code_point >> 18)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
}

bool is_valid_utf8(std::string_view text) {
  for (size_t offset = 0; offset < text.size();) {
    const DecodedChar ch = decode_utf8(text, offset);
    if (ch.code_point >= kInvalidByteBase) return false;
    offset += ch.length;
  }
  return true;
}

uint32_t byte_to_code_point(uint8_t byte) { return byte_alphabet().byte_to_cp[byte]; }

int code_point_to_byte(uint32_t code_point) {
  return code_point < 512 ? byte_alphabet().cp_to_byte[code_point] : -1;
}

}  // namespace kascade::tokenizer
