// AVX2/FMA/F16C inner loops of CPU attention, shared by every strategy:
// packing of queries and key panels, the QK^T and PV register-blocked
// micro-kernels, decode-style dot products, a vector exp2, and the online
// softmax state with its merge. Internal to src/attention.
//
// Scores are kept in the log2 domain: queries are pre-multiplied by
// log2(e)/sqrt(d), so exp(q.k/sqrt(d)) == exp2(row . key).
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <span>

#include "attention/attention.h"
#include "attention/rows.h"
#include "ops/simd.h"

namespace kascade::attention::kernels {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int kPanelWidth = 16;  // keys per packed key panel (two ymm vectors)
constexpr int kChunkWidth = 16;  // value columns per packed value chunk
constexpr int kMaxRows = 6;      // rows of the QK^T / PV micro-kernels
constexpr int64_t kKeyBlock = 256;  // keys per online-softmax block

inline int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Decode splits a key list of n keys into equal chunks of at most 512 keys,
// attended in parallel and merged (819 kept keys: 410 + 409, not 512 + 307, so
// threads get equal work). Dense decode, the anchor's fused dense pass and the
// sparse passes all split this way: equal lists give equal bits.
inline int64_t decode_chunk_keys(int64_t n) {
  constexpr int64_t kMaxChunkKeys = 512;
  const int64_t chunks = (n + kMaxChunkKeys - 1) / kMaxChunkKeys;
  return chunks > 0 ? (n + chunks - 1) / chunks : 0;
}

// A 64-byte aligned float buffer that only grows (scratch reused across calls).
class Scratch {
 public:
  float* get(int64_t n) {
    if (n > capacity_) {
      capacity_ = round_up(n, 16);
      data_.reset(static_cast<float*>(std::aligned_alloc(64, size_t(capacity_) * sizeof(float))));
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> data_;
  int64_t capacity_ = 0;
};

// ---------------------------------------------------------------------------
// Element access: the cache holds fp32 or fp16 (uint16_t bits).

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) { return ops::load_f16x8(p); }

// Rows of one KV head: row j at data + j * stride elements.
template <typename T>
struct Rows {
  const T* data = nullptr;
  int64_t stride = 0;
  const T* row(int64_t j) const { return data + j * stride; }
};

// Which key rows a kernel visits: `count` keys, key i being first + i, or
// indices[i] when indices is set (a gather).
struct KeyList {
  const int32_t* indices = nullptr;
  int64_t first = 0;
  int64_t count = 0;
  int64_t at(int64_t i) const { return indices ? indices[i] : first + i; }
};

// ---------------------------------------------------------------------------
// exp2 for 8 floats x <= 0, the arguments of a softmax (score - max or
// score - lse): relative error under 2 ulp; x below -126 gives 0 (so masked
// scores of -inf vanish), NaN stays NaN. Positive x are not supported.
inline __m256 exp2_ps(__m256 x) {
  // max_ps returns its second operand when one is NaN: NaN passes through.
  const __m256 clamped = _mm256_max_ps(_mm256_set1_ps(-127.0f), x);
  const __m256 n = _mm256_round_ps(clamped, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(clamped, n);  // [-0.5, 0.5]
  // 2^f = e^(f ln2): Taylor terms (ln2)^k / k!, k <= 6 (remainder < 1.2e-7).
  __m256 p = _mm256_set1_ps(1.5403530393381606e-04f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3333558146428441e-03f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.6181291076284770e-03f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.5504108664821576e-02f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.4022650695910071e-01f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.9314718055994531e-01f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 result = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
  return _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_LT_OQ), result);
}

inline float exp2_scalar(float x) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, exp2_ps(_mm256_set1_ps(x)));
  return lanes[0];
}

using ops::horizontal_max;
using ops::horizontal_sum;

// max of x[0, n)
float max_of(const float* x, int64_t n);
// x[i] = exp2(x[i] - shift) for i < n; returns the sum.
float exp2_shift_sum(float* x, int64_t n, float shift);
// sum of exp2(x[i] - shift), x unchanged.
float exp2_sum(const float* x, int64_t n, float shift);
// y[i] += exp2(x[i] - shift), or with `max`, y[i] = max(y[i], exp2(x[i] - shift)).
// Equal x give bit-equal terms, so equal scores pool to equal sums (exact ties).
void add_exp2(float* y, const float* x, int64_t n, float shift, bool max = false);
// y[i] += a * x[i]
void axpy(float* y, const float* x, int64_t n, float a);

// ---------------------------------------------------------------------------
// Online softmax state of one query row (log2 domain), shared by the dense,
// anchor and reuse paths and by split-KV merges. The row's unnormalised output
// accumulator lives beside it (d floats).
struct SoftmaxState {
  float max = kNegInf;  // running max of scores
  float sum = 0;        // sum of exp2(score - max)

