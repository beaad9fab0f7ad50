// Quantized matrix products; see matmul.h for the two paths and why.
#include "ops/matmul.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <cblas.h>

#include "core/error.h"
#include "core/half.h"
#include "ops/simd.h"

namespace kascade::ops {
namespace {

constexpr int kBlock = 32;  // values per block of every legacy quant type

// Dot products of quantized weight rows with the activations. Each 32-value
// block of activations becomes two int16 blocks: the values rounded at scale
// max/32767, and the rounding residual at 1/32768 of that scale (about 30
// bits in all, fp32-level accuracy even beside the huge outlier channels of
// LLM activations). The weight integers are widened once and multiply both
// with madd_epi16: fewer instructions than widening every weight to fp32.
// Each block's exact fp32 activation sum carries the zero point (Q4_0, Q5_0)
// and minimum (Q4_1, Q5_1) terms.
//
// A step's tokens share every weight block: it is read once and unpacked
// once per group of up to four tokens, and each token goes through the same
// operations in the same order whatever the other tokens are, so a token's
// result is bit for bit the same alone or in a batch (batched decode relies
// on it). What batching saves is the unpacking and the block's factors; the
// four madd_epi16 per block and token remain, so a token costs about 0.75x
// of a lone one.

// Tokens dotted together with each weight block, at most 4 (their scale and
// sum pairs fill one vector): four tokens' two chains (eight registers)
// leave room for the block's words and the temporaries among AVX2's sixteen.
constexpr int64_t kTokensPerGroup = 4;

// The activations of a step's tokens as int16 blocks, in groups of
// kTokensPerGroup tokens (the last one may be smaller). A group's entries lie
// together, block-major: the tokens dotted with one weight block side by
// side, and the group in one stretch of memory that stays in L1 while the
// rows pass (a stride per block would map the blocks onto few cache sets).
struct QuantizedTokens {
  int64_t n_tokens = 0, n_blocks = 0;
  std::vector<int16_t> values;     // 32 per entry
  std::vector<int16_t> residuals;  // 32 per entry, at scale / 32768
  std::vector<float> scale_sums;   // per entry the block's scale and its exact sum; zeros past the
                                   // last entry, as a group's pairs are read as eight floats

  int64_t group_size(int64_t first) const { return std::min(kTokensPerGroup, n_tokens - first); }
  // Entry of block `block` of the token `index` places into the group that starts at token `first`.
  int64_t entry(int64_t first, int64_t block, int64_t index) const {
    return first * n_blocks + block * group_size(first) + index;
  }
};

// 32 int32 -> 32 int16 in order (packs_epi32 interleaves 128-bit lanes).
inline void store_int16(int16_t* out, __m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xd8);
  const __m256i cd = _mm256_permute4x64_epi64(_mm256_packs_epi32(c, d), 0xd8);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), ab);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 16), cd);
}

// In fp32 with AVX2 (a decode step quantizes every matrix's input, serially
// before the threads start): value = rint(x / scale), and the residual
// x - value * scale comes exact out of one FMA, so value + residual / 32768
// reproduces x to about 2^-16 of the block's scale. Block b goes to entry
// b * stride of the outputs (32 values and residuals per entry).
void quantize_activations(const float* x, int64_t n_blocks, int64_t stride, int16_t* values, int16_t* residuals,
                          float* scale_sums) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* block = x + b * kBlock;
    __m256 v[4], max_abs = _mm256_setzero_ps(), sum = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(block + 8 * i);
      max_abs = _mm256_max_ps(max_abs, _mm256_andnot_ps(sign, v[i]));
      sum = _mm256_add_ps(sum, v[i]);
    }
    const float largest = horizontal_max(max_abs);
    const float scale = largest / 32767.0f;
    const __m256 inverse = _mm256_set1_ps(largest > 0 ? 1.0f / scale : 0.0f);
    const __m256 scale_v = _mm256_set1_ps(scale);
    const __m256 residual_inverse = _mm256_mul_ps(inverse, _mm256_set1_ps(32768.0f));
    __m256i rounded[4], residual[4];
    for (int i = 0; i < 4; ++i) {
      const __m256 value = _mm256_round_ps(_mm256_mul_ps(v[i], inverse), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      rounded[i] = _mm256_cvtps_epi32(value);  // |value| <= 32767
      const __m256 remainder = _mm256_fnmadd_ps(value, scale_v, v[i]);  // |remainder| <= scale / 2
      residual[i] = _mm256_cvtps_epi32(_mm256_mul_ps(remainder, residual_inverse));
    }
    const int64_t at = b * stride;
    store_int16(values + at * kBlock, rounded[0], rounded[1], rounded[2], rounded[3]);
    store_int16(residuals + at * kBlock, residual[0], residual[1], residual[2], residual[3]);
    scale_sums[2 * at] = scale;
    scale_sums[2 * at + 1] = horizontal_sum(sum);
  }
}

