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

// Scratch of the selections on this thread, reused from call to call (the
// decode step selects 30-90 rows of a few thousand keys each; allocating
// per call cost as much as the selection).
struct SelectScratch {
  std::vector<uint32_t> keys;
  std::vector<int32_t> candidates, next, above;
};
static SelectScratch& select_scratch() {
  thread_local SelectScratch scratch;
  return scratch;
}

// The k largest among scores[list[i]], i < m (list ascending; null: the
// indices 0..m-1), written ascending. Finds the k-th largest order key digit
// by digit (11 bits at a time) below the bits every key shares (those above
// the highest bit in which the smallest and largest keys differ), narrowing
// a candidate list after each pass; `wanted` counts how many keys equal to
// the final threshold it takes.
static void radix_select(const float* scores, const int32_t* list, int64_t m, int64_t k, int32_t* out) {
  const auto index = [&](int64_t i) { return list ? list[i] : int32_t(i); };
  SelectScratch& scratch = select_scratch();
  scratch.keys.resize(size_t(m));
  scratch.candidates.resize(size_t(m));
  scratch.next.resize(size_t(m));
  uint32_t* keys = scratch.keys.data();
  uint32_t low = ~uint32_t(0), high = 0;
  for (int64_t i = 0; i < m; ++i) {
    keys[i] = order_key(scores[index(i)]);
    low = std::min(low, keys[i]);
    high = std::max(high, keys[i]);
  }
  uint32_t prefix = low & high, mask = 0;  // the shared high bits so far
  int bit = 31 - std::countl_zero(low ^ high);  // highest differing bit; -1: all equal
  if (bit >= 0) mask = ~((uint32_t(2) << bit) - 1), prefix &= mask;
  else mask = ~uint32_t(0), prefix = low;
  int64_t wanted = k;
  int32_t* candidates = scratch.candidates.data();
  int64_t n_candidates = -1;  // -1: every key
  uint32_t histogram[2048];
  while (bit >= 0) {
    const int width = std::min(bit + 1, 11);
    const int shift = bit + 1 - width;
    const uint32_t digit_mask = (uint32_t(1) << width) - 1;
    std::fill(histogram, histogram + (size_t(1) << width), 0u);
    if (n_candidates < 0) {
      for (int64_t i = 0; i < m; ++i) ++histogram[(keys[i] >> shift) & digit_mask];
    } else {
      for (int64_t c = 0; c < n_candidates; ++c) ++histogram[(keys[candidates[c]] >> shift) & digit_mask];
    }
    uint32_t digit = digit_mask;
    while (histogram[digit] < wanted) wanted -= histogram[digit--];
    prefix |= digit << shift;
    mask |= digit_mask << shift;
    bit = shift - 1;
    if (int64_t(histogram[digit]) == wanted) break;  // the whole bin is taken
    // Keep the positions that still match the prefix (ascending).
    int32_t* next = scratch.next.data();
    int64_t n_next = 0;
    if (n_candidates < 0) {
      for (int64_t i = 0; i < m; ++i) next[n_next] = int32_t(i), n_next += (keys[i] & mask) == prefix;
    } else {
      for (int64_t c = 0; c < n_candidates; ++c)
        next[n_next] = candidates[c], n_next += (keys[candidates[c]] & mask) == prefix;
    }
    scratch.candidates.swap(scratch.next);
    candidates = scratch.candidates.data();
    n_candidates = n_next;
  }
  // Keys above the threshold all go in; of those equal to it (under the
  // mask), the lowest indices, `wanted` of them. Branch-free: about half of
  // a candidate list is taken, in no predictable order.
  int64_t written = 0;
  for (int64_t i = 0; i < m && written < k; ++i) {
    const uint32_t masked = keys[i] & mask;
    const bool equal_taken = masked == prefix && wanted > 0;
    wanted -= equal_taken;
    out[written] = index(i);
    written += masked > prefix || equal_taken;
  }
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

// For each 8-bit mask, the positions of its set bits as bytes, lowest first.
static constexpr std::array<uint64_t, 256> kSetBitPositions = [] {
  std::array<uint64_t, 256> table{};
  for (unsigned mask = 0; mask < 256; ++mask) {
    int n = 0;
    for (unsigned bit = 0; bit < 8; ++bit)
      if (mask & (1u << bit)) table[mask] |= uint64_t(bit) << (8 * n++);
  }
  return table;
}();

// emit without a branch per index (a tenth to a fifth of a row is taken, in
// no predictable pattern): stores eight indices and advances by the count,
// so `out` needs room for 7 more than it keeps.
static int32_t* emit_packed(unsigned mask, int64_t j, int32_t* out) {
  const __m256i bits = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(kSetBitPositions[mask])));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_add_epi32(bits, _mm256_set1_epi32(int32_t(j))));
  return out + std::popcount(mask);
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
    std::vector<int32_t>& candidates = select_scratch().above;
    candidates.resize(size_t(above) + 8);
    int32_t* end = candidates.data();
    for (int64_t j = 0; j < n8; j += 8) {
      compare8(scores, j, t8, greater, equal);
      end = emit_packed(greater, j, end);
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
