// AVX2/FMA/F16C inner loops of CPU attention (see kernels.h).
#include "attention/kernels.h"

#include <algorithm>
#include <cassert>
#include <cstring>

namespace kascade::attention::kernels {

float max_of(const float* x, int64_t n) {
  __m256 m = _mm256_set1_ps(kNegInf);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
  float result = horizontal_max(m);
  for (; i < n; ++i) result = std::max(result, x[i]);
  return result;
}

float exp2_shift_sum(float* x, int64_t n, float shift) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 total = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp2_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    _mm256_storeu_ps(x + i, e);
    total = _mm256_add_ps(total, e);
  }
  float sum = horizontal_sum(total);
  for (; i < n; ++i) {
    x[i] = exp2_scalar(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

float exp2_sum(const float* x, int64_t n, float shift) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 total = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) total = _mm256_add_ps(total, exp2_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), s)));
  float sum = horizontal_sum(total);
  for (; i < n; ++i) sum += exp2_scalar(x[i] - shift);
  return sum;
}

void add_exp2(float* y, const float* x, int64_t n, float shift, bool max) {
  const __m256 s = _mm256_set1_ps(shift);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp2_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    const __m256 old = _mm256_loadu_ps(y + i);
    _mm256_storeu_ps(y + i, max ? _mm256_max_ps(old, e) : _mm256_add_ps(old, e));
  }
  for (; i < n; ++i) {
    const float e = exp2_scalar(x[i] - shift);
    y[i] = max ? std::max(y[i], e) : y[i] + e;
  }
}

void axpy(float* y, const float* x, int64_t n, float a) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

static void scale(float* x, int64_t n, float a) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(va, _mm256_loadu_ps(x + i)));
  for (; i < n; ++i) x[i] *= a;
}

void SoftmaxState::raise_max(float new_max, float* acc, int d) {
  if (new_max == max) return;
  const float factor = std::exp2(max - new_max);  // 0 when max was -inf
  sum *= factor;
  scale(acc, d, factor);
  max = new_max;
}

void SoftmaxState::merge(const SoftmaxState& other, float* acc, const float* other_acc, int d) {
  if (other.max == kNegInf) return;
  raise_max(std::max(max, other.max), acc, d);
  const float factor = std::exp2(other.max - max);
  sum += other.sum * factor;
  axpy(acc, other_acc, d, factor);
}

void pack_queries(const GroupQueries& queries, int d, float* dst) {
  const float factor = kLog2e / std::sqrt(float(d));
  for (int64_t t = 0; t < queries.n_positions; ++t)
    for (int r = 0; r < queries.group; ++r) {
      const float* src = queries.row(t, r);
      float* row = dst + (t * queries.group + r) * d;
      for (int c = 0; c < d; ++c) row[c] = src[c] * factor;
    }
}

// ---------------------------------------------------------------------------
// Key panels.