// Quantizes n_tokens rows of `cols` activations into `x`, whose buffers only
// grow (a decode step runs hundreds of products).
void quantize_tokens(const float* in, int64_t n_tokens, int64_t cols, QuantizedTokens& x) {
  x.n_tokens = n_tokens;
  x.n_blocks = cols / kBlock;
  const size_t entries = size_t(n_tokens * x.n_blocks);
  for (auto* buffer : {&x.values, &x.residuals})
    if (buffer->size() < entries * kBlock) buffer->resize(entries * kBlock);
  x.scale_sums.assign(2 * entries + 8, 0.0f);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t first = t / kTokensPerGroup * kTokensPerGroup;
    const int64_t at = x.entry(first, 0, t - first);
    quantize_activations(in + t * cols, x.n_blocks, x.group_size(first), x.values.data() + at * kBlock,
                         x.residuals.data() + at * kBlock, x.scale_sums.data() + 2 * at);
  }
}

// A block's 32 small integers as int16: values 0..15 and 16..31, the
// operands of madd_epi16.
struct BlockWords {
  __m256i low, high;
};

// 16 bytes of packed nibbles: low nibbles are values 0..15, high nibbles
// values 16..31 (the ggml order). Widened to 16-bit words first, so a word's
// high nibble is one shift away: three instructions for the 32 values.
inline BlockWords unpack_nibbles(const uint8_t* packed) {
  const __m256i words = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(packed)));
  return {_mm256_and_si256(words, _mm256_set1_epi16(0x0f)), _mm256_srli_epi16(words, 4)};
}

// 32 signed bytes.
inline BlockWords widen_bytes(const uint8_t* bytes) {
  return {_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes))),
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + 16)))};
}

// Adds 16 to value j where bit j of the 32 high bits is set (Q5 formats).
inline BlockWords add_high_bits(BlockWords nibbles, const uint8_t* packed_bits) {
  uint32_t bits;
  std::memcpy(&bits, packed_bits, 4);
  const __m256i bit_of_word = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192,
                                                 16384, int16_t(0x8000));
  auto sixteens = [&](uint32_t half) {
    const __m256i set = _mm256_and_si256(_mm256_set1_epi16(int16_t(half)), bit_of_word);
    return _mm256_and_si256(_mm256_cmpeq_epi16(set, bit_of_word), _mm256_set1_epi16(16));
  };
  return {_mm256_or_si256(nibbles.low, sixteens(bits & 0xffff)), _mm256_or_si256(nibbles.high, sixteens(bits >> 16))};
}

// Block factors (d, m) from a block that starts with fp16 d and m.
inline __m128 scale_and_min_at(const uint8_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  return _mm_cvtph_ps(_mm_cvtsi32_si128(int(bits)));  // F16C
}

// Block factors (d, zero_point * d) from a block that starts with fp16 d.
inline __m128 scale_at(const uint8_t* p, float zero_point) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  const float d = _cvtsh_ss(bits);
  return _mm_setr_ps(d, zero_point * d, 0.0f, 0.0f);
}

