// A monotonic stopwatch for throughput numbers (tok/s) and progress rates.
#pragma once

#include <chrono>

namespace kascade {

class Stopwatch {
 public:
  using Clock = std::chrono::steady_clock;  // never jumps with the wall clock

  Stopwatch() : start_(Clock::now()) {}

  void restart() { start_ = Clock::now(); }

  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  double milliseconds() const { return seconds() * 1e3; }

 private:
  Clock::time_point start_;
};

}  // namespace kascade
