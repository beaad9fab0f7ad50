// The RGB canvas behind the charts: clipped pixel writes, anti-aliased lines
// and discs, bitmap text (font.h) and PNG output through libpng.
#include <algorithm>
#include <cmath>

#include <png.h>

#include "core/error.h"
#include "core/file_io.h"
#include "plot/font.h"
#include "plot/plot.h"

namespace kascade::plot {

namespace {

constexpr int kMaxImageSide = 16384;

// The characters that will be drawn: one glyph per ASCII byte, '?' for each
// control byte and for each multi-byte UTF-8 character (continuation bytes skipped).
std::string glyph_string(std::string_view text) {
  std::string glyphs;
  glyphs.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if ((byte & 0xC0) == 0x80) continue;
    glyphs.push_back(byte >= 0x20 && byte < 0x7F ? c : '?');
  }
  return glyphs;
}

// Distance from point p to the segment a-b.
double distance_to_segment(double px, double py, double ax, double ay, double bx, double by) {
  const double dx = bx - ax, dy = by - ay;
  const double length_squared = dx * dx + dy * dy;
  double t = length_squared > 0 ? ((px - ax) * dx + (py - ay) * dy) / length_squared : 0.0;
  t = std::clamp(t, 0.0, 1.0);
  return std::hypot(px - (ax + t * dx), py - (ay + t * dy));
}

// Pixel coordinate range [lo, hi] for doubles that may be far off the canvas.
int clamp_to_int(double value, int lo, int hi) {
  return int(std::clamp(value, double(lo), double(hi)));
}

}  // namespace

int text_width(std::string_view text, int scale) {
  const auto count = int(glyph_string(text).size());
  return count == 0 ? 0 : (count * kGlyphAdvance - 1) * scale;
}

int text_height(int scale) { return kGlyphHeight * scale; }

Image::Image(int width, int height, Color background)
    : width_(width), height_(height), clip_{0, 0, width, height} {
  if (width <= 0 || height <= 0 || width > kMaxImageSide || height > kMaxImageSide) {
    fail("image size {}x{} is outside 1..{} pixels per side", width, height, kMaxImageSide);
  }
  rgb_.resize(size_t(width) * size_t(height) * 3);
  for (size_t i = 0; i < rgb_.size(); i += 3) {
    rgb_[i] = background.r;
    rgb_[i + 1] = background.g;
    rgb_[i + 2] = background.b;
  }
}

Color Image::pixel(int x, int y) const {
  if (x < 0 || y < 0 || x >= width_ || y >= height_) {
    fail("pixel ({}, {}) is outside the {}x{} image", x, y, width_, height_);
  }
  const size_t offset = (size_t(y) * size_t(width_) + size_t(x)) * 3;
  return {rgb_[offset], rgb_[offset + 1], rgb_[offset + 2]};
}

void Image::set_clip(const Rect& clip) {
  const int x0 = std::max(clip.x, 0), y0 = std::max(clip.y, 0);
  const int x1 = std::min(clip.x + clip.width, width_), y1 = std::min(clip.y + clip.height, height_);
  clip_ = {x0, y0, std::max(x1 - x0, 0), std::max(y1 - y0, 0)};
}

void Image::reset_clip() { clip_ = {0, 0, width_, height_}; }

void Image::set_pixel(int x, int y, Color color) {
  if (!clip_.contains(x, y)) return;
  const size_t offset = (size_t(y) * size_t(width_) + size_t(x)) * 3;
  rgb_[offset] = color.r;
  rgb_[offset + 1] = color.g;
  rgb_[offset + 2] = color.b;
}

void Image::blend_pixel(int x, int y, Color color, double coverage) {
  if (!clip_.contains(x, y) || !(coverage > 0)) return;
  if (coverage >= 1) return set_pixel(x, y, color);
  const size_t offset = (size_t(y) * size_t(width_) + size_t(x)) * 3;
  const auto mix = [coverage](uint8_t old_value, uint8_t new_value) {
    return uint8_t(std::lround(old_value + (double(new_value) - old_value) * coverage));
  };
  rgb_[offset] = mix(rgb_[offset], color.r);
  rgb_[offset + 1] = mix(rgb_[offset + 1], color.g);
  rgb_[offset + 2] = mix(rgb_[offset + 2], color.b);
}

void Image::fill_rect(int x, int y, int width, int height, Color color) {
  const int x0 = std::max(x, clip_.x), y0 = std::max(y, clip_.y);
  const int x1 = std::min(x + width, clip_.x + clip_.width);
  const int y1 = std::min(y + height, clip_.y + clip_.height);
  for (int py = y0; py < y1; ++py) {
    for (int px = x0; px < x1; ++px) set_pixel(px, py, color);
  }
}