// The block formats (ggml layouts). Each row is a run of groups of kBlocks
// 32-value blocks in kBytes: one block for the legacy formats, eight (256
// values) for the K-quants. A group's header (its scales) is read once into
// Factors; then each block gives its 32 integers as words and its factors:
// the scale of the words and the factor of the offset term (the minimum, or
// the zero point times d, times the block's activation sum).
// The legacy formats: one block a group, whose factors are the group's.
struct OneBlock {
  static constexpr int kBlocks = 1;
  using Factors = __m128;
  static __m128 block_factors(const Factors& f, int) { return f; }
};

struct Q4_0 : OneBlock {  // {d, qs[16]}
  static constexpr int kBytes = 18;
  static Factors factors(const uint8_t* group) { return scale_at(group, -8.0f); }
  static BlockWords words(const uint8_t* group, int) { return unpack_nibbles(group + 2); }
};

struct Q4_1 : OneBlock {  // {d, m, qs[16]}
  static constexpr int kBytes = 20;
  static Factors factors(const uint8_t* group) { return scale_and_min_at(group); }
  static BlockWords words(const uint8_t* group, int) { return unpack_nibbles(group + 4); }
};

struct Q5_0 : OneBlock {  // {d, qh[4], qs[16]}
  static constexpr int kBytes = 22;
  static Factors factors(const uint8_t* group) { return scale_at(group, -16.0f); }
  static BlockWords words(const uint8_t* group, int) { return add_high_bits(unpack_nibbles(group + 6), group + 2); }
};

struct Q5_1 : OneBlock {  // {d, m, qh[4], qs[16]}
  static constexpr int kBytes = 24;
  static Factors factors(const uint8_t* group) { return scale_and_min_at(group); }
  static BlockWords words(const uint8_t* group, int) { return add_high_bits(unpack_nibbles(group + 8), group + 4); }
};

struct Q8_0 : OneBlock {  // {d, qs[32]}: no offset, but its (zero) term keeps one code path
  static constexpr int kBytes = 34;
  static Factors factors(const uint8_t* group) { return scale_at(group, 0.0f); }
  static BlockWords words(const uint8_t* group, int) { return widen_bytes(group + 2); }
};

// 32 bytes of nibbles as 32 words: the low nibbles (shift 0) or the high ones (shift 4).
inline BlockWords nibbles_of_32_bytes(const uint8_t* bytes, int shift) {
  const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes));
  const __m256i values = _mm256_and_si256(_mm256_srli_epi16(packed, shift), _mm256_set1_epi8(0x0f));
  return {_mm256_cvtepu8_epi16(_mm256_castsi256_si128(values)), _mm256_cvtepu8_epi16(_mm256_extracti128_si256(values, 1))};
}

// Q4_K and Q5_K: {d, dmin, scales[12], (Q5_K: qh[32]), qs[128]}; block j's
// value is (d scale_j) q - dmin min_j, its nibbles the low (j even) or high
// (j odd) halves of the bytes 32 (j / 2) .. 32 (j / 2) + 31 of qs.
struct KScales {
  float scales[8], offsets[8];  // d scale_j and -dmin min_j
};
// The 12 bytes of six-bit scales and mins (unpack_k_scales in quant/dequant.cc has the
// layout) four at a time in 32-bit words: scales 0-3 and mins 0-3 are the low
// six bits of words a and b, scales and mins 4-7 the nibbles of word c with
// the top two bits of a and b above them.
inline KScales k_scales(const uint8_t* group) {
  uint32_t a, b, c;
  std::memcpy(&a, group + 4, 4);
  std::memcpy(&b, group + 8, 4);
  std::memcpy(&c, group + 12, 4);
  const uint64_t scales = uint64_t(a & 0x3f3f3f3f) | uint64_t((c & 0x0f0f0f0f) | ((a >> 2) & 0x30303030)) << 32;
  const uint64_t mins = uint64_t(b & 0x3f3f3f3f) | uint64_t(((c >> 4) & 0x0f0f0f0f) | ((b >> 2) & 0x30303030)) << 32;
  const auto widen = [](uint64_t bytes, float factor) {
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(bytes)))),
                         _mm256_set1_ps(factor));
  };
  const __m128 d_dmin = scale_and_min_at(group);
  KScales f;
  _mm256_storeu_ps(f.scales, widen(scales, _mm_cvtss_f32(d_dmin)));
  _mm256_storeu_ps(f.offsets, widen(mins, -_mm_cvtss_f32(_mm_movehdup_ps(d_dmin))));
  return f;
}

