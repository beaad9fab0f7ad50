// A one-line progress bar on stderr for long steps (prefill, calibration,
// evaluation): done/total, rate and time left. Drawn only when stderr is a
// terminal (or when forced), only once the step has run show_after_seconds,
// and at most once per redraw_interval_seconds, so a hot loop can update it
// freely. Not thread-safe: update it from one thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "core/timer.h"

namespace kascade {

struct ProgressOptions {
  std::string label;                  // e.g. "prefill"
  std::string unit = "tok";           // shown in the rate, e.g. "812 tok/s"
  bool force = false;                 // draw even when the stream is not a terminal
  double redraw_interval_seconds = 0.1;
  double show_after_seconds = 0.0;    // stay silent for steps shorter than this
  std::FILE* stream = stderr;
};

class ProgressBar {
 public:
  ProgressBar(uint64_t total, ProgressOptions options);
  ~ProgressBar();  // finishes the line if it was drawn
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void update(uint64_t done);  // absolute count, clamped to total
  void advance(uint64_t count = 1) { update(done_ + count); }
  // Draws the final state and ends the line. Later calls do nothing.
  void finish();

  bool enabled() const { return enabled_; }

 private:
  void draw();

  uint64_t total_;
  uint64_t done_ = 0;
  ProgressOptions options_;
  bool enabled_;
  bool drawn_ = false;
  bool finished_ = false;
  size_t last_line_length_ = 0;
  Stopwatch since_start_;
  double last_draw_seconds_ = 0.0;
};

// The line the bar draws, for a given state: "label [#####.....] 5/10 2.5 tok/s ETA 2s".
std::string format_progress_line(const std::string& label, const std::string& unit,
                                 uint64_t done, uint64_t total, double elapsed_seconds);

// "0.4s", "42s", "3m07s", "2h05m".
std::string format_duration(double seconds);

}  // namespace kascade