void Image::draw_rect_outline(int x, int y, int width, int height, Color color) {
  fill_rect(x, y, width, 1, color);
  fill_rect(x, y + height - 1, width, 1, color);
  fill_rect(x, y, 1, height, color);
  fill_rect(x + width - 1, y, 1, height, color);
}

void Image::draw_line(double x0, double y0, double x1, double y1, Color color, double thickness) {
  if (!std::isfinite(x0) || !std::isfinite(y0) || !std::isfinite(x1) || !std::isfinite(y1)) return;
  // Coverage falls off linearly over the pixel that straddles the edge of the
  // stroke, which is what smooths the staircase of slanted lines.
  const double half = thickness / 2;
  const int left = clamp_to_int(std::floor(std::min(x0, x1) - half - 1), clip_.x, clip_.x + clip_.width);
  const int right = clamp_to_int(std::ceil(std::max(x0, x1) + half + 1), clip_.x - 1, clip_.x + clip_.width - 1);
  const int top = clamp_to_int(std::floor(std::min(y0, y1) - half - 1), clip_.y, clip_.y + clip_.height);
  const int bottom = clamp_to_int(std::ceil(std::max(y0, y1) + half + 1), clip_.y - 1, clip_.y + clip_.height - 1);
  for (int py = top; py <= bottom; ++py) {
    for (int px = left; px <= right; ++px) {
      const double distance = distance_to_segment(px, py, x0, y0, x1, y1);
      blend_pixel(px, py, color, std::clamp(half + 0.5 - distance, 0.0, 1.0));
    }
  }
}

void Image::fill_circle(double cx, double cy, double radius, Color color) {
  const int left = clamp_to_int(std::floor(cx - radius - 1), clip_.x, clip_.x + clip_.width);
  const int right = clamp_to_int(std::ceil(cx + radius + 1), clip_.x - 1, clip_.x + clip_.width - 1);
  const int top = clamp_to_int(std::floor(cy - radius - 1), clip_.y, clip_.y + clip_.height);
  const int bottom = clamp_to_int(std::ceil(cy + radius + 1), clip_.y - 1, clip_.y + clip_.height - 1);
  for (int py = top; py <= bottom; ++py) {
    for (int px = left; px <= right; ++px) {
      const double distance = std::hypot(px - cx, py - cy);
      blend_pixel(px, py, color, std::clamp(radius + 0.5 - distance, 0.0, 1.0));
    }
  }
}

void Image::draw_text(int x, int y, std::string_view text, int scale, Color color) {
  int pen_x = x;
  for (const char c : glyph_string(text)) {
    const GlyphRows& rows = glyph(c);
    for (int row = 0; row < kGlyphHeight; ++row) {
      for (int column = 0; column < kGlyphWidth; ++column) {
        if ((rows[size_t(row)] >> (kGlyphWidth - 1 - column) & 1) == 0) continue;
        fill_rect(pen_x + column * scale, y + row * scale, scale, scale, color);
      }
    }
    pen_x += kGlyphAdvance * scale;
  }
}

void Image::draw_text_vertical(int x, int y, std::string_view text, int scale, Color color) {
  // Glyph pixel (u along the text, v down the glyph) lands at (x + v, y + length - 1 - u).
  const int length = text_width(text, scale);
  int pen_u = 0;
  for (const char c : glyph_string(text)) {
    const GlyphRows& rows = glyph(c);
    for (int row = 0; row < kGlyphHeight; ++row) {
      for (int column = 0; column < kGlyphWidth; ++column) {
        if ((rows[size_t(row)] >> (kGlyphWidth - 1 - column) & 1) == 0) continue;
        const int u = pen_u + column * scale;
        fill_rect(x + row * scale, y + length - u - scale, scale, scale, color);
      }
    }
    pen_u += kGlyphAdvance * scale;
  }
}

void Image::write_png(const std::string& path) const {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = png_uint_32(width_);
  image.height = png_uint_32(height_);
  image.format = PNG_FORMAT_RGB;
  // First call sizes the encoded image, second encodes it.
  png_alloc_size_t size = 0;
  std::string encoded;
  bool ok = png_image_write_to_memory(&image, nullptr, &size, 0, rgb_.data(), 0, nullptr) != 0;
  if (ok) {
    encoded.resize(size);
    ok = png_image_write_to_memory(&image, encoded.data(), &size, 0, rgb_.data(), 0, nullptr) != 0;
  }
  const std::string problem = ok ? "" : image.message;
  png_image_free(&image);
  if (!ok) fail("cannot encode PNG '{}': {}", path, problem);
  encoded.resize(size);
  write_file(path, encoded, "PNG");
}

}  // namespace kascade::plot