// Q4_K and Q5_K: eight blocks a group, each with its scale and offset factor.
struct EightScaledBlocks {
  static constexpr int kBlocks = 8;
  using Factors = KScales;
  static Factors factors(const uint8_t* group) { return k_scales(group); }
  static __m128 block_factors(const Factors& f, int j) { return _mm_setr_ps(f.scales[j], f.offsets[j], 0.0f, 0.0f); }
};

struct Q4_K : EightScaledBlocks {
  static constexpr int kBytes = 144;
  static BlockWords words(const uint8_t* group, int j) { return nibbles_of_32_bytes(group + 16 + 32 * (j / 2), 4 * (j % 2)); }
};

struct Q5_K : EightScaledBlocks {  // bit j of qh byte l is the fifth bit of value l of block j
  static constexpr int kBytes = 176;
  static BlockWords words(const uint8_t* group, int j) {
    const BlockWords low = nibbles_of_32_bytes(group + 48 + 32 * (j / 2), 4 * (j % 2));
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + 16));
    const __m256i fifth = _mm256_and_si256(_mm256_srli_epi16(bits, j), _mm256_set1_epi8(1));
    const __m256i sixteens = _mm256_slli_epi16(fifth, 4);  // 0 or 16 per byte: no carry into the next byte
    return {_mm256_or_si256(low.low, _mm256_cvtepu8_epi16(_mm256_castsi256_si128(sixteens))),
            _mm256_or_si256(low.high, _mm256_cvtepu8_epi16(_mm256_extracti128_si256(sixteens, 1)))};
  }
};

// Q6_K: {ql[128], qh[64], scales[16] int8, d}; block j (32 values) takes its
// low nibbles from bytes 64 (j / 4) + 32 (j % 2) of ql (low halves for
// j % 4 < 2, high ones after), its top two bits from bits 2 (j % 4) of qh
// bytes 128 + 32 (j / 4); value = d scale (q - 32), scale 2j for values
// 0-15 and 2j + 1 for 16-31. The words carry scale (q - 32) (at most 4,096
// in magnitude), the factor is d.
struct Q6_K {
  static constexpr int kBytes = 210, kBlocks = 8;
  using Factors = __m128;
  static Factors factors(const uint8_t* group) { return scale_at(group + 208, 0.0f); }  // no offset, as Q8_0
  static BlockWords words(const uint8_t* group, int j) {
    const int quarter = j % 4;
    const __m256i low = _mm256_and_si256(
        _mm256_srli_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + 64 * (j / 4) + 32 * (quarter % 2))),
                          4 * (quarter / 2)),
        _mm256_set1_epi8(0x0f));
    const __m256i high = _mm256_and_si256(
        _mm256_srli_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(group + 128 + 32 * (j / 4))), 2 * quarter),
        _mm256_set1_epi8(3));
    const __m256i q = _mm256_or_si256(low, _mm256_slli_epi16(high, 4));  // 0..63 per byte
    const __m256i centered_low = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(q)), _mm256_set1_epi16(32));
    const __m256i centered_high =
        _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(q, 1)), _mm256_set1_epi16(32));
    const int8_t* scales = reinterpret_cast<const int8_t*>(group + 192);
    return {_mm256_mullo_epi16(centered_low, _mm256_set1_epi16(scales[2 * j])),
            _mm256_mullo_epi16(centered_high, _mm256_set1_epi16(scales[2 * j + 1]))};
  }
  static __m128 block_factors(const Factors& f, int) { return f; }
};