  // Folds `other` (with its accumulator) into this state and `acc`.
  void merge(const SoftmaxState& other, float* acc, const float* other_acc, int d);
  // Raises the running max to new_max (>= max), rescaling sum and acc.
  void raise_max(float new_max, float* acc, int d);
  // Log-sum-exp of the scores seen so far: base 2 in the kernels' units, and natural.
  float lse2() const { return max + std::log2(sum); }
  float lse() const { return lse2() * kLn2; }
};

// ---------------------------------------------------------------------------
// Packing.

// Packs the group's query rows (t, r) into dst[(t * g + r) * d], multiplied by
// log2(e)/sqrt(d).
void pack_queries(const GroupQueries& queries, int d, float* dst);

// Packs keys into panels of kPanelWidth: key i of `keys` goes to panel i / 16,
// element (c, i % 16) at panels[(i / 16) * d * 16 + c * 16 + i % 16], fp32,
// tail of the last panel zero. Needs round_up(count, 16) * d floats.
template <typename T>
void pack_key_panels(Rows<T> keys, const KeyList& list, int d, float* panels);

// S[r][i] = Q[r] . panel key i for r < n_rows, i < round_up(n_keys, 16)
// (columns past n_keys hold garbage). Q rows packed with stride d.
void qk_panels(const float* q, int64_t n_rows, int d, const float* panels, int64_t n_keys,
               float* s, int64_t lds);

// Packs values for pv_packed: list key i goes to block i / kKeyBlock, chunk
// c of 16 columns at out[(i / kKeyBlock) * kKeyBlock * Dp + c * kKeyBlock * 16
// + (i % kKeyBlock) * 16] with Dp = round_up(d, 16) (zero-padded columns).
// Needs round_up(count, kKeyBlock) * Dp floats, 32-byte aligned.
template <typename T>
void pack_value_chunks(Rows<T> values, const KeyList& list, int d, float* out);

// O[r] += sum_i P[r][i] * V[i] for r < n_rows, i < n_keys <= kKeyBlock, V
// one packed block. O rows must hold round_up(d, 16) floats.
void pv_packed(const float* p, int64_t ldp, int64_t n_rows, const float* value_block,
               int64_t n_keys, int d, float* o, int64_t ldo);

// O[r] += sum_i P[r][i] * V[list.at(i)] straight from the cache (decode).
template <typename T>
void pv_direct(const float* p, int64_t ldp, int64_t n_rows, Rows<T> values, const KeyList& list,
               int d, float* o, int64_t ldo);

// S[r][i] = Q[r] . K[list.at(i)] straight from the cache (decode: few rows,
// each key used once, so no packing). Rows of `companion` (the values, when
// the caller reads them next) are prefetched along with the keys.
template <typename T>
void dot_rows(const float* q, int64_t n_rows, int d, Rows<T> keys, const KeyList& list, float* s,
              int64_t lds, const Rows<T>* companion = nullptr);

// ---------------------------------------------------------------------------
// Row stride of output accumulators: d rounded to whole value chunks.
inline int64_t acc_stride(int d) { return round_up(d, kChunkWidth); }

// A key list packed for the prefill kernels (pack_key_panels and
// pack_value_chunks of the same list).
struct PackedKv {
  const float* key_panels = nullptr;
  const float* value_chunks = nullptr;
};

// Raw scores of list keys [0, count) of each row, kept (copied out before the
// softmax) for a selection fused with dense attention; row r at data + r * ld.
struct KeptScores {
  float* data = nullptr;
  int64_t ld = 0;
  int64_t count = 0;
};

// Attention of packed query rows over an ascending key list, with online
// softmax over blocks of kKeyBlock keys. Row r sees the list keys <= limit[r]
// (limit null: all). With `packed` the scores and values come from the packed
// list (prefill); without, straight from the cache (decode, few rows).
// States and acc (n_rows x acc_stride(d)) are updated, not reset, so calls
// chain and split-KV partial results merge. `kept` copies raw scores out.
template <typename T>
void attend_block_rows(const float* q, int64_t n_rows, int d, Rows<T> keys, Rows<T> values,
                       const KeyList& list, const int64_t* limit, const PackedKv* packed,
                       SoftmaxState* states, float* acc, Scratch& scratch,
                       const KeptScores* kept = nullptr);

// Writes acc / sum (acc rows acc_stride(d) apart, t * g + r order) into the
// strided output rows.
void write_output(const SoftmaxState* states, const float* acc, int64_t n_positions, int group,
                  int d, const GroupOutput& out);

}  // namespace kascade::attention::kernels
