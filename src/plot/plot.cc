// Chart layout and drawing: heatmap with colour bar, bar chart, line chart.
// Margins are measured from the text they must hold, so titles, tick labels
// and legends never overlap the data however long they are.
#include "plot/plot.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"

namespace kascade::plot {

namespace {

constexpr int kDefaultWidth = 900;
constexpr int kDefaultHeight = 600;
constexpr int kPadding = 16;
constexpr int kTitleScale = 3;
constexpr int kTextScale = 2;  // axis labels, tick labels, legend
constexpr int kTickLength = 5;
constexpr int kTickGap = 4;  // between a tick mark and its label
constexpr int kMaxValueTicks = 8;
constexpr int kHeatmapGridTarget = 540;  // pixels along the longer side of the cell grid
constexpr int kMaxHeatmapCell = 40;
constexpr int kMaxHeatmapSide = 4096;  // cells per side
constexpr int kColorBarWidth = 22;
constexpr int kMinColorBarHeight = 200;

constexpr Color kTextColor{25, 25, 25};
constexpr Color kAxisColor{70, 70, 70};
constexpr Color kGridColor{228, 228, 228};

// Colour-blind-safe series colours (Okabe & Ito), without the yellow that
// vanishes on white.
constexpr std::array<Color, 7> kSeriesColors{{
    {0, 114, 178}, {213, 94, 0}, {0, 158, 115}, {230, 159, 0},
    {204, 121, 167}, {86, 180, 233}, {0, 0, 0},
}};

enum class Marker { kCircle, kSquare, kDiamond, kTriangle };
constexpr std::array<Marker, 4> kSeriesMarkers{Marker::kCircle, Marker::kSquare,
                                               Marker::kDiamond, Marker::kTriangle};

// Viridis sampled at nine evenly spaced points; the rest is interpolated.
constexpr std::array<Color, 9> kColormapAnchors{{
    {68, 1, 84}, {71, 45, 123}, {59, 82, 139}, {44, 114, 142}, {33, 145, 140},
    {40, 174, 128}, {94, 201, 98}, {173, 220, 48}, {253, 231, 37},
}};

// ---- numbers -------------------------------------------------------------

// Fewest decimals that show every multiple of `step` exactly.
int decimals_for_step(double step) {
  for (int decimals = 0; decimals < 8; ++decimals) {
    const double scaled = step * std::pow(10.0, decimals);
    if (std::abs(scaled - std::round(scaled)) < 1e-6 * std::max(1.0, std::abs(scaled))) {
      return decimals;
    }
  }
  return 8;
}

std::string format_tick(double value, double step) {
  if (value == 0) value = 0.0;  // no "-0.0"
  if (std::abs(value) >= 1e6 || step < 1e-4) return fmt::format("{:.3g}", value);
  return fmt::format("{:.{}f}", value, decimals_for_step(step));
}

// A value shown on its own (colour bar ends, log-axis ticks).
std::string format_value(double value) {
  if (value == std::round(value) && std::abs(value) < 1e7) return fmt::format("{:.0f}", value);
  return fmt::format("{:.4g}", value);
}

// ---- layout helpers -------------------------------------------------------

int max_text_width(const std::vector<std::string>& texts, int scale) {
  int widest = 0;
  for (const auto& text : texts) widest = std::max(widest, text_width(text, scale));
  return widest;
}

// Title scale that fits `width`; the canvas is widened when even the smaller one does not.
int title_scale_for(const std::string& title, int& width) {
  if (text_width(title, kTitleScale) + 2 * kPadding <= width) return kTitleScale;
  width = std::max(width, text_width(title, kTextScale) + 2 * kPadding);
  return kTextScale;
}

int title_block_height(const std::string& title, int title_scale) {
  return title.empty() ? kPadding : kPadding + text_height(title_scale) + 14;
}

void draw_title(Image& image, const std::string& title, int title_scale) {
  const int x = (image.width() - text_width(title, title_scale)) / 2;
  image.draw_text(x, kPadding, title, title_scale, kTextColor);
}

void draw_centered_text(Image& image, int center_x, int y, const std::string& text) {
  image.draw_text(center_x - text_width(text, kTextScale) / 2, y, text, kTextScale, kTextColor);
}

void draw_vertical_label(Image& image, int x, int center_y, const std::string& text) {
  image.draw_text_vertical(x, center_y - text_width(text, kTextScale) / 2, text, kTextScale,
                           kTextColor);
}

// Whether labels centred at increasing `positions` leave `gap` pixels between neighbours.
bool labels_fit(const std::vector<double>& positions, const std::vector<std::string>& labels,
                int gap) {
  for (size_t i = 1; i < positions.size(); ++i) {
    const double needed = (text_width(labels[i - 1], kTextScale) + text_width(labels[i], kTextScale)) / 2.0 + gap;
    if (positions[i] - positions[i - 1] < needed) return false;
  }
  return true;
}

bool is_number(const std::string& text) {
  if (text.empty()) return false;
  char* end = nullptr;
  std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size();
}

// How category labels under an axis are drawn: every `stride`-th one, upright
// when they fit side by side, otherwise turned to read bottom to top.
struct CategoryLabels {
  bool vertical = false;
  int stride = 1;
  int extent = 0;  // pixels taken below the tick marks
};

CategoryLabels plan_category_labels(const std::vector<std::string>& labels, double slot) {
  const int widest = max_text_width(labels, kTextScale);
  const int height = text_height(kTextScale);
  const int horizontal_stride = std::max(1, int(std::ceil((widest + 8) / slot)));
  // Skipping labels is fine for numbers (the reader fills the gaps), not for names.
  const bool all_numbers = std::all_of(labels.begin(), labels.end(), is_number);
  if (horizontal_stride == 1 || (all_numbers && horizontal_stride <= 4)) {
    return {false, horizontal_stride, height};
  }
  return {true, std::max(1, int(std::ceil((height + 2) / slot))), widest};
}

void draw_category_labels(Image& image, const std::vector<std::string>& labels,
                          const CategoryLabels& plan, double first_center, double slot, int axis_y) {
  for (size_t i = 0; i < labels.size(); i += size_t(plan.stride)) {
    const int center = int(std::lround(first_center + double(i) * slot));
    image.fill_rect(center, axis_y, 1, kTickLength, kAxisColor);
    const int top = axis_y + kTickLength + kTickGap;
    if (plan.vertical) {
      image.draw_text_vertical(center - text_height(kTextScale) / 2, top, labels[i], kTextScale,
                               kTextColor);
    } else {
      image.draw_text(center - text_width(labels[i], kTextScale) / 2, top, labels[i], kTextScale,
                      kTextColor);
    }
  }
}

// Pixel of a value on an axis drawn from `first` (value lo) to `last` (value hi).
double to_pixel(double value, double lo, double hi, double first, double last) {
  return first + (value - lo) / (hi - lo) * (last - first);
}

// Value-axis ticks on the left of the plot area, with horizontal grid lines.
void draw_value_axis(Image& image, const Rect& area, double lo, double hi,
                     const std::vector<double>& ticks, const std::vector<std::string>& labels) {
  for (size_t i = 0; i < ticks.size(); ++i) {
    const int y = int(std::lround(to_pixel(ticks[i], lo, hi, area.y + area.height - 1, area.y)));
    image.fill_rect(area.x, y, area.width, 1, kGridColor);
    image.fill_rect(area.x - 1 - kTickLength, y, kTickLength, 1, kAxisColor);
    image.draw_text(area.x - 1 - kTickLength - kTickGap - text_width(labels[i], kTextScale),
                    y - text_height(kTextScale) / 2 + 1, labels[i], kTextScale, kTextColor);
  }
}

std::vector<std::string> tick_labels(const std::vector<double>& ticks) {
  const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : std::max(std::abs(ticks[0]), 1.0);
  std::vector<std::string> labels;
  for (const double tick : ticks) labels.push_back(format_tick(tick, step));
  return labels;
}

// Value-axis range and ticks for data in [lo, hi], honouring fixed ends.
struct ValueAxis {
  double lo, hi;
  std::vector<double> ticks;
};

ValueAxis value_axis(double data_lo, double data_hi, std::optional<double> fixed_lo,
                     std::optional<double> fixed_hi) {
  double lo = fixed_lo.value_or(data_lo), hi = fixed_hi.value_or(data_hi);
  if (!(hi > lo)) {
    // A flat series, or a fixed end beyond the data: open the free end(s).
    const double margin = std::max(std::abs(fixed_lo ? lo : hi) * 0.1, 1e-3);
    if (fixed_lo) {
      hi = lo + 2 * margin;
    } else if (fixed_hi) {
      lo = hi - 2 * margin;
    } else {
      lo -= margin;
      hi += margin;
    }
  }
  std::vector<double> ticks = nice_ticks(lo, hi, kMaxValueTicks, !(fixed_lo && fixed_hi));
  if (!fixed_lo) lo = ticks.front();
  if (!fixed_hi) hi = ticks.back();
  const double tolerance = (hi - lo) * 1e-9;
  std::erase_if(ticks, [&](double t) { return t < lo - tolerance || t > hi + tolerance; });
  return {lo, hi, ticks};
}

// ---- markers ---------------------------------------------------------------

bool inside_marker(Marker marker, double dx, double dy, double radius) {
  switch (marker) {
    case Marker::kCircle: return dx * dx + dy * dy <= radius * radius;
    case Marker::kSquare: return std::max(std::abs(dx), std::abs(dy)) <= radius * 0.85;
    case Marker::kDiamond: return std::abs(dx) + std::abs(dy) <= radius * 1.25;
    case Marker::kTriangle: {
      // Upward triangle with its centroid at the marker centre.
      const double top = -radius * 1.15, base = radius * 0.75;
      if (dy < top || dy > base) return false;
      const double half_width = (dy - top) / (base - top) * radius * 1.15;
      return std::abs(dx) <= half_width;
    }
  }
  return false;
}

// Coverage from 4x4 supersampling, so every shape gets smooth edges.
void draw_marker(Image& image, Marker marker, double cx, double cy, double radius, Color color) {
  const int reach = int(std::ceil(radius * 1.3)) + 1;
  const int center_x = int(std::lround(cx)), center_y = int(std::lround(cy));
  for (int py = center_y - reach; py <= center_y + reach; ++py) {
    for (int px = center_x - reach; px <= center_x + reach; ++px) {
      int hits = 0;
      for (int sy = 0; sy < 4; ++sy) {
        for (int sx = 0; sx < 4; ++sx) {
          hits += inside_marker(marker, px - 0.375 + sx * 0.25 - cx, py - 0.375 + sy * 0.25 - cy,
                                radius);
        }
      }
      image.blend_pixel(px, py, color, hits / 16.0);
    }
  }
}

}  // namespace

// ---- public helpers --------------------------------------------------------

Color colormap(double t) {
  if (!(t > 0)) return kColormapAnchors.front();
  if (t >= 1) return kColormapAnchors.back();
  const double position = t * double(kColormapAnchors.size() - 1);
  const auto index = size_t(position);
  const double fraction = position - double(index);
  const Color a = kColormapAnchors[index], b = kColormapAnchors[index + 1];
  const auto mix = [fraction](uint8_t from, uint8_t to) {
    return uint8_t(std::lround(from + (double(to) - from) * fraction));
  };
  return {mix(a.r, b.r), mix(a.g, b.g), mix(a.b, b.b)};
}

std::vector<double> nice_ticks(double lo, double hi, int max_count, bool extend) {
  // Ticks that cover a range straddling zero need three values at least (-s, 0, s).
  const int fewest = extend ? 3 : 2;
  if (!std::isfinite(lo) || !std::isfinite(hi) || !(hi > lo) || max_count < fewest) {
    fail("tick range [{}, {}] with at most {} ticks is not usable", lo, hi, max_count);
  }
  const double smallest_step = (hi - lo) / (max_count - 1);
  const int exponent = int(std::floor(std::log10(smallest_step)));
  constexpr double kSlack = 1e-9;  // so that 0.3 / 0.1 counts as 3, not 2.9999
  // Terminates: once step >= hi - lo, at most 2 ticks lie inside and 3 cover the range.
  for (int power = exponent - 1;; ++power) {
    for (const double mantissa : {1.0, 2.0, 5.0}) {
      const double step = mantissa * std::pow(10.0, power);
      const double first = extend ? std::floor(lo / step + kSlack) : std::ceil(lo / step - kSlack);
      const double last = extend ? std::ceil(hi / step - kSlack) : std::floor(hi / step + kSlack);
      if (last - first + 1 > max_count) continue;
      std::vector<double> ticks;
      for (double i = first; i <= last; ++i) ticks.push_back(i == 0 ? 0.0 : i * step);
      return ticks;
    }
  }
}

// ---- heatmap ---------------------------------------------------------------

ChartLayout heatmap(const std::string& path, const std::string& title,
                    const std::vector<std::vector<double>>& values, const std::string& x_label,
                    const std::string& y_label, double vmin, double vmax,
                    const std::vector<std::string>& x_ticks,
                    const std::vector<std::string>& y_ticks) {
  const size_t rows = values.size();
  const size_t columns = rows == 0 ? 0 : values[0].size();
  if (rows == 0 || columns == 0) fail("heatmap '{}': no values", path);
  for (size_t row = 0; row < rows; ++row) {
    if (values[row].size() != columns) {
      fail("heatmap '{}': row {} has {} values but row 0 has {}", path, row, values[row].size(),
           columns);
    }
  }
  if (rows > size_t(kMaxHeatmapSide) || columns > size_t(kMaxHeatmapSide)) {
    fail("heatmap '{}': {}x{} cells exceed {} per side", path, rows, columns, kMaxHeatmapSide);
  }
  if (!std::isfinite(vmin) || !std::isfinite(vmax) || !(vmax > vmin)) {
    fail("heatmap '{}': colour range [{}, {}] is empty or not finite", path, vmin, vmax);
  }
  if (!x_ticks.empty() && x_ticks.size() != columns) {
    fail("heatmap '{}': {} x tick labels for {} columns", path, x_ticks.size(), columns);
  }
  if (!y_ticks.empty() && y_ticks.size() != rows) {
    fail("heatmap '{}': {} y tick labels for {} rows", path, y_ticks.size(), rows);
  }
  const auto index_labels = [](size_t count) {
    std::vector<std::string> labels;
    for (size_t i = 0; i < count; ++i) labels.push_back(std::to_string(i));
    return labels;
  };
  const std::vector<std::string> column_labels = x_ticks.empty() ? index_labels(columns) : x_ticks;
  const std::vector<std::string> row_labels = y_ticks.empty() ? index_labels(rows) : y_ticks;

  const int cell = std::clamp(kHeatmapGridTarget / int(std::max(rows, columns)), 1, kMaxHeatmapCell);
  const int grid_width = cell * int(columns), grid_height = cell * int(rows);
  const int label_height = text_height(kTextScale);
  const int row_stride = std::max(1, (label_height + 2 + cell - 1) / cell);
  const CategoryLabels column_plan = plan_category_labels(column_labels, cell);

  // Colour bar: at least kMinColorBarHeight tall so its labels have room.
  const int bar_height = std::max(grid_height, kMinColorBarHeight);
  std::vector<double> bar_ticks =
      nice_ticks(vmin, vmax, std::max(2, bar_height / (label_height * 3)), false);
  const double bar_step = bar_ticks.size() > 1 ? bar_ticks[1] - bar_ticks[0] : vmax - vmin;
  // The ends are always labelled; round ticks too close to an end would collide with them.
  const double min_separation = (label_height + 6) * (vmax - vmin) / bar_height;
  std::erase_if(bar_ticks, [&](double t) {
    return t - vmin < min_separation || vmax - t < min_separation;
  });
  std::vector<double> bar_values{vmin};
  std::vector<std::string> bar_labels{format_value(vmin)};
  for (const double tick : bar_ticks) {
    bar_values.push_back(tick);
    bar_labels.push_back(format_tick(tick, bar_step));
  }
  bar_values.push_back(vmax);
  bar_labels.push_back(format_value(vmax));

  // Horizontal layout: [y label][row labels][grid][gap][bar][bar labels].
  const int y_label_block = y_label.empty() ? 0 : label_height + 10;
  const int row_label_block = max_text_width(row_labels, kTextScale) + kTickLength + kTickGap;
  const int bar_block = 24 + kColorBarWidth + kTickLength + kTickGap +
                        max_text_width(bar_labels, kTextScale);
  const int content_width = y_label_block + row_label_block + grid_width + bar_block;
  int width = std::max(content_width + 2 * kPadding, text_width(x_label, kTextScale) + 2 * kPadding);
  const int title_scale = title_scale_for(title, width);
  const int grid_x = (width - content_width) / 2 + y_label_block + row_label_block;
  const int grid_y = title_block_height(title, title_scale);
  const int below_grid = kTickLength + kTickGap + column_plan.extent +
                         (x_label.empty() ? 0 : 12 + label_height);
  const int height = grid_y + std::max(grid_height + below_grid, bar_height + label_height / 2) +
                     kPadding;

  Image image(width, height);
  draw_title(image, title, title_scale);
  for (size_t row = 0; row < rows; ++row) {
    for (size_t column = 0; column < columns; ++column) {
      const double value = values[row][column];
      const Color color =
          std::isnan(value) ? kMissingValue : colormap((value - vmin) / (vmax - vmin));
      image.fill_rect(grid_x + int(column) * cell, grid_y + int(row) * cell, cell, cell, color);
    }
  }
  image.draw_rect_outline(grid_x - 1, grid_y - 1, grid_width + 2, grid_height + 2, kAxisColor);

  // Row labels, right-aligned against the grid.
  for (size_t row = 0; row < rows; row += size_t(row_stride)) {
    const int center = grid_y + int(row) * cell + cell / 2;
    image.fill_rect(grid_x - 1 - kTickLength, center, kTickLength, 1, kAxisColor);
    const std::string& label = row_labels[row];
    image.draw_text(grid_x - 1 - kTickLength - kTickGap - text_width(label, kTextScale),
                    center - label_height / 2 + 1, label, kTextScale, kTextColor);
  }
  draw_category_labels(image, column_labels, column_plan, grid_x + cell / 2.0 - 0.5, cell,
                       grid_y + grid_height + 1);
  if (!x_label.empty()) {
    draw_centered_text(image, grid_x + grid_width / 2,
                       grid_y + grid_height + 1 + kTickLength + kTickGap + column_plan.extent + 12,
                       x_label);
  }
  if (!y_label.empty()) {
    draw_vertical_label(image, (width - content_width) / 2, grid_y + grid_height / 2, y_label);
  }

  // Colour bar, vmax at the top; each pixel row shows the colour of its centre value.
  const int bar_x = grid_x + grid_width + 24;
  for (int y = 0; y < bar_height; ++y) {
    const double t = 1.0 - (y + 0.5) / bar_height;
    image.fill_rect(bar_x, grid_y + y, kColorBarWidth, 1, colormap(t));
  }
  image.draw_rect_outline(bar_x - 1, grid_y - 1, kColorBarWidth + 2, bar_height + 2, kAxisColor);
  for (size_t i = 0; i < bar_values.size(); ++i) {
    const int y = int(std::lround(to_pixel(bar_values[i], vmin, vmax, grid_y + bar_height - 1, grid_y)));
    const int tick_x = bar_x + kColorBarWidth + 1;
    image.fill_rect(tick_x, y, kTickLength, 1, kAxisColor);
    image.draw_text(tick_x + kTickLength + kTickGap, y - label_height / 2 + 1, bar_labels[i],
                    kTextScale, kTextColor);
  }

  image.write_png(path);
  return {{grid_x, grid_y, grid_width, grid_height}, 0, double(columns), 0, double(rows), false};
}

// ---- bar chart ---------------------------------------------------------------

ChartLayout bar_chart(const std::string& path, const std::string& title,
                      const std::vector<std::string>& labels, const std::vector<double>& values,
                      const std::string& x_label, const std::string& y_label) {
  if (labels.size() != values.size()) {
    fail("bar_chart '{}': {} labels for {} values", path, labels.size(), values.size());
  }
  if (values.empty()) fail("bar_chart '{}': no values", path);
  double data_lo = 0, data_hi = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isinf(values[i])) fail("bar_chart '{}': value {} ('{}') is infinite", path, i, labels[i]);
    if (std::isnan(values[i])) continue;
    data_lo = std::min(data_lo, values[i]);
    data_hi = std::max(data_hi, values[i]);
  }
  if (data_lo == data_hi) data_hi = 1;  // all zero (or missing): still show a unit axis
  const ValueAxis axis = value_axis(data_lo, data_hi, {}, {});
  const std::vector<std::string> axis_labels = tick_labels(axis.ticks);

  int width = std::max(kDefaultWidth, int(values.size()) * 6 + 200);
  const int title_scale = title_scale_for(title, width);
  const int label_height = text_height(kTextScale);
  const int left = kPadding + (y_label.empty() ? 0 : label_height + 10) +
                   max_text_width(axis_labels, kTextScale) + kTickGap + kTickLength + 1;
  const int top = title_block_height(title, title_scale);
  const int plot_width = width - left - kPadding - 8;
  const double slot = double(plot_width) / double(values.size());
  const CategoryLabels plan = plan_category_labels(labels, slot);
  const int bottom = kTickLength + kTickGap + plan.extent + (x_label.empty() ? 0 : 12 + label_height) +
                     kPadding + 1;
  const int height = std::max(kDefaultHeight, top + bottom + 200);
  const Rect area{left, top, plot_width, height - top - bottom};

  Image image(width, height);
  draw_title(image, title, title_scale);
  draw_value_axis(image, area, axis.lo, axis.hi, axis.ticks, axis_labels);
  const double zero_y = to_pixel(0, axis.lo, axis.hi, area.y + area.height - 1, area.y);
  const Color bar_color = kSeriesColors[0];
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i])) {
      // Mark the slot so a missing value does not read as zero.
      const int scale = text_width("NaN", kTextScale) <= slot ? kTextScale : 1;
      const int center = area.x + int(std::lround(slot * (double(i) + 0.5)));
      image.draw_text(center - text_width("NaN", scale) / 2,
                      int(std::lround(zero_y)) - text_height(scale) - 2, "NaN", scale, kMissingValue);
      continue;
    }
    const double value_y = to_pixel(values[i], axis.lo, axis.hi, area.y + area.height - 1, area.y);
    const int x0 = area.x + int(std::lround(slot * (double(i) + 0.15)));
    const int x1 = area.x + int(std::lround(slot * (double(i) + 0.85)));
    const int y0 = int(std::lround(std::min(zero_y, value_y)));
    const int y1 = int(std::lround(std::max(zero_y, value_y)));
    image.fill_rect(x0, y0, std::max(x1 - x0, 1), y1 - y0 + 1, bar_color);
  }
  if (axis.lo < 0) image.fill_rect(area.x, int(std::lround(zero_y)), area.width, 1, kAxisColor);
  image.draw_rect_outline(area.x - 1, area.y - 1, area.width + 2, area.height + 2, kAxisColor);
  draw_category_labels(image, labels, plan, area.x + slot / 2 - 0.5, slot, area.y + area.height + 1);
  if (!x_label.empty()) {
    draw_centered_text(image, area.x + area.width / 2,
                       area.y + area.height + 1 + kTickLength + kTickGap + plan.extent + 12, x_label);
  }
  if (!y_label.empty()) draw_vertical_label(image, kPadding, area.y + area.height / 2, y_label);

  image.write_png(path);
  return {area, 0, double(values.size()), axis.lo, axis.hi, false};
}