// Adds a block to the chains of kTokens tokens (entries from `at`):
// products[i] gets token i's sum over the block times the block's scale
// times its activation scale, `offsets` (lane 2i + 1 for token i) the offset
// factor times its exact block sum. The block is unpacked once for all of them.
template <int kTokens>
[[gnu::always_inline]] inline void add_block(const BlockWords& q, __m128 factors, const QuantizedTokens& x, int64_t at,
                                             __m256 (&products)[kTokens], __m256& offsets) {
  const __m256 d = _mm256_broadcastss_ps(factors);
  // (d * scale, offset factor * sum) for each token (lanes past kTokens
  // hold the next entries' or zeros: unused).
  const float* pairs = &x.scale_sums[size_t(2 * at)];
  const __m256 scaled =
      _mm256_mul_ps(_mm256_castpd_ps(_mm256_broadcastsd_pd(_mm_castps_pd(factors))), _mm256_loadu_ps(pairs));
  offsets = _mm256_add_ps(offsets, scaled);
  const int16_t* values = &x.values[size_t(at * kBlock)];
  const int16_t* residuals = &x.residuals[size_t(at * kBlock)];
  for (int i = 0; i < kTokens; ++i) {
    auto sum_of = [&](const int16_t* v) {
      const __m256i v_low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i * kBlock));
      const __m256i v_high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i * kBlock + 16));
      return _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_madd_epi16(q.low, v_low), _mm256_madd_epi16(q.high, v_high)));
    };
    const __m256 sum = _mm256_fmadd_ps(sum_of(residuals), _mm256_set1_ps(1.0f / 32768.0f), sum_of(values));
    // Token 0's d * scale is lane 0 of `scaled`; the others' are formed again
    // (the same product), cheaper than moving lanes.
    const __m256 scale = i == 0 ? _mm256_broadcastss_ps(_mm256_castps256_ps128(scaled))
                                : _mm256_mul_ps(d, _mm256_broadcast_ss(pairs + 2 * i));
    products[i] = _mm256_fmadd_ps(sum, scale, products[i]);
  }
}

// out[i * out_stride] = row . token (first + i) for i < kTokens (at most 4:
// their scale and sum pairs fill one vector). Even and odd blocks go to
// separate chains: a row has few blocks (18 at d_model 576), so with one
// chain the FMA latency set the pace of a lone token. The two chains are
// named variables, not an array indexed by the block's parity: indexed, the
// compiler kept them on the stack, and every block waited on a store and a
// reload. Every token goes through the same operations in the same order as
// it would alone.
template <typename Format, int kTokens>
void row_dots(const uint8_t* row, const QuantizedTokens& x, int64_t first, float* out, int64_t out_stride) {
  static_assert(kTokens >= 1 && kTokens <= 4);
  __m256 even[kTokens], odd[kTokens], even_offsets = _mm256_setzero_ps(), odd_offsets = _mm256_setzero_ps();
  for (int i = 0; i < kTokens; ++i) even[i] = odd[i] = _mm256_setzero_ps();
  const int64_t n_groups = x.n_blocks / Format::kBlocks, at = x.entry(first, 0, 0);
  const auto add = [&](const uint8_t* group, const typename Format::Factors& factors, int64_t g, int j,
                       __m256(&chain)[kTokens], __m256& offsets) {
    const int64_t b = g * Format::kBlocks + j;
    add_block<kTokens>(Format::words(group, j), Format::block_factors(factors, j), x, at + b * kTokens, chain,
                       offsets);
  };
  if constexpr (Format::kBlocks % 2 == 0) {
    for (int64_t g = 0; g < n_groups; ++g) {
      const uint8_t* group = row + g * Format::kBytes;
      const typename Format::Factors factors = Format::factors(group);
      for (int j = 0; j < Format::kBlocks; j += 2) {
        add(group, factors, g, j, even, even_offsets);
        add(group, factors, g, j + 1, odd, odd_offsets);
      }
    }
  } else {
    static_assert(Format::kBlocks == 1);
    const auto add_group = [&](int64_t g, __m256(&chain)[kTokens], __m256& offsets) {
      const uint8_t* group = row + g * Format::kBytes;
      add(group, Format::factors(group), g, 0, chain, offsets);
    };
    int64_t g = 0;
    for (; g + 2 <= n_groups; g += 2) {
      add_group(g, even, even_offsets);
      add_group(g + 1, odd, odd_offsets);
    }
    if (g < n_groups) add_group(g, even, even_offsets);
  }
  alignas(32) float offsets[8];
  _mm256_store_ps(offsets, _mm256_add_ps(even_offsets, odd_offsets));
  for (int i = 0; i < kTokens; ++i)
    out[i * out_stride] = horizontal_sum(_mm256_add_ps(even[i], odd[i])) + offsets[2 * i + 1];
}