// Transposes the 8x8 block rows[u][c0..c0+8) (u < 8) into out[c * ld + u].
static inline void transpose8_store(const __m256 (&rows)[8], float* out, int64_t ld) {
  const __m256 t0 = _mm256_unpacklo_ps(rows[0], rows[1]), t1 = _mm256_unpackhi_ps(rows[0], rows[1]);
  const __m256 t2 = _mm256_unpacklo_ps(rows[2], rows[3]), t3 = _mm256_unpackhi_ps(rows[2], rows[3]);
  const __m256 t4 = _mm256_unpacklo_ps(rows[4], rows[5]), t5 = _mm256_unpackhi_ps(rows[4], rows[5]);
  const __m256 t6 = _mm256_unpacklo_ps(rows[6], rows[7]), t7 = _mm256_unpackhi_ps(rows[6], rows[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(out + 0 * ld, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(out + 1 * ld, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(out + 2 * ld, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(out + 3 * ld, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(out + 4 * ld, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(out + 5 * ld, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(out + 6 * ld, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(out + 7 * ld, _mm256_permute2f128_ps(u3, u7, 0x31));
}

template <typename T>
void pack_key_panels(Rows<T> keys, const KeyList& list, int d, float* panels) {
  // Eight keys at a time: eight rows of eight dims, transposed in registers.
  for (int64_t i0 = 0; i0 < round_up(list.count, 8); i0 += 8) {
    float* out = panels + (i0 / kPanelWidth) * d * kPanelWidth + i0 % kPanelWidth;
    const T* src[8];
    const int64_t n = std::min<int64_t>(8, list.count - i0);
    for (int u = 0; u < 8; ++u) src[u] = u < n ? keys.row(list.at(i0 + u)) : nullptr;
    for (int c = 0; c < d; c += 8) {
      __m256 rows[8];
      for (int u = 0; u < 8; ++u) rows[u] = src[u] ? load8(src[u] + c) : _mm256_setzero_ps();
      transpose8_store(rows, out + c * kPanelWidth, kPanelWidth);
    }
  }
  // The second half of a last panel that only got eight keys.
  if (round_up(list.count, 8) % kPanelWidth != 0) {
    float* out = panels + (list.count / kPanelWidth) * d * kPanelWidth + 8;
    for (int c = 0; c < d; ++c) std::memset(out + c * kPanelWidth, 0, 8 * sizeof(float));
  }
}

template void pack_key_panels<float>(Rows<float>, const KeyList&, int, float*);
template void pack_key_panels<uint16_t>(Rows<uint16_t>, const KeyList&, int, float*);

// ---------------------------------------------------------------------------
// Micro-kernels. Their accumulators are named variables, not arrays: GCC keeps
// arrays of vectors in memory (a store per FMA). Row blocks shorter than six
// repeat their last row and send its results to a dummy buffer.

// Six row pointers from `first` with stride `ld`, the rows past n repeated.
template <typename P>
static inline void row_pointers(P* first, int64_t ld, int64_t n, P* dummy, P* (&rows)[6],
                                bool write) {
  for (int64_t r = 0; r < 6; ++r) rows[r] = r < n ? first + r * ld : (write ? dummy : first + (n - 1) * ld);
}

// The register tile both packed products use: c[r][0..15] (+)= sum over k <
// n of a[r][k] * b[k * 16 .. k * 16 + 15], six rows of a against 16-float
// rows of b (QK^T: a = queries over d, b = a key panel; PV: a =
// probabilities over keys, b = a value chunk). kAccumulate starts from c.
template <bool kAccumulate>
static inline void tile_6x16(const float* const (&a)[6], int64_t n, const float* b, float* const (&c)[6]) {
  static_assert(kPanelWidth == 16 && kChunkWidth == 16);
  const auto start = [](const float* row, int offset) {
    return kAccumulate ? _mm256_loadu_ps(row + offset) : _mm256_setzero_ps();
  };
  __m256 a0 = start(c[0], 0), b0 = start(c[0], 8), a1 = start(c[1], 0), b1 = start(c[1], 8);
  __m256 a2 = start(c[2], 0), b2 = start(c[2], 8), a3 = start(c[3], 0), b3 = start(c[3], 8);
  __m256 a4 = start(c[4], 0), b4 = start(c[4], 8), a5 = start(c[5], 0), b5 = start(c[5], 8);
  for (int64_t k = 0; k < n; ++k) {
    const __m256 lo = _mm256_load_ps(b + k * 16);
    const __m256 hi = _mm256_load_ps(b + k * 16 + 8);
    __m256 x = _mm256_broadcast_ss(a[0] + k);
    a0 = _mm256_fmadd_ps(x, lo, a0), b0 = _mm256_fmadd_ps(x, hi, b0);
    x = _mm256_broadcast_ss(a[1] + k);
    a1 = _mm256_fmadd_ps(x, lo, a1), b1 = _mm256_fmadd_ps(x, hi, b1);
    x = _mm256_broadcast_ss(a[2] + k);
    a2 = _mm256_fmadd_ps(x, lo, a2), b2 = _mm256_fmadd_ps(x, hi, b2);
    x = _mm256_broadcast_ss(a[3] + k);
    a3 = _mm256_fmadd_ps(x, lo, a3), b3 = _mm256_fmadd_ps(x, hi, b3);
    x = _mm256_broadcast_ss(a[4] + k);
    a4 = _mm256_fmadd_ps(x, lo, a4), b4 = _mm256_fmadd_ps(x, hi, b4);
    x = _mm256_broadcast_ss(a[5] + k);
    a5 = _mm256_fmadd_ps(x, lo, a5), b5 = _mm256_fmadd_ps(x, hi, b5);
  }
  _mm256_storeu_ps(c[0], a0), _mm256_storeu_ps(c[0] + 8, b0);
  _mm256_storeu_ps(c[1], a1), _mm256_storeu_ps(c[1] + 8, b1);
  _mm256_storeu_ps(c[2], a2), _mm256_storeu_ps(c[2] + 8, b2);
  _mm256_storeu_ps(c[3], a3), _mm256_storeu_ps(c[3] + 8, b3);
  _mm256_storeu_ps(c[4], a4), _mm256_storeu_ps(c[4] + 8, b4);
  _mm256_storeu_ps(c[5], a5), _mm256_storeu_ps(c[5] + 8, b5);
}

void qk_panels(const float* q, int64_t n_rows, int d, const float* panels, int64_t n_keys,
               float* s, int64_t lds) {
  const int64_t n_panels = (n_keys + kPanelWidth - 1) / kPanelWidth;
  alignas(32) float dummy[kPanelWidth];
  for (int64_t r0 = 0; r0 < n_rows; r0 += kMaxRows) {
    const int64_t n = std::min<int64_t>(kMaxRows, n_rows - r0);
    const float* qrows[6];
    row_pointers(q + r0 * d, d, n, static_cast<const float*>(nullptr), qrows, false);
    for (int64_t p = 0; p < n_panels; ++p) {
      float* srows[6];
      row_pointers(s + r0 * lds + p * kPanelWidth, lds, n, dummy, srows, true);
      tile_6x16<false>(qrows, d, panels + p * d * kPanelWidth, srows);
    }
  }
}

// Gathered and streamed rows: prefetching and list access for the decode kernels below.
template <typename T>
static inline void prefetch_row(const T* row, int d) {
  const char* bytes = reinterpret_cast<const char*>(row);
  for (size_t off = 0; off < size_t(d) * sizeof(T); off += 64) _mm_prefetch(bytes + off, _MM_HINT_T0);
}

constexpr int64_t kPrefetchDistance = 16;

template <typename T, bool kGather>
static inline const T* list_row(Rows<T> rows, const KeyList& list, int64_t i) {
  return kGather ? rows.row(list.indices[i]) : rows.row(list.first + i);
}

void pv_packed(const float* p, int64_t ldp, int64_t n_rows, const float* value_block,
               int64_t n_keys, int d, float* o, int64_t ldo) {
  // Chunk outermost: one chunk of the block (kKeyBlock x 16 floats) stays in
  // L1 while every row block uses it. Output rows are padded to chunks.
  alignas(32) float dummy[kChunkWidth];
  const int n_chunks = int(round_up(d, kChunkWidth) / kChunkWidth);
  for (int c = 0; c < n_chunks; ++c) {
    const float* chunk = value_block + int64_t(c) * kKeyBlock * kChunkWidth;
    for (int64_t r0 = 0; r0 < n_rows; r0 += kMaxRows) {
      const int64_t n = std::min<int64_t>(kMaxRows, n_rows - r0);
      const float* prows[6];
      float* orows[6];
      row_pointers(p + r0 * ldp, ldp, n, static_cast<const float*>(nullptr), prows, false);
      row_pointers(o + r0 * ldo + c * kChunkWidth, ldo, n, dummy, orows, true);
      tile_6x16<true>(prows, n_keys, chunk, orows);
    }
  }
}

template <typename T>
void pack_value_chunks(Rows<T> values, const KeyList& list, int d, float* out) {
  const int64_t padded_d = round_up(d, kChunkWidth);
  for (int64_t i = 0; i < list.count; ++i) {
    const T* row = values.row(list.at(i));
    float* block = out + (i / kKeyBlock) * kKeyBlock * padded_d;
    const int64_t in_block = i % kKeyBlock;
    for (int c = 0; c < d; c += 8) {
      float* dst = block + (c / kChunkWidth) * kKeyBlock * kChunkWidth + in_block * kChunkWidth +
                   c % kChunkWidth;
      _mm256_store_ps(dst, load8(row + c));
      if (d % kChunkWidth != 0 && c + 8 == d) _mm256_store_ps(dst + 8, _mm256_setzero_ps());
    }
  }
}

template void pack_value_chunks<float>(Rows<float>, const KeyList&, int, float*);
template void pack_value_chunks<uint16_t>(Rows<uint16_t>, const KeyList&, int, float*);

// Decode PV straight from the cache: three rows x 16 (or 8) columns per pass.
// Keys alternate between two sets of accumulators, so that consecutive FMAs
// into one register are two keys apart (the FMA latency would otherwise bound
// the loop). Gathers prefetch whole rows in the first pass so the later
// passes hit the cache.
template <typename T, bool kGather, bool kWide>
static void pv_direct_pass(const float* const (&p)[3], Rows<T> values, const KeyList& list,
                           int c0, int d, float* const (&o)[3]) {
  constexpr int kW = kWide ? 8 : 0;  // offset of the second vector (unused when narrow)
  const __m256 zero = _mm256_setzero_ps();
  __m256 a0 = zero, a1 = zero, b0 = zero, b1 = zero, e0 = zero, e1 = zero;  // even keys
  __m256 f0 = zero, f1 = zero, g0 = zero, g1 = zero, h0 = zero, h1 = zero;  // odd keys
  auto accumulate = [&](int64_t i, __m256& r0, __m256& r1, __m256& s0, __m256& s1, __m256& t0,
                        __m256& t1) {
    if (c0 == 0 && i + kPrefetchDistance < list.count)
      prefetch_row(list_row<T, kGather>(values, list, i + kPrefetchDistance), d);
    const T* row = list_row<T, kGather>(values, list, i) + c0;
    __m256 x = load8(row);
    r0 = _mm256_fmadd_ps(_mm256_broadcast_ss(p[0] + i), x, r0);
    s0 = _mm256_fmadd_ps(_mm256_broadcast_ss(p[1] + i), x, s0);
    t0 = _mm256_fmadd_ps(_mm256_broadcast_ss(p[2] + i), x, t0);
    if constexpr (kWide) {
      x = load8(row + 8);
      r1 = _mm256_fmadd_ps(_mm256_broadcast_ss(p[0] + i), x, r1);
      s1 = _mm256_fmadd_ps(_mm256_broadcast_ss(p[1] + i), x, s1);
      t1 = _mm256_fmadd_ps(_mm256_broadcast_ss(p[2] + i), x, t1);
    }
  };
  const int64_t count = list.count;
  int64_t i = 0;
  for (; i + 2 <= count; i += 2) {
    accumulate(i, a0, a1, b0, b1, e0, e1);
    accumulate(i + 1, f0, f1, g0, g1, h0, h1);
  }
  if (i < count) accumulate(i, a0, a1, b0, b1, e0, e1);
  auto store = [&](float* out, __m256 lo, __m256 hi) {
    _mm256_storeu_ps(out + c0 + kW, _mm256_add_ps(_mm256_loadu_ps(out + c0 + kW), hi));
    _mm256_storeu_ps(out + c0, _mm256_add_ps(_mm256_loadu_ps(out + c0), lo));
  };
  if constexpr (kWide) {
    store(o[0], _mm256_add_ps(a0, f0), _mm256_add_ps(a1, f1));
    store(o[1], _mm256_add_ps(b0, g0), _mm256_add_ps(b1, g1));
    store(o[2], _mm256_add_ps(e0, h0), _mm256_add_ps(e1, h1));
  } else {
    _mm256_storeu_ps(o[0] + c0, _mm256_add_ps(_mm256_loadu_ps(o[0] + c0), _mm256_add_ps(a0, f0)));
    _mm256_storeu_ps(o[1] + c0, _mm256_add_ps(_mm256_loadu_ps(o[1] + c0), _mm256_add_ps(b0, g0)));
    _mm256_storeu_ps(o[2] + c0, _mm256_add_ps(_mm256_loadu_ps(o[2] + c0), _mm256_add_ps(e0, h0)));
  }
}

template <typename T, bool kGather>
static void pv_direct_rows(const float* p, int64_t ldp, int64_t n_rows, Rows<T> values,
                           const KeyList& list, int d, float* o, int64_t ldo) {
  alignas(32) float dummy[512];
  for (int64_t r0 = 0; r0 < n_rows; r0 += 3) {
    const int64_t n = std::min<int64_t>(3, n_rows - r0);
    const float* prows[3];
    float* orows[3];
    for (int64_t r = 0; r < 3; ++r) {
      prows[r] = p + (r0 + std::min(r, n - 1)) * ldp;
      orows[r] = r < n ? o + (r0 + r) * ldo : dummy;
    }
    int c0 = 0;
    for (; c0 + 16 <= d; c0 += 16) pv_direct_pass<T, kGather, true>(prows, values, list, c0, d, orows);
    if (c0 < d) pv_direct_pass<T, kGather, false>(prows, values, list, c0, d, orows);
  }
}

template <typename T>
void pv_direct(const float* p, int64_t ldp, int64_t n_rows, Rows<T> values, const KeyList& list,
               int d, float* o, int64_t ldo) {
  if (list.indices)
    pv_direct_rows<T, true>(p, ldp, n_rows, values, list, d, o, ldo);
  else
    pv_direct_rows<T, false>(p, ldp, n_rows, values, list, d, o, ldo);
}

template void pv_direct<float>(const float*, int64_t, int64_t, Rows<float>, const KeyList&, int,
                               float*, int64_t);
template void pv_direct<uint16_t>(const float*, int64_t, int64_t, Rows<uint16_t>, const KeyList&,
                                  int, float*, int64_t);

// ---------------------------------------------------------------------------
// Decode dot products: three rows x four keys per step, reduced with hadd.

static inline __m128 reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

template <typename T, bool kGather>
static void dot_block(const float* const (&q)[3], int d, Rows<T> keys, const KeyList& list,
                      float* const (&s)[3], const Rows<T>* companion) {
  // Four keys per step; a last partial step repeats its last key and drops
  // those results, so every key's dot product has the same rounding.
  for (int64_t i = 0; i < list.count; i += 4) {
    const int64_t valid = std::min<int64_t>(4, list.count - i);
    for (int u = 0; u < 4; ++u)
      if (i + u + kPrefetchDistance < list.count) {
        prefetch_row(list_row<T, kGather>(keys, list, i + u + kPrefetchDistance), d);
        if (companion)
          prefetch_row(list_row<T, kGather>(*companion, list, i + u + kPrefetchDistance), d);
      }
    const T* k0 = list_row<T, kGather>(keys, list, i);
    const T* k1 = list_row<T, kGather>(keys, list, i + std::min<int64_t>(1, valid - 1));
    const T* k2 = list_row<T, kGather>(keys, list, i + std::min<int64_t>(2, valid - 1));
    const T* k3 = list_row<T, kGather>(keys, list, i + std::min<int64_t>(3, valid - 1));
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;  // row 0, keys 0..3
    __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;                    // row 1
    __m256 c0 = a0, c1 = a0, c2 = a0, c3 = a0;                    // row 2
    // Three query vectors, one key vector at a time, twelve accumulators:
    // sixteen registers (holding four keys at once spilled an accumulator).
    for (int c = 0; c < d; c += 8) {
      const __m256 y0 = _mm256_loadu_ps(q[0] + c), y1 = _mm256_loadu_ps(q[1] + c),
                   y2 = _mm256_loadu_ps(q[2] + c);
      __m256 x = load8(k0 + c);
      a0 = _mm256_fmadd_ps(y0, x, a0), b0 = _mm256_fmadd_ps(y1, x, b0), c0 = _mm256_fmadd_ps(y2, x, c0);
      x = load8(k1 + c);
      a1 = _mm256_fmadd_ps(y0, x, a1), b1 = _mm256_fmadd_ps(y1, x, b1), c1 = _mm256_fmadd_ps(y2, x, c1);
      x = load8(k2 + c);
      a2 = _mm256_fmadd_ps(y0, x, a2), b2 = _mm256_fmadd_ps(y1, x, b2), c2 = _mm256_fmadd_ps(y2, x, c2);
      x = load8(k3 + c);
      a3 = _mm256_fmadd_ps(y0, x, a3), b3 = _mm256_fmadd_ps(y1, x, b3), c3 = _mm256_fmadd_ps(y2, x, c3);
    }
    const __m128 sums[3] = {reduce4(a0, a1, a2, a3), reduce4(b0, b1, b2, b3),
                            reduce4(c0, c1, c2, c3)};
    if (valid == 4) {
      for (int r = 0; r < 3; ++r) _mm_storeu_ps(s[r] + i, sums[r]);
    } else {
      alignas(16) float out[4];
      for (int r = 0; r < 3; ++r) {
        _mm_store_ps(out, sums[r]);
        for (int64_t u = 0; u < valid; ++u) s[r][i + u] = out[u];
      }
    }
  }
}

template <typename T, bool kGather>
static void dot_dispatch(const float* q, int64_t n_rows, int d, Rows<T> keys, const KeyList& list,
                         float* s, int64_t lds, const Rows<T>* companion) {
  // A last block of fewer than three rows repeats its last row, whose results
  // (the same values) land on that row again.
  for (int64_t r0 = 0; r0 < n_rows; r0 += 3) {
    const int64_t n = std::min<int64_t>(3, n_rows - r0);
    const float* qrows[3];
    float* srows[3];
    for (int64_t r = 0; r < 3; ++r) {
      qrows[r] = q + (r0 + std::min(r, n - 1)) * d;
      srows[r] = s + (r0 + std::min(r, n - 1)) * lds;
    }
    dot_block<T, kGather>(qrows, d, keys, list, srows, r0 == 0 ? companion : nullptr);
  }
}

template <typename T>
void dot_rows(const float* q, int64_t n_rows, int d, Rows<T> keys, const KeyList& list, float* s,
              int64_t lds, const Rows<T>* companion) {
  if (list.indices)
    dot_dispatch<T, true>(q, n_rows, d, keys, list, s, lds, companion);
  else
    dot_dispatch<T, false>(q, n_rows, d, keys, list, s, lds, companion);
}

template void dot_rows<float>(const float*, int64_t, int, Rows<float>, const KeyList&, float*,
                              int64_t, const Rows<float>*);
template void dot_rows<uint16_t>(const float*, int64_t, int, Rows<uint16_t>, const KeyList&,
                                 float*, int64_t, const Rows<uint16_t>*);

// ---------------------------------------------------------------------------
// Blocked online-softmax attention.

// How many keys of the ascending block `list` are <= limit.
static int64_t count_visible(const KeyList& list, int64_t limit) {
  if (!list.indices) return std::clamp<int64_t>(limit - list.first + 1, 0, list.count);
  return std::upper_bound(list.indices, list.indices + list.count, limit) - list.indices;
}

template <typename T>
void attend_block_rows(const float* q, int64_t n_rows, int d, Rows<T> keys, Rows<T> values,
                       const KeyList& list, const int64_t* limit, const PackedKv* packed,
                       SoftmaxState* states, float* acc, Scratch& scratch,
                       const KeptScores* kept) {
  const int64_t ld = acc_stride(d);
  float* s = scratch.get(n_rows * kKeyBlock);
  const int64_t max_limit = limit ? *std::max_element(limit, limit + n_rows) : 0;
  for (int64_t b0 = 0; b0 < list.count; b0 += kKeyBlock) {
    const KeyList block{list.indices ? list.indices + b0 : nullptr, list.first + b0,
                        std::min(kKeyBlock, list.count - b0)};
    if (limit && block.at(0) > max_limit) break;  // ascending keys: no row sees the rest
    // Keys past every row's limit (the causal diagonal) are neither scored nor summed.
    const int64_t n_keys = limit ? count_visible(block, max_limit) : block.count;
    const KeyList scored{block.indices, block.first, n_keys};
    if (packed) {
      qk_panels(q, n_rows, d, packed->key_panels + b0 * d, n_keys, s, kKeyBlock);
    } else {
      // A gather's value rows arrive while the scores are computed.
      dot_rows(q, n_rows, d, keys, scored, s, kKeyBlock, block.indices ? &values : nullptr);
    }
    const int64_t n_kept = kept ? std::clamp<int64_t>(kept->count - b0, 0, block.count) : 0;
    for (int64_t r = 0; r < n_rows; ++r) {
      float* row = s + r * kKeyBlock;
      if (n_kept > 0) std::copy(row, row + n_kept, kept->data + r * kept->ld + b0);
      const int64_t visible = limit ? count_visible(block, limit[r]) : n_keys;
      if (visible > 0) {
        SoftmaxState& state = states[r];
        state.raise_max(std::max(state.max, max_of(row, visible)), acc + r * ld, d);
        state.sum += exp2_shift_sum(row, visible, state.max);
      }
      std::fill(row + visible, row + n_keys, 0.0f);
    }
    if (packed)
      pv_packed(s, kKeyBlock, n_rows, packed->value_chunks + b0 * acc_stride(d), n_keys, d, acc,
                ld);
    else
      pv_direct(s, kKeyBlock, n_rows, values, scored, d, acc, ld);
  }
}

template void attend_block_rows<float>(const float*, int64_t, int, Rows<float>, Rows<float>,
                                       const KeyList&, const int64_t*, const PackedKv*,
                                       SoftmaxState*, float*, Scratch&, const KeptScores*);
template void attend_block_rows<uint16_t>(const float*, int64_t, int, Rows<uint16_t>,
                                          Rows<uint16_t>, const KeyList&, const int64_t*,
                                          const PackedKv*, SoftmaxState*, float*, Scratch&,
                                          const KeptScores*);

void write_output(const SoftmaxState* states, const float* acc, int64_t n_positions, int group,
                  int d, const GroupOutput& out) {
  for (int64_t t = 0; t < n_positions; ++t)
    for (int r = 0; r < group; ++r) {
      const int64_t row = t * group + r;
      const float inv = states[row].sum > 0 ? 1.0f / states[row].sum : 0.0f;
      float* dst = out.row(t, r);
      const float* src = acc + row * acc_stride(d);
      for (int c = 0; c < d; ++c) dst[c] = src[c] * inv;
    }
}

}  // namespace kascade::attention::kernels
