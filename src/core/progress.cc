// Progress bar drawing: one line rewritten in place with '\r'.
#include "core/progress.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <unistd.h>

namespace kascade {

namespace {

constexpr int kBarWidth = 30;

std::string format_rate(double per_second) {
  if (per_second >= 100.0) return fmt::format("{:.0f}", per_second);
  if (per_second >= 10.0) return fmt::format("{:.1f}", per_second);
  return fmt::format("{:.2f}", per_second);
}

}  // namespace

std::string format_duration(double seconds) {
  if (seconds < 10.0) return fmt::format("{:.1f}s", seconds);
  const auto whole = uint64_t(std::llround(seconds));
  if (whole < 60) return fmt::format("{}s", whole);
  if (whole < 3600) return fmt::format("{}m{:02}s", whole / 60, whole % 60);
  return fmt::format("{}h{:02}m", whole / 3600, whole % 3600 / 60);
}

std::string format_progress_line(const std::string& label, const std::string& unit,
                                 uint64_t done, uint64_t total, double elapsed_seconds) {
  const double fraction = total == 0 ? 1.0 : double(done) / double(total);
  const int filled = std::clamp(int(fraction * kBarWidth), 0, kBarWidth);
  std::string line = label.empty() ? "" : label + " ";
  line += fmt::format("[{}{}] {}/{}", std::string(size_t(filled), '#'),
                      std::string(size_t(kBarWidth - filled), '.'), done, total);
  if (done == 0 || elapsed_seconds <= 0.0) return line + fmt::format(" -- {}/s", unit);
  const double rate = double(done) / elapsed_seconds;
  line += fmt::format(" {} {}/s", format_rate(rate), unit);
  if (done >= total) return line + " in " + format_duration(elapsed_seconds);
  return line + " ETA " + format_duration(double(total - done) / rate);
}

ProgressBar::ProgressBar(uint64_t total, ProgressOptions options)
    : total_(total),
      options_(std::move(options)),
      enabled_(options_.stream != nullptr &&
               (options_.force || isatty(fileno(options_.stream)) == 1)) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(uint64_t done) {
  done_ = std::min(done, total_);
  if (!enabled_ || finished_) return;
  const double now = since_start_.seconds();
  if (now < options_.show_after_seconds) return;
  if (drawn_ && now - last_draw_seconds_ < options_.redraw_interval_seconds) return;
  last_draw_seconds_ = now;
  draw();
}

void ProgressBar::finish() {
  if (finished_) return;
  finished_ = true;
  if (!enabled_ || !drawn_) return;  // a step too short to draw leaves no trace
  draw();
  std::fputc('\n', options_.stream);
  std::fflush(options_.stream);
}

void ProgressBar::draw() {
  const std::string line =
      format_progress_line(options_.label, options_.unit, done_, total_, since_start_.seconds());
  // Pad with spaces to wipe the tail of a longer previous line.
  const size_t padding = last_line_length_ > line.size() ? last_line_length_ - line.size() : 0;
  fmt::print(options_.stream, "\r{}{}", line, std::string(padding, ' '));
  std::fflush(options_.stream);
  last_line_length_ = line.size();
  drawn_ = true;
}

}  // namespace kascade