// Rows per work item of the matrix-vector path: enough to amortise
// scheduling, small enough to balance two threads on the output projection.
constexpr int64_t kRowsPerTask = 32;
// How far ahead (in rows) the matrix-vector product prefetches weights.
constexpr int64_t kPrefetchRows = 4;

template <typename Format>
void matvec_blocks(const Weight& w, const float* in, int64_t n_tokens, float* out) {
  // The caller's thread quantizes (reusing its buffers); the threads below share them.
  static thread_local QuantizedTokens tokens;
  const QuantizedTokens& x = tokens;
  quantize_tokens(in, n_tokens, w.cols, tokens);
  const int64_t n_tasks = (w.rows + kRowsPerTask - 1) / kRowsPerTask;
#pragma omp parallel for schedule(static)
  for (int64_t task = 0; task < n_tasks; ++task) {
    const int64_t first_row = task * kRowsPerTask, end_row = std::min(w.rows, first_row + kRowsPerTask);
    // Token groups outside, rows inside: a group's activations (up to 24 KiB
    // at 1,536 columns) stay in L1 while the task's rows pass.
    for (int64_t t = 0; t < n_tokens; t += kTokensPerGroup) {
      for (int64_t r = first_row; r < end_row; ++r) {
        // The hardware prefetcher alone leaves each row's first block waiting
        // on memory (later groups find the task's rows in cache).
        if (t == 0 && r + kPrefetchRows < w.rows)
          for (uint64_t byte = 0; byte < w.row_bytes; byte += 64)
            _mm_prefetch(reinterpret_cast<const char*>(w.row(r + kPrefetchRows) + byte), _MM_HINT_T0);
        float* at = out + t * w.rows + r;
        switch (x.group_size(t)) {
          case 4: row_dots<Format, 4>(w.row(r), x, t, at, w.rows); break;
          case 3: row_dots<Format, 3>(w.row(r), x, t, at, w.rows); break;
          case 2: row_dots<Format, 2>(w.row(r), x, t, at, w.rows); break;
          default: row_dots<Format, 1>(w.row(r), x, t, at, w.rows); break;
        }
      }
    }
  }
}

// Float weights: each row (dequantized from fp16 or bf16) dotted in fp32 with every token.
void matvec_float(const Weight& w, const float* in, int64_t n_tokens, float* out) {
  const int64_t n_tasks = (w.rows + kRowsPerTask - 1) / kRowsPerTask;
#pragma omp parallel
  {
    std::vector<float> row(size_t(w.cols));
#pragma omp for schedule(static)
    for (int64_t task = 0; task < n_tasks; ++task) {
      const int64_t end = std::min(w.rows, (task + 1) * kRowsPerTask);
      for (int64_t r = task * kRowsPerTask; r < end; ++r) {
        const float* values = reinterpret_cast<const float*>(w.row(r));
        if (w.type != TensorType::F32) {
          dequantize_row(w.type, w.row(r), row.data(), w.cols);
          values = row.data();
        }
        for (int64_t t = 0; t < n_tokens; ++t) out[t * w.rows + r] = dot_f32(values, in + t * w.cols, w.cols);
      }
    }
  }
}