// ---- line chart ----------------------------------------------------------------

namespace {

std::vector<std::string> x_axis_labels(const std::vector<double>& ticks, bool log_x) {
  if (!log_x) return tick_labels(ticks);
  std::vector<std::string> labels;
  for (const double tick : ticks) labels.push_back(format_value(tick));
  return labels;
}

// Ticks for the x axis of a line chart: round values on a linear axis; on a log
// axis the data's own x values when there are few (context lengths), else
// 1-2-5 multiples of powers of ten, thinned until the labels fit.
std::vector<double> x_axis_ticks(double lo, double hi, bool log_x, const std::vector<double>& xs,
                                 double pixels) {
  const auto fits = [&](const std::vector<double>& ticks) {
    std::vector<double> positions;
    for (const double tick : ticks) {
      positions.push_back(to_pixel(log_x ? std::log10(tick) : tick, lo, hi, 0, pixels));
    }
    return labels_fit(positions, x_axis_labels(ticks, log_x), 12);
  };
  const auto thin_until_fit = [&](std::vector<double> ticks) {
    while (!fits(ticks) && ticks.size() > 2) {
      std::vector<double> thinned;
      for (size_t i = 0; i < ticks.size(); i += 2) thinned.push_back(ticks[i]);
      ticks = thinned;
    }
    return ticks;
  };
  if (!log_x) {
    for (int count = 10; count > 2; --count) {
      std::vector<double> ticks = nice_ticks(lo, hi, count, false);
      if (fits(ticks)) return ticks;
    }
    return nice_ticks(lo, hi, 2, false);
  }
  std::vector<double> distinct = xs;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  if (distinct.size() <= 12) return thin_until_fit(distinct);
  std::vector<double> ticks;
  for (int power = int(std::floor(lo)); power <= int(std::ceil(hi)); ++power) {
    for (const double mantissa : {1.0, 2.0, 5.0}) {
      const double tick = mantissa * std::pow(10.0, power);
      if (std::log10(tick) >= lo && std::log10(tick) <= hi) ticks.push_back(tick);
    }
  }
  if (fits(ticks)) return ticks;
  std::erase_if(ticks, [](double t) {
    const double power = std::round(std::log10(t));
    return std::abs(t - std::pow(10.0, power)) > 1e-9 * t;
  });
  return thin_until_fit(ticks);
}

}  // namespace

