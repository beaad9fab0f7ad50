// The sparse budget of KASCADE.md, one expression for the CPU and the CUDA
// kernels (host and device):
//   budget(n) = min(n, round_up(max(min_k, floor(percent * n / 100)), round_up_to)).
// floor() forgives a relative 1e-9 of binary round-off, so 10 % of 1000 is
// 100, not 99. round_up_to lets a kernel that works in blocks state its
// rounding so the CPU reference can reproduce it (1 = no rounding).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define KASCADE_HOST_DEVICE __host__ __device__
#else
#define KASCADE_HOST_DEVICE
#endif

namespace kascade {

KASCADE_HOST_DEVICE inline int64_t budget(int64_t n, double percent, int64_t min_k, int64_t round_up_to = 1) {
  if (n <= 0) return 0;
  const double share = percent * static_cast<double>(n) / 100.0;
  const int64_t floored = static_cast<int64_t>(::floor(share + share * 1e-9));
  int64_t keys = floored > min_k ? floored : min_k;
  if (round_up_to > 1) keys = (keys + round_up_to - 1) / round_up_to * round_up_to;
  return keys < n ? keys : n;
}

// True when percent is a usable budget: in (0, 100].
KASCADE_HOST_DEVICE inline bool valid_budget_percent(double percent) { return percent > 0 && percent <= 100; }

}  // namespace kascade
