// The exact top-k (see rows.h).
#include "attention/rows.h"

#include <cstring>
#include <numeric>
#include <vector>

namespace kascade::attention {

// Radix selection on order-preserving integer images of the floats.
static uint32_t order_key(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if (bits == 0x80000000u) bits = 0;  // -0 ranks as +0
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

void select_top_k(const float* scores, int64_t n, int64_t k, int32_t* out_indices_ascending) {
  if (k <= 0) return;
  if (k >= n) {
    std::iota(out_indices_ascending, out_indices_ascending + n, 0);
    return;
  }
  // Find the k-th largest key digit by digit (11, 11, 10 bits), narrowing a
  // candidate list after the first pass; `wanted` counts how many keys equal
  // to the final threshold the selection takes.
  std::vector<uint32_t> keys(static_cast<size_t>(n));
  std::vector<int32_t> candidates;
  uint32_t prefix = 0;
  int64_t wanted = k;
  constexpr int kShifts[3] = {21, 10, 0};
  constexpr uint32_t kMasks[3] = {0x7ff, 0x7ff, 0x3ff};
  for (int pass = 0; pass < 3; ++pass) {
    int64_t histogram[2048] = {};
    const int shift = kShifts[pass];
    if (pass == 0) {
      for (int64_t j = 0; j < n; ++j) {
        keys[j] = order_key(scores[j]);
        ++histogram[keys[j] >> shift];
      }
    } else {
      for (int32_t j : candidates) ++histogram[(keys[j] >> shift) & kMasks[pass]];
    }
    uint32_t digit = kMasks[pass];
    while (histogram[digit] < wanted) wanted -= histogram[digit--];
    prefix |= digit << shift;
    // Keep the indices that still match the prefix (ascending).
    const uint32_t high_mask = ~((uint32_t(1) << shift) - 1);
    std::vector<int32_t> next;
    if (pass == 0) {
      for (int64_t j = 0; j < n; ++j)
        if ((keys[j] & high_mask) == prefix) next.push_back(int32_t(j));
    } else {
      for (int32_t j : candidates)
        if ((keys[j] & high_mask) == prefix) next.push_back(j);
    }
    candidates.swap(next);
  }
  // Keys above the threshold all go in; of those equal to it, the lowest
  // indices, `wanted` of them.
  const uint32_t threshold = prefix;
  int64_t out = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (keys[j] > threshold || (keys[j] == threshold && wanted-- > 0))
      out_indices_ascending[out++] = int32_t(j);
  }
}

}  // namespace kascade::attention
