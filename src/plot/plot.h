// Small PNG charts for the calibration and eval frontends: heatmaps (layer
// similarity, per-head sparsity), bar charts (layer importance) and line charts
// (accuracy or perplexity against context length). Drawing is done on an RGB
// canvas with an embedded bitmap font, so the only dependency is libpng.
// Non-goals: arbitrary fonts, vector output, interactive use.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kascade::plot {

struct Color {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Color&) const = default;
};

inline constexpr Color kWhite{255, 255, 255};
inline constexpr Color kBlack{0, 0, 0};
inline constexpr Color kMissingValue{150, 150, 150};  // NaN heatmap cells, "NaN" bar marks

struct Rect {
  int x = 0, y = 0, width = 0, height = 0;
  bool contains(int px, int py) const {
    return px >= x && px < x + width && py >= y && py < y + height;
  }
};

// Pixel size of `text` drawn at an integer `scale` (one line; bytes outside
// printable ASCII draw as '?', one per UTF-8 character).
int text_width(std::string_view text, int scale);
int text_height(int scale);

// An RGB8 canvas. Drawing outside the canvas or the clip rectangle is dropped.
class Image {
 public:
  Image(int width, int height, Color background = kWhite);

  int width() const { return width_; }
  int height() const { return height_; }
  Color pixel(int x, int y) const;

  // Restricts drawing to `clip` (intersected with the canvas) until reset.
  void set_clip(const Rect& clip);
  void reset_clip();

  void set_pixel(int x, int y, Color color);
  // Mixes `color` into the pixel with weight `coverage` in [0, 1].
  void blend_pixel(int x, int y, Color color, double coverage);
  void fill_rect(int x, int y, int width, int height, Color color);
  void draw_rect_outline(int x, int y, int width, int height, Color color);
  // Anti-aliased segment of the given thickness, coordinates at pixel centres.
  void draw_line(double x0, double y0, double x1, double y1, Color color, double thickness = 1.0);
  void fill_circle(double cx, double cy, double radius, Color color);
  // Top-left corner of the text box at (x, y).
  void draw_text(int x, int y, std::string_view text, int scale, Color color);
  // Text turned 90 degrees counter-clockwise (read bottom to top); the box is
  // text_height(scale) wide and text_width(text, scale) tall, top-left at (x, y).
  void draw_text_vertical(int x, int y, std::string_view text, int scale, Color color);

  // Writes a temporary beside path and renames it, so a failure leaves no partial file.
  // Throws kascade::Error naming the path.
  void write_png(const std::string& path) const;

 private:
  int width_, height_;
  Rect clip_;
  std::vector<uint8_t> rgb_;
};

// Perceptual colormap (viridis-like, dark purple -> blue -> green -> yellow),
// interpolated linearly between anchor colours; t is clamped to [0, 1].
Color colormap(double t);

// Round tick values (1, 2 or 5 times a power of ten) for [lo, hi], at most
// max_count of them. With extend the ticks cover the range (first <= lo,
// last >= hi; max_count >= 3); without it they all lie inside (max_count >= 2).
std::vector<double> nice_ticks(double lo, double hi, int max_count, bool extend);

// Where a chart put its data, so callers (and tests) can map values to pixels.
// Line and bar charts: plot_area is inside the axes frame; value x lands on pixel
// column plot_area.x + (x - x_min) / (x_max - x_min) * (plot_area.width - 1)
// (log10 of x and of the ends when log_x), y on plot_area.y + plot_area.height - 1
// - (y - y_min) / (y_max - y_min) * (plot_area.height - 1). Bar i fills slot
// [i, i + 1) of x_min = 0 .. x_max = bar count.
// Heatmap: plot_area is the cell grid, x_min = 0 .. x_max = columns and
// y_min = 0 .. y_max = rows; every cell is an equal square, row 0 at the top.
struct ChartLayout {
  Rect plot_area;
  double x_min = 0, x_max = 0, y_min = 0, y_max = 0;
  bool log_x = false;
};

// values[row][column], row 0 drawn at the top. Values are clamped to [vmin, vmax];
// NaN cells are drawn in kMissingValue. Tick lists, when given, name every
// column / row; when empty the indices are used.
ChartLayout heatmap(const std::string& path, const std::string& title,
                    const std::vector<std::vector<double>>& values, const std::string& x_label,
                    const std::string& y_label, double vmin, double vmax,
                    const std::vector<std::string>& x_ticks = {},
                    const std::vector<std::string>& y_ticks = {});

// One bar per label, from zero to the value; NaN values leave their slot empty.
ChartLayout bar_chart(const std::string& path, const std::string& title,
                      const std::vector<std::string>& labels, const std::vector<double>& values,
                      const std::string& x_label, const std::string& y_label);

struct Series {
  std::string name;
  std::vector<double> x, y;
  std::vector<double> y_low, y_high;  // optional error bars: empty, or one per point
};

// One coloured line with markers per series and a legend. NaN y values break the
// line. log_x needs positive x. y_min / y_max fix the axis ends; otherwise they are
// rounded out from the data to tick values.
ChartLayout line_chart(const std::string& path, const std::string& title,
                       const std::vector<Series>& series, const std::string& x_label,
                       const std::string& y_label, bool log_x = false,
                       std::optional<double> y_min = {}, std::optional<double> y_max = {});

}  // namespace kascade::plot
