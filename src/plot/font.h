// The embedded bitmap font used for chart text: one 5x8 glyph per printable
// ASCII character (32..126), drawn on a 6-pixel advance. Rows 0..6 hold capitals
// and digits (baseline under row 6); row 7 is the descender row.
#pragma once

#include <array>
#include <cstdint>

namespace kascade::plot {

inline constexpr int kGlyphWidth = 5;
inline constexpr int kGlyphHeight = 8;
inline constexpr int kGlyphAdvance = kGlyphWidth + 1;
inline constexpr char kFirstGlyph = ' ';
inline constexpr char kLastGlyph = '~';

// One byte per row, top row first; bit 4 is the leftmost column.
using GlyphRows = std::array<uint8_t, kGlyphHeight>;

// The glyph for `c`; characters outside 32..126 get the glyph for '?'.
const GlyphRows& glyph(char c);

}  // namespace kascade::plot
