// Tests for src/plot: font coverage, canvas drawing, PNG output (read back with
// libpng's own decoder), tick choice, colormap, and pixel checks on each chart.
#include <gtest/gtest.h>
#include <png.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <set>

#include "core/error.h"
#include "plot/font.h"
#include "plot/plot.h"

namespace kascade::plot {

// Found by argument-dependent lookup, so failures print colours as (r,g,b).
std::ostream& operator<<(std::ostream& out, Color c) {
  return out << "(" << int(c.r) << "," << int(c.g) << "," << int(c.b) << ")";
}

namespace {

namespace fs = std::filesystem;

constexpr Color kViridisBottom{68, 1, 84};
constexpr Color kViridisTop{253, 231, 37};
constexpr Color kFirstSeries{0, 114, 178};
constexpr Color kSecondSeries{213, 94, 0};

struct DecodedPng {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
  Color at(int x, int y) const {
    const size_t offset = (size_t(y) * size_t(width) + size_t(x)) * 3;
    return {rgb[offset], rgb[offset + 1], rgb[offset + 2]};
  }
};

DecodedPng read_png(const fs::path& path) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (png_image_begin_read_from_file(&image, path.c_str()) == 0) {
    ADD_FAILURE() << "cannot read " << path << ": " << image.message;
    return {};
  }
  image.format = PNG_FORMAT_RGB;
  DecodedPng decoded{int(image.width), int(image.height), std::vector<uint8_t>(PNG_IMAGE_SIZE(image))};
  if (png_image_finish_read(&image, nullptr, decoded.rgb.data(), 0, nullptr) == 0) {
    ADD_FAILURE() << "cannot decode " << path << ": " << image.message;
  }
  return decoded;
}

bool is_dark(Color c) { return c.r < 100 && c.g < 100 && c.b < 100; }

// Pixel of a value on a chart axis, as ChartLayout documents it.
int column_of(const ChartLayout& layout, double x) {
  const double v = layout.log_x ? std::log10(x) : x;
  return int(std::lround(layout.plot_area.x + (v - layout.x_min) / (layout.x_max - layout.x_min) *
                                                  (layout.plot_area.width - 1)));
}
int row_of(const ChartLayout& layout, double y) {
  return int(std::lround(layout.plot_area.y + layout.plot_area.height - 1 -
                         (y - layout.y_min) / (layout.y_max - layout.y_min) *
                             (layout.plot_area.height - 1)));
}

class PlotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kascade_plot_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// ---- font and text -----------------------------------------------------------

TEST(FontTest, EveryPrintableGlyphIsInkedAndDistinct) {
  std::set<GlyphRows> seen;
  for (char c = kFirstGlyph; c <= kLastGlyph; ++c) {
    const GlyphRows& rows = glyph(c);
    int ink = 0;
    for (const uint8_t row : rows) {
      EXPECT_EQ(row & ~0x1F, 0) << "glyph '" << c << "' has bits outside its 5 columns";
      ink += __builtin_popcount(row);
    }
    if (c == ' ') {
      EXPECT_EQ(ink, 0);
    } else {
      EXPECT_GT(ink, 0) << "glyph '" << c << "' is empty";
    }
    EXPECT_TRUE(seen.insert(rows).second) << "glyph '" << c << "' duplicates an earlier glyph";
  }
  EXPECT_EQ(seen.size(), 95u);
  EXPECT_EQ(glyph('\n'), glyph('?'));
  EXPECT_EQ(glyph(char(0xC3)), glyph('?'));
}

TEST(TextTest, MeasuresOneGlyphPerCharacter) {
  EXPECT_EQ(text_width("", 2), 0);
  EXPECT_EQ(text_width("A", 1), 5);
  EXPECT_EQ(text_width("AB", 1), 11);
  EXPECT_EQ(text_width("Hello", 3), (5 * 6 - 1) * 3);
  EXPECT_EQ(text_width("caf\xC3\xA9", 1), text_width("cafe", 1));  // é is one '?'
  EXPECT_EQ(text_height(2), 16);
}

TEST(TextTest, InkStaysInsideTheTextBox) {
  Image image(300, 60);
  const std::string text = "Hello, kascade! {1.5e-3}";
  const Rect box{12, 20, text_width(text, 2), text_height(2)};
  image.draw_text(box.x, box.y, text, 2, kBlack);
  int inside = 0, outside = 0;
  for (int y = 0; y < image.height(); ++y) {
    for (int x = 0; x < image.width(); ++x) {
      if (image.pixel(x, y) == kWhite) continue;
      (box.contains(x, y) ? inside : outside)++;
    }
  }
  EXPECT_GT(inside, box.width * box.height / 10);
  EXPECT_EQ(outside, 0);
}

TEST(TextTest, GlyphsAreUprightAndTurnCounterClockwise) {
  // 'L': a stem down the left column and a foot along row 6.
  Image upright(20, 20);
  upright.draw_text(3, 4, "L", 1, kBlack);
  EXPECT_EQ(upright.pixel(3, 4), kBlack);       // top of the stem
  EXPECT_EQ(upright.pixel(7, 4), kWhite);       // top right is empty
  EXPECT_EQ(upright.pixel(7, 4 + 6), kBlack);   // right end of the foot
  EXPECT_EQ(upright.pixel(3, 4 + 7), kWhite);   // descender row is empty

  // Turned: the stem lies along the bottom row of the 8x5 box, reading upwards,
  // and the foot runs up the column for glyph row 6.
  Image turned(20, 20);
  turned.draw_text_vertical(3, 4, "L", 1, kBlack);
  EXPECT_EQ(turned.pixel(3, 4 + 4), kBlack);      // glyph (0, 0): left end of the bottom row
  EXPECT_EQ(turned.pixel(3 + 6, 4 + 4), kBlack);  // glyph (0, 6): corner of the L
  EXPECT_EQ(turned.pixel(3 + 6, 4), kBlack);      // glyph (4, 6): end of the foot
  EXPECT_EQ(turned.pixel(3, 4), kWhite);          // glyph (4, 0): empty
}

// ---- canvas ---------------------------------------------------------------------

TEST(ImageTest, LinesAreAntiAliasedAndClipped) {
  Image image(60, 40);
  image.draw_line(5, 10, 50, 10, kBlack, 1.0);
  EXPECT_EQ(image.pixel(30, 10), kBlack);
  EXPECT_EQ(image.pixel(30, 11), kWhite);
  EXPECT_EQ(image.pixel(51, 10), kWhite);

  image.draw_line(5, 15, 50, 35, kBlack, 1.0);
  std::set<uint8_t> shades;
  for (int x = 10; x < 45; ++x) {
    for (int y = 15; y <= 35; ++y) shades.insert(image.pixel(x, y).r);
  }
  EXPECT_GT(shades.size(), 5u) << "a slanted line should have partial-coverage pixels";

  Image clipped(60, 40);
  clipped.set_clip({20, 0, 10, 40});
  clipped.draw_line(0, 20, 59, 20, kBlack, 3.0);
  clipped.fill_rect(0, 30, 60, 5, kBlack);
  clipped.reset_clip();
  EXPECT_EQ(clipped.pixel(25, 20), kBlack);
  EXPECT_EQ(clipped.pixel(10, 20), kWhite);
  EXPECT_EQ(clipped.pixel(40, 32), kWhite);
  EXPECT_EQ(clipped.pixel(29, 32), kBlack);
  // Far-away endpoints must not hang or crash.
  clipped.draw_line(-1e12, -1e12, 1e12, 1e12, kBlack, 2.0);
  EXPECT_EQ(clipped.pixel(20, 20), kBlack);
}

TEST(ImageTest, RejectsImpossibleSizes) {
  EXPECT_THROW(Image(0, 10), Error);
  EXPECT_THROW(Image(10, -1), Error);
  EXPECT_THROW(Image(100000, 10), Error);
}

TEST_F(PlotTest, PngRoundTripsExactly) {
  Image image(37, 23, Color{10, 20, 30});
  image.fill_rect(5, 6, 7, 8, Color{200, 100, 50});
  image.set_pixel(36, 22, Color{1, 2, 3});
  const std::string path = file("round_trip.png");
  image.write_png(path);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  const DecodedPng decoded = read_png(path);
  ASSERT_EQ(decoded.width, 37);
  ASSERT_EQ(decoded.height, 23);
  for (int y = 0; y < 23; ++y) {
    for (int x = 0; x < 37; ++x) ASSERT_EQ(decoded.at(x, y), image.pixel(x, y)) << x << "," << y;
  }
}

TEST_F(PlotTest, UnwritablePathThrowsAndLeavesNoFile) {
  const std::string missing_dir = file("no/such/dir/chart.png");
  try {
    Image(10, 10).write_png(missing_dir);
    FAIL() << "expected kascade::Error";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(missing_dir), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  EXPECT_FALSE(fs::exists(missing_dir));
  EXPECT_FALSE(fs::exists(missing_dir + ".tmp"));

  // The target is a directory: the temporary file is written, the rename fails
  // and the temporary must be removed again.
  const std::string directory = file("a_directory");
  fs::create_directory(directory);
  EXPECT_THROW(Image(10, 10).write_png(directory), Error);
  EXPECT_FALSE(fs::exists(directory + ".tmp"));
  EXPECT_TRUE(fs::is_directory(directory));

  EXPECT_THROW(line_chart(missing_dir, "t", {{"s", {1, 2}, {3, 4}, {}, {}}}, "x", "y"), Error);
  EXPECT_FALSE(fs::exists(missing_dir));
}

// ---- ticks and colours -----------------------------------------------------------------

TEST(TicksTest, KnownRanges) {
  const std::vector<double> unit = nice_ticks(0, 1, 8, true);
  ASSERT_EQ(unit.size(), 6u);
  for (size_t i = 0; i < unit.size(); ++i) EXPECT_NEAR(unit[i], 0.2 * double(i), 1e-12);

  const std::vector<double> inside = nice_ticks(0.13, 0.87, 5, false);
  ASSERT_EQ(inside.size(), 4u);
  EXPECT_NEAR(inside.front(), 0.2, 1e-12);
  EXPECT_NEAR(inside.back(), 0.8, 1e-12);

  const std::vector<double> lengths = nice_ticks(1024, 8192, 10, true);
  EXPECT_EQ(lengths.front(), 1000);
  EXPECT_EQ(lengths.back(), 9000);

  EXPECT_THROW(nice_ticks(1, 1, 5, true), Error);
  EXPECT_THROW(nice_ticks(0, NAN, 5, true), Error);
  EXPECT_THROW(nice_ticks(-1, 1, 2, true), Error);  // -1, 0, 1 cannot be cut to two
}

TEST(TicksTest, RandomRangesGetOneTwoFiveSteps) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> exponent(-6, 6), unit(-1, 1);
  for (int trial = 0; trial < 2000; ++trial) {
    const double scale = std::pow(10.0, exponent(rng));
    double lo = unit(rng) * scale, hi = unit(rng) * scale;
    if (lo > hi) std::swap(lo, hi);
    if (!(hi - lo > scale * 1e-3)) continue;
    const bool extend = trial % 2 == 0;
    const int max_count = (extend ? 3 : 2) + trial % 9;
    const std::vector<double> ticks = nice_ticks(lo, hi, max_count, extend);
    ASSERT_LE(int(ticks.size()), max_count);
    if (extend) {
      ASSERT_GE(ticks.size(), 2u);
      EXPECT_LE(ticks.front(), lo);
      EXPECT_GE(ticks.back(), hi);
    } else {
      for (const double t : ticks) {
        EXPECT_GE(t, lo - 1e-9 * scale);
        EXPECT_LE(t, hi + 1e-9 * scale);
      }
    }
    if (ticks.size() < 2) continue;
    const double step = ticks[1] - ticks[0];
    const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
    EXPECT_TRUE(std::abs(mantissa - 1) < 1e-6 || std::abs(mantissa - 2) < 1e-6 ||
                std::abs(mantissa - 5) < 1e-6)
        << "step " << step << " for [" << lo << ", " << hi << "]";
    for (const double t : ticks) {
      EXPECT_NEAR(t / step, std::round(t / step), 1e-6) << "tick " << t << " not a multiple of " << step;
    }
  }
}

TEST(ColormapTest, EndsAndPerceptualOrder) {
  EXPECT_EQ(colormap(0), kViridisBottom);
  EXPECT_EQ(colormap(1), kViridisTop);
  EXPECT_EQ(colormap(-3), kViridisBottom);
  EXPECT_EQ(colormap(7), kViridisTop);
  EXPECT_EQ(colormap(NAN), kViridisBottom);
  // A perceptual map gets lighter all the way up (Rec. 709 luma, which the
  // interpolation knows nothing about); 64 steps stay clear of rounding noise.
  double previous = -1;
  for (int i = 0; i <= 64; ++i) {
    const Color c = colormap(i / 64.0);
    const double luma = 0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b;
    EXPECT_GT(luma, previous) << "at " << i;
    previous = luma;
  }
}

// ---- charts -------------------------------------------------------------------------------

TEST_F(PlotTest, HeatmapCellsColourBarAndText) {
  // Row 0: vmin, mid, vmax, above vmax; row 1: NaN, below vmin, ...; row 2 ramps.
  const std::vector<std::vector<double>> values = {
      {0.0, 0.5, 1.0, 4.0},
      {NAN, -2.0, 0.25, 0.75},
      {0.1, 0.2, 0.3, 0.4},
  };
  const std::string path = file("heatmap.png");
  const ChartLayout layout = heatmap(path, "Similarity", values, "key layer", "query layer", 0, 1);
  const DecodedPng png = read_png(path);
  const Rect& grid = layout.plot_area;
  ASSERT_GT(png.width, grid.x + grid.width);
  ASSERT_GT(png.height, grid.y + grid.height);
  ASSERT_EQ(grid.width % 4, 0);
  const int cell = grid.width / 4;
  EXPECT_EQ(grid.height, 3 * cell);
  EXPECT_GE(cell, 16);

  const auto cell_center = [&](int row, int column) {
    return png.at(grid.x + column * cell + cell / 2, grid.y + row * cell + cell / 2);
  };
  EXPECT_EQ(cell_center(0, 0), kViridisBottom);
  EXPECT_EQ(cell_center(0, 1), colormap(0.5));
  EXPECT_EQ(cell_center(0, 2), kViridisTop);
  EXPECT_EQ(cell_center(0, 3), kViridisTop);
  EXPECT_EQ(cell_center(1, 0), kMissingValue);
  EXPECT_EQ(cell_center(1, 1), kViridisBottom);
  EXPECT_EQ(cell_center(2, 3), colormap(0.4));
  // Cells are solid squares: exactly two cells' worth of top colour in the grid.
  int top_coloured = 0;
  for (int y = grid.y; y < grid.y + grid.height; ++y) {
    for (int x = grid.x; x < grid.x + grid.width; ++x) top_coloured += png.at(x, y) == kViridisTop;
  }
  EXPECT_EQ(top_coloured, 2 * cell * cell);

  EXPECT_EQ(png.at(0, 0), kWhite);
  EXPECT_EQ(png.at(png.width - 1, png.height - 1), kWhite);
  // Colour bar to the right: near-top colour at its top, near-bottom at its bottom.
  bool found_bar = false;
  for (int x = grid.x + grid.width + 2; x < png.width && !found_bar; ++x) {
    const Color top = png.at(x, grid.y + 1);
    if (std::abs(top.r - kViridisTop.r) < 8 && std::abs(top.g - kViridisTop.g) < 8 &&
        std::abs(top.b - kViridisTop.b) < 8) {
      found_bar = true;
      const Color bottom = png.at(x, grid.y + std::max(grid.height, 200) - 2);
      EXPECT_LT(std::abs(bottom.r - kViridisBottom.r) + std::abs(bottom.g - kViridisBottom.g) +
                    std::abs(bottom.b - kViridisBottom.b), 20) << bottom;
    }
  }
  EXPECT_TRUE(found_bar);
  // Title above the grid, row labels left of it, column labels below it.
  const auto dark_in = [&](int x0, int y0, int x1, int y1) {
    int dark = 0;
    for (int y = std::max(y0, 0); y < std::min(y1, png.height); ++y) {
      for (int x = std::max(x0, 0); x < std::min(x1, png.width); ++x) dark += is_dark(png.at(x, y));
    }
    return dark;
  };
  EXPECT_GT(dark_in(0, 0, png.width, grid.y - 2), 50);
  EXPECT_GT(dark_in(0, grid.y, grid.x - 2, grid.y + grid.height), 30);
  EXPECT_GT(dark_in(grid.x, grid.y + grid.height + 2, grid.x + grid.width, png.height), 30);
}

TEST_F(PlotTest, HeatmapSizesCellsToTheGrid) {
  const std::vector<std::vector<double>> similarity(30, std::vector<double>(30, 0.5));
  const std::string path = file("similarity.png");
  const ChartLayout layout = heatmap(path, "30 layers", similarity, "layer", "layer", 0, 1);
  EXPECT_EQ(layout.plot_area.width, 30 * 18);
  EXPECT_EQ(layout.plot_area.height, 30 * 18);
  const DecodedPng png = read_png(path);
  EXPECT_LT(png.width, 1000);
  EXPECT_LT(png.height, 800);
}

TEST_F(PlotTest, HeatmapRejectsBadInput) {
  const std::string path = file("bad.png");
  EXPECT_THROW(heatmap(path, "t", {}, "x", "y", 0, 1), Error);
  EXPECT_THROW(heatmap(path, "t", {{1, 2}, {3}}, "x", "y", 0, 1), Error);
  EXPECT_THROW(heatmap(path, "t", {{1, 2}}, "x", "y", 1, 1), Error);
  EXPECT_THROW(heatmap(path, "t", {{1, 2}}, "x", "y", 0, INFINITY), Error);
  EXPECT_THROW(heatmap(path, "t", {{1, 2}}, "x", "y", 0, 1, {"only one"}), Error);
  EXPECT_THROW(heatmap(path, "t", {{1, 2}}, "x", "y", 0, 1, {}, {"a", "b"}), Error);
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(PlotTest, BarChartDrawsBarsFromZero) {
  const std::vector<std::string> labels = {"0", "1", "2", "3"};
  const std::vector<double> values = {1.0, 2.0, -1.0, NAN};
  const std::string path = file("bars.png");
  const ChartLayout layout = bar_chart(path, "Layer importance", labels, values, "layer", "score");
  const DecodedPng png = read_png(path);
  EXPECT_EQ(png.width, 900);
  EXPECT_EQ(png.height, 600);
  EXPECT_LE(layout.y_min, -1.0);
  EXPECT_GE(layout.y_max, 2.0);
  const Rect& area = layout.plot_area;
  const double slot = double(area.width) / 4;
  const auto center = [&](int i) { return area.x + int(slot * (i + 0.5)); };
  EXPECT_EQ(png.at(center(0), row_of(layout, 0.5)), kFirstSeries);
  EXPECT_NE(png.at(center(0), row_of(layout, 1.5)), kFirstSeries);
  EXPECT_EQ(png.at(center(1), row_of(layout, 1.9)), kFirstSeries);
  EXPECT_EQ(png.at(center(2), row_of(layout, -0.5)), kFirstSeries);
  EXPECT_NE(png.at(center(2), row_of(layout, 0.5)), kFirstSeries);
  for (int y = area.y; y < area.y + area.height; ++y) {
    ASSERT_NE(png.at(center(3), y), kFirstSeries) << "NaN slot must stay empty";
  }
  EXPECT_EQ(png.at(0, 0), kWhite);

  EXPECT_THROW(bar_chart(file("x.png"), "t", {"a"}, {1, 2}, "x", "y"), Error);
  EXPECT_THROW(bar_chart(file("x.png"), "t", {}, {}, "x", "y"), Error);
  EXPECT_THROW(bar_chart(file("x.png"), "t", {"a"}, {INFINITY}, "x", "y"), Error);
}

TEST_F(PlotTest, LineChartPlacesMarkersLinesAndLegend) {
  const std::vector<double> lengths = {1024, 2048, 4096, 8192};
  std::vector<Series> series = {
      {"dense", lengths, {0.95, 0.9, 0.85, 0.8}, {}, {}},
      {"kascade", lengths, {0.5, 0.4, NAN, 0.2}, {0.3, 0.3, NAN, 0.1}, {0.7, 0.5, NAN, 0.3}},
  };
  const std::string path = file("accuracy.png");
  const ChartLayout layout =
      line_chart(path, "Accuracy vs context length", series, "context length", "accuracy", true, 0.0, 1.0);
  const DecodedPng png = read_png(path);
  EXPECT_EQ(png.width, 900);
  EXPECT_EQ(png.height, 600);
  EXPECT_EQ(layout.y_min, 0.0);
  EXPECT_EQ(layout.y_max, 1.0);
  EXPECT_TRUE(layout.log_x);

  for (size_t i = 0; i < lengths.size(); ++i) {
    EXPECT_EQ(png.at(column_of(layout, lengths[i]), row_of(layout, series[0].y[i])), kFirstSeries) << i;
  }
  // The line between two points, halfway along on the log axis.
  const int mid_x = (column_of(layout, 1024) + column_of(layout, 2048)) / 2;
  const int mid_y = (row_of(layout, 0.95) + row_of(layout, 0.9)) / 2;
  EXPECT_EQ(png.at(mid_x, mid_y), kFirstSeries);
  // Second series: markers, an error bar above the first point, and a gap at NaN.
  EXPECT_EQ(png.at(column_of(layout, 1024), row_of(layout, 0.5)), kSecondSeries);
  EXPECT_EQ(png.at(column_of(layout, 1024), row_of(layout, 0.65)), kSecondSeries);
  EXPECT_EQ(png.at(column_of(layout, 8192), row_of(layout, 0.2)), kSecondSeries);
  const int gap_x = (column_of(layout, 4096) + column_of(layout, 8192)) / 2;
  for (int y = layout.plot_area.y; y < layout.plot_area.y + layout.plot_area.height; ++y) {
    ASSERT_NE(png.at(gap_x, y), kSecondSeries) << "NaN must break the line";
  }
  // Legend: both colours appear right of the plot area.
  int legend_first = 0, legend_second = 0;
  for (int y = 0; y < png.height; ++y) {
    for (int x = layout.plot_area.x + layout.plot_area.width + 2; x < png.width; ++x) {
      legend_first += png.at(x, y) == kFirstSeries;
      legend_second += png.at(x, y) == kSecondSeries;
    }
  }
  EXPECT_GT(legend_first, 20);
  EXPECT_GT(legend_second, 20);
  EXPECT_EQ(png.at(0, 0), kWhite);
}

TEST_F(PlotTest, LineChartRoundsLinearAxesOut) {
  const std::vector<Series> series = {{"delta", {1000, 2000, 3000}, {0.013, 0.021, 0.047}, {}, {}}};
  const ChartLayout layout = line_chart(file("ppl.png"), "Perplexity delta", series, "length", "delta");
  EXPECT_LE(layout.x_min, 1000);
  EXPECT_GE(layout.x_max, 3000);
  EXPECT_LE(layout.y_min, 0.013);
  EXPECT_GE(layout.y_max, 0.047);
  EXPECT_LT(layout.y_max - layout.y_min, 0.1);
  const DecodedPng png = read_png(file("ppl.png"));
  EXPECT_EQ(png.at(column_of(layout, 2000), row_of(layout, 0.021)), kFirstSeries);
}

TEST_F(PlotTest, LineChartRejectsBadInput) {
  const std::string path = file("bad.png");
  EXPECT_THROW(line_chart(path, "t", {}, "x", "y"), Error);
  EXPECT_THROW(line_chart(path, "t", {{"s", {1, 2}, {1}, {}, {}}}, "x", "y"), Error);
  EXPECT_THROW(line_chart(path, "t", {{"s", {1, 2}, {1, 2}, {0}, {}}}, "x", "y"), Error);
  EXPECT_THROW(line_chart(path, "t", {{"s", {0, 2}, {1, 2}, {}, {}}}, "x", "y", true), Error);
  EXPECT_THROW(line_chart(path, "t", {{"s", {1, 2}, {NAN, NAN}, {}, {}}}, "x", "y"), Error);
  EXPECT_THROW(line_chart(path, "t", {{"s", {1, 2}, {1, 2}, {}, {}}}, "x", "y", false, 1.0, 1.0), Error);
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
}  // namespace kascade::plot