// Dequantize row blocks, multiply each with sgemm.
void matmul_gemm(const Weight& w, const float* in, int64_t n_tokens, float* out) {
  // Blocks of at most 384K dequantized floats (1.5 MiB): sgemm repacks the
  // activations on every call and packs the block into its own cache-sized
  // panels, so fewer, larger calls win (the down projection's 80-row blocks
  // of 128K floats ran 6-10 % slower than 144-row ones). Their count is a
  // multiple of the thread count so that every thread gets the same rows:
  // the 192-row K and V projections once ran on one thread.
  const int64_t max_rows = std::clamp<int64_t>((int64_t(384) * 1024 / w.cols) / 16 * 16, 16, 1024);
  const int64_t n_threads = std::max(1, omp_get_max_threads());
  const int64_t n_even = ((w.rows + max_rows - 1) / max_rows + n_threads - 1) / n_threads * n_threads;
  const int64_t rows_per_block = std::max<int64_t>(8, ((w.rows + n_even - 1) / n_even + 7) / 8 * 8);
  const int64_t n_row_blocks = (w.rows + rows_per_block - 1) / rows_per_block;
#pragma omp parallel
  {
    std::vector<float> block(size_t(rows_per_block * w.cols));
#pragma omp for schedule(dynamic, 1)
    for (int64_t rb = 0; rb < n_row_blocks; ++rb) {
      const int64_t first = rb * rows_per_block;
      const int64_t count = std::min(rows_per_block, w.rows - first);
      for (int64_t r = 0; r < count; ++r) dequantize_weight_row(w, first + r, block.data() + r * w.cols);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n_tokens), int(count), int(w.cols), 1.0f, in,
                  int(w.cols), block.data(), int(w.cols), 0.0f, out + first, int(w.rows));
    }
  }
}

}  // namespace

void dequantize_weight_row(const Weight& w, int64_t r, float* out) {
  if (w.type == TensorType::F32)
    std::memcpy(out, w.row(r), size_t(w.cols) * sizeof(float));
  else
    dequantize_row(w.type, w.row(r), out, w.cols);
}

void matmul_per_token(const Weight& w, const float* in, int64_t n_tokens, float* out) {
  switch (w.type) {
    case TensorType::Q4_0: return matvec_blocks<Q4_0>(w, in, n_tokens, out);
    case TensorType::Q4_1: return matvec_blocks<Q4_1>(w, in, n_tokens, out);
    case TensorType::Q5_0: return matvec_blocks<Q5_0>(w, in, n_tokens, out);
    case TensorType::Q5_1: return matvec_blocks<Q5_1>(w, in, n_tokens, out);
    case TensorType::Q8_0: return matvec_blocks<Q8_0>(w, in, n_tokens, out);
    case TensorType::Q4_K: return matvec_blocks<Q4_K>(w, in, n_tokens, out);
    case TensorType::Q5_K: return matvec_blocks<Q5_K>(w, in, n_tokens, out);
    case TensorType::Q6_K: return matvec_blocks<Q6_K>(w, in, n_tokens, out);
    default: return matvec_float(w, in, n_tokens, out);
  }
}

void matmul(const Weight& w, const float* in, int64_t n_tokens, float* out) {
  if (n_tokens >= kGemmMinTokens) return matmul_gemm(w, in, n_tokens, out);
  matmul_per_token(w, in, n_tokens, out);
}

}  // namespace kascade::ops
