// The exact top-k (see rows.h).
#include "attention/rows.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <functional>
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

// The k largest among scores[list[i]], i < m (list ascending; null: the
// indices 0..m-1), written ascending. Finds the k-th largest order key digit
// by digit (11, 11, 10 bits), narrowing a candidate list after each pass;
// `wanted` counts how many keys equal to the final threshold it takes.
static void radix_select(const float* scores, const int32_t* list, int64_t m, int64_t k, int32_t* out) {
  const auto index = [&](int64_t i) { return list ? list[i] : int32_t(i); };
  std::vector<uint32_t> keys(static_cast<size_t>(m));
  std::vector<int32_t> candidates, next;  // positions into the list
  uint32_t prefix = 0;
  int64_t wanted = k;
  constexpr int kShifts[3] = {21, 10, 0};
  constexpr uint32_t kMasks[3] = {0x7ff, 0x7ff, 0x3ff};
  for (int pass = 0; pass < 3; ++pass) {
    int64_t histogram[2048] = {};
    const int shift = kShifts[pass];
    if (pass == 0) {
      for (int64_t i = 0; i < m; ++i) {
        keys[i] = order_key(scores[index(i)]);
        ++histogram[keys[i] >> shift];
      }
    } else {
      for (int32_t i : candidates) ++histogram[(keys[i] >> shift) & kMasks[pass]];
    }
    uint32_t digit = kMasks[pass];
    while (histogram[digit] < wanted) wanted -= histogram[digit--];
    prefix |= digit << shift;
    // Keep the positions that still match the prefix (ascending).
    const uint32_t high_mask = ~((uint32_t(1) << shift) - 1);
    next.clear();
    if (pass == 0) {
      for (int64_t i = 0; i < m; ++i)
        if ((keys[i] & high_mask) == prefix) next.push_back(int32_t(i));
    } else {
      for (int32_t i : candidates)
        if ((keys[i] & high_mask) == prefix) next.push_back(i);
    }
    candidates.swap(next);
  }
  // Keys above the threshold all go in; of those equal to it, the lowest
  // indices, `wanted` of them.
  const uint32_t threshold = prefix;
  int64_t written = 0;
  for (int64_t i = 0; i < m; ++i)
    if (keys[i] > threshold || (keys[i] == threshold && wanted-- > 0)) out[written++] = index(i);
}

// Eight scores at j compared with t: bit i set where scores[j + i] > t
// (greater) or == t (equal).
static void compare8(const float* scores, int64_t j, __m256 t, unsigned& greater, unsigned& equal) {
  const __m256 x = _mm256_loadu_ps(scores + j);
  greater = unsigned(_mm256_movemask_ps(_mm256_cmp_ps(x, t, _CMP_GT_OQ)));
  equal = unsigned(_mm256_movemask_ps(_mm256_cmp_ps(x, t, _CMP_EQ_OQ)));
}

// Writes the indices of the set bits of `mask` (plus j) ascending.
static int32_t* emit(unsigned mask, int64_t j, int32_t* out) {
  for (; mask; mask &= mask - 1) *out++ = int32_t(j + __builtin_ctz(mask));
  return out;
}

// The top k of scores[0, n) from a threshold t, or false when t does not
// decide it: with g keys above t and e equal to it, g >= k leaves the
// selection to the keys above t; g < k <= g + e makes t the k-th value, so
// the set is every key above t and the lowest-index k - g keys at t (rows
// whose softmax underflows to zero for most keys end here).
static bool top_k_from_threshold(const float* scores, int64_t n, int64_t k, float t, int32_t* out) {
  const int64_t n8 = n / 8 * 8;
  const __m256 t8 = _mm256_set1_ps(t);
  int64_t above = 0, at = 0;
  unsigned greater, equal;
  for (int64_t j = 0; j < n8; j += 8) {
    compare8(scores, j, t8, greater, equal);
    above += __builtin_popcount(greater);
    at += __builtin_popcount(equal);
  }
  for (int64_t j = n8; j < n; ++j) above += scores[j] > t, at += scores[j] == t;
  if (above >= k) {
    std::vector<int32_t> candidates(static_cast<size_t>(above));
    int32_t* end = candidates.data();
    for (int64_t j = 0; j < n8; j += 8) {
      compare8(scores, j, t8, greater, equal);
      end = emit(greater, j, end);
    }
    for (int64_t j = n8; j < n; ++j)
      if (scores[j] > t) *end++ = int32_t(j);
    radix_select(scores, candidates.data(), above, k, out);
    return true;
  }
  if (above + at < k) return false;
  int64_t ties = k - above;  // taken from the lowest indices at t
  for (int64_t j = 0; j < n8; j += 8) {
    compare8(scores, j, t8, greater, equal);
    if (std::popcount(equal) > ties) {
      unsigned taken = 0;
      for (int64_t i = 0; i < ties; ++i) taken |= equal & -equal, equal &= equal - 1;
      equal = taken;
    }
    ties -= std::popcount(equal);
    out = emit(greater | equal, j, out);
  }
  for (int64_t j = n8; j < n; ++j)
    if (scores[j] > t || (scores[j] == t && ties-- > 0)) *out++ = int32_t(j);
  return true;
}

void select_top_k(const float* scores, int64_t n, int64_t k, int32_t* out_indices_ascending) {
  if (k <= 0) return;
  if (k >= n) {
    std::iota(out_indices_ascending, out_indices_ascending + n, 0);
    return;
  }
  // A long row's top k (a decode anchor's 10 %) is decided by a threshold
  // taken from a strided sample, its rank aiming at ~2k keys above it
  // (top_k_from_threshold); where the sample misleads, the whole row is ranked.
  constexpr int64_t kSample = 256;
  if (n >= 16 * kSample && 4 * k <= n) {
    std::array<float, kSample> sample;
    for (int64_t i = 0; i < kSample; ++i) sample[size_t(i)] = scores[i * n / kSample];
    const int64_t rank = std::min(kSample - 1, 2 * k * kSample / n);  // 0: the largest
    std::nth_element(sample.begin(), sample.begin() + rank, sample.end(), std::greater<float>());
    if (top_k_from_threshold(scores, n, k, sample[size_t(rank)], out_indices_ascending)) return;
  }
  radix_select(scores, nullptr, n, k, out_indices_ascending);
}

}  // namespace kascade::attention