ChartLayout line_chart(const std::string& path, const std::string& title,
                       const std::vector<Series>& series, const std::string& x_label,
                       const std::string& y_label, bool log_x, std::optional<double> y_min,
                       std::optional<double> y_max) {
  if (series.empty()) fail("line_chart '{}': no series", path);
  if ((y_min && !std::isfinite(*y_min)) || (y_max && !std::isfinite(*y_max)) ||
      (y_min && y_max && !(*y_max > *y_min))) {
    fail("line_chart '{}': y range [{}, {}] is empty or not finite", path,
         y_min ? fmt::format("{}", *y_min) : "auto", y_max ? fmt::format("{}", *y_max) : "auto");
  }
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo;
  double y_lo = x_lo, y_hi = -x_lo;
  std::vector<double> all_x;
  for (const Series& s : series) {
    if (s.x.size() != s.y.size()) {
      fail("line_chart '{}': series '{}' has {} x values but {} y values", path, s.name, s.x.size(),
           s.y.size());
    }
    for (const auto* bounds : {&s.y_low, &s.y_high}) {
      if (!bounds->empty() && bounds->size() != s.x.size()) {
        fail("line_chart '{}': series '{}' has {} error-bar values for {} points", path, s.name,
             bounds->size(), s.x.size());
      }
    }
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.x[i]) || (log_x && !(s.x[i] > 0))) {
        fail("line_chart '{}': series '{}' point {} has x = {}, not {}", path, s.name, i, s.x[i],
             log_x ? "positive (log axis)" : "finite");
      }
      for (const double y : {s.y[i], s.y_low.empty() ? s.y[i] : s.y_low[i],
                             s.y_high.empty() ? s.y[i] : s.y_high[i]}) {
        if (!std::isfinite(y)) continue;
        y_lo = std::min(y_lo, y);
        y_hi = std::max(y_hi, y);
      }
      if (!std::isfinite(s.y[i])) continue;
      const double x = log_x ? std::log10(s.x[i]) : s.x[i];
      x_lo = std::min(x_lo, x);
      x_hi = std::max(x_hi, x);
      all_x.push_back(s.x[i]);
    }
  }
  if (all_x.empty()) fail("line_chart '{}': no finite data points", path);

  const ValueAxis y_axis = value_axis(y_lo, y_hi, y_min, y_max);
  const std::vector<std::string> y_tick_labels = tick_labels(y_axis.ticks);
  // x range: rounded out to ticks on a linear axis, 4% margins on a log axis.
  if (x_hi == x_lo) {
    const double margin = log_x ? 0.5 : std::max(std::abs(x_lo) * 0.1, 1.0);
    x_lo -= margin;
    x_hi += margin;
  }
  if (log_x) {
    const double margin = (x_hi - x_lo) * 0.04;
    x_lo -= margin;
    x_hi += margin;
  } else {
    const std::vector<double> rounded = nice_ticks(x_lo, x_hi, 10, true);
    x_lo = rounded.front();
    x_hi = rounded.back();
  }

  // Legend entries: a line sample with the marker, then the name.
  constexpr int kSwatch = 34, kLegendRow = 24, kLegendInset = 10;
  std::vector<std::string> names;
  for (const Series& s : series) names.push_back(s.name);
  const int legend_width = 2 * kLegendInset + kSwatch + 8 + max_text_width(names, kTextScale);
  const int legend_height = 2 * kLegendInset + kLegendRow * int(series.size()) - 8;

  int width = std::max(kDefaultWidth, 560 + legend_width);
  const int title_scale = title_scale_for(title, width);
  const int label_height = text_height(kTextScale);
  const int left = kPadding + (y_label.empty() ? 0 : label_height + 10) +
                   max_text_width(y_tick_labels, kTextScale) + kTickGap + kTickLength + 1;
  const int right = 14 + legend_width + kPadding;
  const int top = title_block_height(title, title_scale);
  const int bottom = kTickLength + kTickGap + label_height + (x_label.empty() ? 0 : 12 + label_height) +
                     kPadding + 1;
  const int height = std::max(kDefaultHeight, top + legend_height + kPadding);
  const Rect area{left, top, width - left - right, height - top - bottom};
  const auto pixel_x = [&](double x) {
    return to_pixel(log_x ? std::log10(x) : x, x_lo, x_hi, area.x, area.x + area.width - 1);
  };
  const auto pixel_y = [&](double y) {
    return to_pixel(y, y_axis.lo, y_axis.hi, area.y + area.height - 1, area.y);
  };

  Image image(width, height);
  draw_title(image, title, title_scale);
  draw_value_axis(image, area, y_axis.lo, y_axis.hi, y_axis.ticks, y_tick_labels);
  const std::vector<double> x_ticks = x_axis_ticks(x_lo, x_hi, log_x, all_x, area.width);
  const std::vector<std::string> x_tick_labels = x_axis_labels(x_ticks, log_x);
  for (size_t i = 0; i < x_ticks.size(); ++i) {
    const int x = int(std::lround(pixel_x(x_ticks[i])));
    image.fill_rect(x, area.y, 1, area.height, kGridColor);
    image.fill_rect(x, area.y + area.height + 1, 1, kTickLength, kAxisColor);
    const std::string& label = x_tick_labels[i];
    image.draw_text(x - text_width(label, kTextScale) / 2, area.y + area.height + 1 + kTickLength + kTickGap,
                    label, kTextScale, kTextColor);
  }
  image.draw_rect_outline(area.x - 1, area.y - 1, area.width + 2, area.height + 2, kAxisColor);

  constexpr double kLineWidth = 2.5, kMarkerRadius = 4.5;
  const Rect marker_clip{area.x - 6, area.y - 6, area.width + 12, area.height + 12};
  for (size_t index = 0; index < series.size(); ++index) {
    const Series& s = series[index];
    const Color color = kSeriesColors[index % kSeriesColors.size()];
    image.set_clip(area);
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (s.y_low.empty() || !std::isfinite(s.y_low[i]) || !std::isfinite(s.y_high[i])) continue;
      // Snapped to a pixel column so the thin bar stays crisp.
      const double x = std::round(pixel_x(s.x[i]));
      const double low = pixel_y(s.y_low[i]), high = pixel_y(s.y_high[i]);
      image.draw_line(x, low, x, high, color, 1.5);
      image.draw_line(x - 4, low, x + 4, low, color, 1.5);
      image.draw_line(x - 4, high, x + 4, high, color, 1.5);
    }
    for (size_t i = 1; i < s.x.size(); ++i) {
      if (!std::isfinite(s.y[i - 1]) || !std::isfinite(s.y[i])) continue;
      image.draw_line(pixel_x(s.x[i - 1]), pixel_y(s.y[i - 1]), pixel_x(s.x[i]), pixel_y(s.y[i]),
                      color, kLineWidth);
    }
    image.set_clip(marker_clip);
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.y[i])) continue;
      const double x = pixel_x(s.x[i]), y = pixel_y(s.y[i]);
      if (!area.contains(int(std::lround(x)), int(std::lround(y)))) continue;
      draw_marker(image, kSeriesMarkers[index % kSeriesMarkers.size()], x, y, kMarkerRadius, color);
    }
    image.reset_clip();
  }

  // Legend, outside the data to the right.
  const int legend_x = area.x + area.width + 14, legend_y = area.y;
  image.draw_rect_outline(legend_x, legend_y, legend_width, legend_height, kGridColor);
  for (size_t index = 0; index < series.size(); ++index) {
    const Color color = kSeriesColors[index % kSeriesColors.size()];
    const int row_y = legend_y + kLegendInset + int(index) * kLegendRow;
    const double center_y = row_y + label_height / 2.0 - 1;
    const int swatch_x = legend_x + kLegendInset;
    image.draw_line(swatch_x, center_y, swatch_x + kSwatch - 1, center_y, color, kLineWidth);
    draw_marker(image, kSeriesMarkers[index % kSeriesMarkers.size()], swatch_x + kSwatch / 2.0,
                center_y, kMarkerRadius, color);
    image.draw_text(swatch_x + kSwatch + 8, row_y, series[index].name, kTextScale, kTextColor);
  }

  if (!x_label.empty()) {
    draw_centered_text(image, area.x + area.width / 2,
                       area.y + area.height + 1 + kTickLength + kTickGap + label_height + 12, x_label);
  }
  if (!y_label.empty()) draw_vertical_label(image, kPadding, area.y + area.height / 2, y_label);

  image.write_png(path);
  return {area, x_lo, x_hi, y_axis.lo, y_axis.hi, log_x};
}

}  // namespace kascade::plot
